"""A Spark standalone cluster, a master and one worker, from pyspark's own `spark-class` (no
Docker): where the integration suite runs the checker as a cluster would, and where a user points
the `spark_standalone` connection. Local mode (the `spark_default` connection) stays the default.

The worker takes 2 cores and SEMANTICS_SPARK_WORKER_MEMORY (2g); an application's executors start
only while it runs. The master, the worker and every application authenticate with a shared secret
(spark.authenticate), which each process takes from its environment (_SPARK_AUTH_SECRET, never its
arguments), an application from the Spark connection's password: a process that lacks it cannot
submit code to the cluster, whose executors hold the applications' secrets."""

from __future__ import annotations

import os
from pathlib import Path

from devstack.credentials import secret
from devstack.paths import LOGS, REPO, RUN, VAR, write_private
from devstack.ports import HOST, port_open, require_port_free
from devstack.processes import StackError, pid_alive, read_pid, report, spawn, terminate, wait_until
from devstack.service import Process, Service

MASTER_PORT = int(os.environ.get("SEMANTICS_SPARK_MASTER_PORT", "7077"))
MASTER_UI_PORT = int(os.environ.get("SEMANTICS_SPARK_MASTER_UI_PORT", "8091"))
WORKER_PORT = int(os.environ.get("SEMANTICS_SPARK_WORKER_PORT", "7078"))
WORKER_UI_PORT = int(os.environ.get("SEMANTICS_SPARK_WORKER_UI_PORT", "8092"))
WORKER_MEMORY = os.environ.get("SEMANTICS_SPARK_WORKER_MEMORY", "2g")
MASTER_URL = f"spark://{HOST}:{MASTER_PORT}"
CONN_ID = "spark_standalone"
PROPERTIES_FILE = VAR / "spark" / "spark-defaults.conf"
AUTH_CONF = {"spark.authenticate": "true"}
# The daemons' own settings: the REST submission server (6066) answers without spark.authenticate's
# secret, so it stays off; applications are submitted to the authenticated port alone.
DAEMON_CONF = {**AUTH_CONF, "spark.master.rest.enabled": "false"}


class SparkDaemon:
    def __init__(self, name: str, port: int, ui_port: int, cmd: list[str]):
        self.name, self.port, self.ui_port, self.cmd = name, port, ui_port, cmd
        self.pid_file, self.log_file = RUN / f"{name}.pid", LOGS / f"{name}.log"


def _spark_home() -> Path:
    """pyspark's package folder: its jars and scripts are a Spark distribution's."""
    found = sorted((REPO / ".venv" / "lib").glob("python3*/site-packages/pyspark/jars"))
    if not found:
        raise StackError("spark: no pyspark in .venv; run local/setup first")
    return found[-1].parent


MASTER = SparkDaemon(
    "spark-master",
    MASTER_PORT,
    MASTER_UI_PORT,
    [
        "org.apache.spark.deploy.master.Master",
        *("--host", HOST, "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)),
        *("--properties-file", str(PROPERTIES_FILE)),
    ],
)
WORKER = SparkDaemon(
    "spark-worker",
    WORKER_PORT,
    WORKER_UI_PORT,
    [
        "org.apache.spark.deploy.worker.Worker",
        *("--host", HOST, "--port", str(WORKER_PORT), "--webui-port", str(WORKER_UI_PORT)),
        *("--cores", "2", "--memory", WORKER_MEMORY, "--work-dir", str(VAR / "spark" / "work")),
        *("--properties-file", str(PROPERTIES_FILE)),
        MASTER_URL,
    ],
)
DAEMONS = (MASTER, WORKER)


def spark_pid(s: SparkDaemon) -> int | None:
    pid = read_pid(s.pid_file)
    return pid if pid_alive(pid) else None


def connections() -> dict[str, dict]:
    # The worker has 2 cores: a few shuffle and Delta state partitions, as local mode has, over the
    # cluster defaults.
    conf = {
        "spark.sql.shuffle.partitions": "8",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.executor.memory": "1g",
        **AUTH_CONF,
    }
    return {
        CONN_ID: {
            "conn_type": "spark",
            "host": f"spark://{HOST}",
            "port": MASTER_PORT,
            "password": secret("SPARK_AUTH_SECRET"),
            "extra": {"conf": conf},
        }
    }


def start_spark() -> str:
    write_private(PROPERTIES_FILE, "".join(f"{k} {v}\n" for k, v in DAEMON_CONF.items()))
    started = []
    for s in DAEMONS:
        if spark_pid(s):
            continue
        require_port_free(s.port, s.name)
        (VAR / "spark" / "work").mkdir(parents=True, exist_ok=True)
        home = _spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
            "SPARK_LOCAL_IP": HOST,
            "SPARK_NO_DAEMONIZE": "1",
            "_SPARK_AUTH_SECRET": secret("SPARK_AUTH_SECRET"),
        }
        spawn([str(home / "bin" / "spark-class"), *s.cmd], s.log_file, s.pid_file, env=env)
        wait_until(lambda s=s: port_open(s.port) or not spark_pid(s), 60, s.name, s.log_file)
        started.append(s.name)
    wait_until(_worker_registered, 60, "spark-worker (registered with the master)", WORKER.log_file)
    return f"{MASTER_URL}, 1 worker of 2 cores and {WORKER_MEMORY}" + ("" if started else " (already running)")


def _worker_registered() -> bool:
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{HOST}:{MASTER_UI_PORT}/json/", timeout=2) as r:
            return any(w.get("state") == "ALIVE" for w in json.loads(r.read()).get("workers", []))
    except OSError:
        return False


def stop_spark() -> None:
    for s in reversed(DAEMONS):
        terminate(spark_pid(s), 20)


def _stop() -> None:
    stop_spark()
    report("spark", "stopped")


SERVICE = Service(
    "spark",
    lambda: report("spark", start_spark()),
    _stop,
    tuple(Process(s.name, s.port, lambda s=s: spark_pid(s)) for s in DAEMONS),
    connections,
)
