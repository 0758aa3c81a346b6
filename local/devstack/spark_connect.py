"""A Spark Connect server (pyspark's own `spark-connect` jar, no Docker): where the checker runs
for a worker with Python only and no JDK (`spark_connect`'s master is `sc://localhost:PORT`). The
server is the driver: it holds the Kafka source, Delta and the JDBC drivers, the platform's topic
reader and Delta's session extension (settings a Connect client cannot set), and runs in local mode
beside the standalone cluster, whose cores it leaves to that cluster's applications.

Its clients prove a token (Spark Connect's bearer token), which the server takes from its
environment (SPARK_CONNECT_AUTHENTICATE_TOKEN, never its arguments) and a client from the
connection's password. It listens on loopback only; a deployment puts TLS in front of it."""

from __future__ import annotations

import os

from devstack.credentials import secret
from devstack.paths import LOGS, REPO, RUN
from devstack.ports import HOST, port_open, require_port_free
from devstack.processes import pid_alive, read_pid, report, spawn, terminate, wait_until
from devstack.service import Process, Service
from devstack.spark import _spark_home

CONNECT_PORT = int(os.environ.get("SEMANTICS_SPARK_CONNECT_PORT", "15002"))
CONN_ID = "spark_connect"
PID = RUN / "spark-connect.pid"
LOG = LOGS / "spark-connect.log"
MAIN = "org.apache.spark.sql.connect.service.SparkConnectServer"


def pid() -> int | None:
    found = read_pid(PID)
    return found if pid_alive(found) else None


def _command() -> list[str]:
    from delivery_semantics.audit.stores import lakehouse
    from delivery_semantics.plumbing.spark import SPARK_CONF_LOCAL, spark_jars

    conf = {
        **SPARK_CONF_LOCAL,
        **lakehouse.SESSION_CONF["delta"],
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(CONNECT_PORT),
        "spark.driver.memory": "1g",
        "spark.ui.enabled": "false",
    }
    home = _spark_home()
    cmd = [str(home / "bin" / "spark-submit"), "--class", MAIN, "--name", "semantics-connect", "--master", "local[2]"]
    cmd += ["--jars", spark_jars()]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, "spark-internal"]


def start() -> str:
    if pid():
        return f"sc://localhost:{CONNECT_PORT} (already running)"
    require_port_free(CONNECT_PORT, "spark-connect")
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": HOST,
        # The server's Python workers (the Protobuf decoder, the PostgreSQL copy) import the
        # platform from the artifacts each session adds.
        "PYSPARK_PYTHON": str(REPO / ".venv" / "bin" / "python"),
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": secret("SPARK_CONNECT_TOKEN"),
        "SEMANTICS_HOME": str(REPO),
        "PYTHONPATH": f"{REPO / 'plugins'}",
    }
    spawn(_command(), LOG, PID, env=env)
    wait_until(lambda: port_open(CONNECT_PORT) or not pid(), 90, "spark-connect", LOG)
    if not pid():
        raise RuntimeError(f"spark-connect exited during start-up; see {LOG}")
    return f"sc://localhost:{CONNECT_PORT}, the driver in local mode"


def connections() -> dict[str, dict]:
    return {
        CONN_ID: {
            "conn_type": "spark",
            "host": "sc://localhost",
            "port": CONNECT_PORT,
            "password": secret("SPARK_CONNECT_TOKEN"),
            "extra": {"conf": {"spark.sql.shuffle.partitions": "8"}},
        }
    }


SERVICE = Service(
    "spark-connect",
    lambda: report("spark-connect", start()),
    lambda: terminate(pid(), 20) or report("spark-connect", "stopped"),
    (Process("spark-connect", CONNECT_PORT, pid),),
    connections,
)
