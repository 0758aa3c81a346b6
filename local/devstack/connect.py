"""Kafka Connect in distributed mode from Maven Central's jars (the brokers' own Kafka version):
two Connect clusters of two workers each, so that one runs exactly-once source support and the
other does not (the worker setting holds for every source task of a cluster, KIP-618). Plugins
(Debezium's PostgreSQL source and JDBC sink) live in .cache/connect/plugins, one folder each.

Workers reach the brokers through their Toxiproxy ports, as every client of the stack does, so a
broker fault reaches the connectors too.

A connector's configuration is readable by anyone who can read the REST API or the config topic,
so it holds no secret: the platform writes each database password to a file of mode 600 under
SECRETS_DIR and names it as `${file:<path>:password}`, which the workers' FileConfigProvider
resolves (restricted to that folder). The REST API asks for a user and password (Kafka's
BasicAuthSecurityRestExtension), which the Connect connections carry."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devstack.credentials import secret
from devstack.kafka import bootstrap_servers, kafka_tool_command
from devstack.paths import CACHE, LOGS, RUN, VAR, write_private
from devstack.ports import HOST, require_port_free
from devstack.processes import StackError, pid_alive, read_pid, report, spawn, stop_together, terminate, wait_until
from devstack.service import Process, Service

PLUGINS = CACHE / "connect" / "plugins"
WORKER_HEAP = os.environ.get("SEMANTICS_CONNECT_HEAP", "384m")
# What each cluster is for: the connection that names its REST URL, and its exactly-once setting.
CLUSTERS = {"connect": ("kafka_connect", "disabled"), "connect-eos": ("kafka_connect_eos", "enabled")}
SECRETS_DIR = VAR / "connect" / "secrets"
REST_USER = "semantics"
REST_JAAS = VAR / "connect" / "rest-jaas.conf"
REST_USERS = VAR / "connect" / "rest-users.properties"


@dataclass(frozen=True)
class Worker:
    cluster: str
    index: int  # 1 or 2 within its cluster

    @property
    def name(self) -> str:
        return f"{self.cluster}-{self.index}"

    @property
    def rest_port(self) -> int:
        return 8083 + list(CLUSTERS).index(self.cluster) * 2 + self.index - 1

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.rest_port}"

    @property
    def worker_id(self) -> str:
        """How Connect's REST API names this worker in a task's status."""
        return f"{HOST}:{self.rest_port}"

    @property
    def exactly_once_source(self) -> str:
        return CLUSTERS[self.cluster][1]

    @property
    def data_dir(self) -> Path:
        return VAR / "connect" / self.name

    @property
    def pid_file(self) -> Path:
        return RUN / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return LOGS / f"{self.name}.log"


WORKERS = tuple(Worker(c, i) for c in CLUSTERS for i in (1, 2))


def worker_named(name: str) -> Worker:
    for w in WORKERS:
        if name in (w.name, w.worker_id):
            return w
    raise StackError(f"no Connect worker {name!r}: the stack has {', '.join(w.name for w in WORKERS)}")


def _render_config(w: Worker) -> Path:
    settings = {
        "bootstrap.servers": bootstrap_servers(),
        "group.id": f"semantics-{w.cluster}",  # connections() names it too
        "config.storage.topic": f"_{w.cluster}-configs",
        "offset.storage.topic": f"_{w.cluster}-offsets",
        "status.storage.topic": f"_{w.cluster}-status",
        "config.storage.replication.factor": "3",
        "offset.storage.replication.factor": "3",
        "status.storage.replication.factor": "3",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "listeners": f"http://{HOST}:{w.rest_port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": str(w.rest_port),
        "plugin.path": str(PLUGINS),
        # Both plugins ship their service manifests: no reflective scan of every jar at start-up.
        "plugin.discovery": "service_load",
        # Source offsets are committed every 5 s: a worker killed between two commits resends what
        # it sent since the last one (at-least-once; exactly-once commits them with the records).
        "offset.flush.interval.ms": "5000",
        # A worker that leaves gets 10 s to come back before its tasks move (the default is 5
        # minutes, longer than a run).
        "scheduled.rebalance.max.delay.ms": "10000",
        "exactly.once.source.support": w.exactly_once_source,
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        "config.providers.file.param.allowed.paths": str(SECRETS_DIR),
        "rest.extension.classes": "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension",
    }
    path = w.data_dir / "worker.properties"
    return write_private(path, "".join(f"{k}={v}\n" for k, v in settings.items()))


def worker_pid(w: Worker) -> int | None:
    pid = read_pid(w.pid_file)
    return pid if pid_alive(pid) else None


def _rest_auth() -> str:
    import base64

    return "Basic " + base64.b64encode(f"{REST_USER}:{secret('CONNECT_REST_PASSWORD')}".encode()).decode()


def _write_rest_login() -> None:
    write_private(REST_USERS, f"{REST_USER}={secret('CONNECT_REST_PASSWORD')}\n")
    write_private(
        REST_JAAS,
        "KafkaConnect {\n  org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule required\n"
        f'  file="{REST_USERS}";\n}};\n',
    )
    SECRETS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)


def _answers(w: Worker) -> bool:
    try:
        req = urllib.request.Request(f"{w.url}/", headers={"Authorization": _rest_auth()})  # noqa: S310 (http to the stack's own worker on loopback)
        with urllib.request.urlopen(req, timeout=2) as r:  # noqa: S310 (http to the stack's own worker on loopback)
            return "version" in json.loads(r.read())
    except Exception:
        return False


def start_worker(w: Worker) -> str:
    if worker_pid(w):
        return "already running"
    if not any(PLUGINS.glob("*/*.jar")):
        raise StackError(f"{w.name}: no Connect plugins in {PLUGINS}; run local/setup first (it needs Maven)")
    require_port_free(w.rest_port, f"{w.name} (REST)")
    _write_rest_login()
    config = _render_config(w)
    spawn(
        kafka_tool_command(
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(config),
            heap=WORKER_HEAP,
            extra=[f"-Dkafka.logs.dir={LOGS}", f"-Djava.security.auth.login.config={REST_JAAS}"],
        ),
        w.log_file,
        w.pid_file,
    )
    return "started"


def wait_for_worker(w: Worker, timeout: float = 120) -> None:
    wait_until(lambda: _answers(w) or not worker_pid(w), timeout, w.name, w.log_file)
    if not worker_pid(w):
        raise StackError(f"{w.name}: exited during start-up; see {w.log_file}")


def stop_worker(w: Worker, grace: float = 30) -> None:
    """SIGTERM: the worker leaves its group cleanly, and its tasks move once the others rebalance."""
    terminate(worker_pid(w), grace)


def kill_worker(w: Worker) -> None:
    pid = worker_pid(w)
    if pid:
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def start_workers() -> str:
    started = [w.name for w in WORKERS if start_worker(w) == "started"]
    for w in WORKERS:
        wait_for_worker(w)
    clusters = ", ".join(f"{c} (exactly.once.source.support={eos})" for c, (_, eos) in CLUSTERS.items())
    return f"{'started ' + ' '.join(started) if started else 'already running'}; {clusters}"


def connections() -> dict[str, dict]:
    """Each Connect cluster's REST URL: the first worker's (any worker forwards to the leader), and
    the others' in the extra, tried in turn when one is down."""
    out = {}
    for cluster, (conn_id, _) in CLUSTERS.items():
        first, *others = [w for w in WORKERS if w.cluster == cluster]
        out[conn_id] = {
            "conn_type": "http",
            "schema": "http",
            "host": HOST,
            "port": first.rest_port,
            "login": REST_USER,
            "password": secret("CONNECT_REST_PASSWORD"),
            # group.id: an exactly-once source task's transactional.id starts with it (KIP-618);
            # secrets_dir: where the platform writes the files the workers' FileConfigProvider reads.
            "extra": {
                "fallback_urls": [w.url for w in others],
                "group.id": f"semantics-{cluster}",
                "secrets_dir": str(SECRETS_DIR),
            },
        }
    return out


SERVICE = Service(
    "connect",
    lambda: report("connect", start_workers()),
    # Together, before the brokers go: each one's shutdown waits on its group.
    lambda: stop_together(WORKERS, worker_pid, kill_worker),
    tuple(Process(w.name, w.rest_port, lambda w=w: worker_pid(w)) for w in WORKERS),
    connections,
    needs=("kafka",),
)
