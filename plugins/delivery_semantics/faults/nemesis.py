"""The nemesis: one fault-controller interface over two backends.

- the local stack's processes (kill -9, restart, SIGSTOP/SIGCONT by pid), in
  local/devstack/nemesis_backend.py, which SEMANTICS_NEMESIS_BACKEND names;
- docker: the docker-compose.yaml deployment, through the Docker Engine's API on its socket (kill,
  start, pause, unpause and stop of the kafka-N services, the Connect workers and the outbox
  database), with the same link proxies as the local stack.

Both reach Toxiproxy through its HTTP API (connection `toxiproxy_default`). Every action is
appended to a timeline with its time, so a run records what was actually done to it.
"""

from __future__ import annotations

import http.client
import importlib
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from delivery_semantics import locations
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import TOXIPROXY_CONN_ID, get_connection, librdkafka


class NemesisError(RuntimeError):
    pass


TRANSACTION_STATE = "__transaction_state"
# The records `poison` writes: enough to count, few enough that the sink's error log stays short.
POISON_RECORDS = 20


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


class Backend:
    name = "abstract"
    broker_ids: tuple[int, ...] = (1, 2, 3)

    def kill(self, node_id: int) -> None:
        raise NotImplementedError

    def start(self, node_id: int) -> None:
        raise NotImplementedError

    def pause(self, node_id: int) -> None:
        raise NotImplementedError

    def resume(self, node_id: int) -> None:
        raise NotImplementedError

    def is_running(self, node_id: int) -> bool:
        raise NotImplementedError

    def stop(self, node_id: int) -> None:
        """SIGTERM: a controlled shutdown (leadership moves first); returns once the broker is down."""
        raise NotImplementedError

    # Connector pipelines: Kafka Connect workers by their REST id (host:port), and the outbox database.
    def kill_worker(self, worker_id: str) -> None:
        raise NemesisError(f"the {self.name} backend cannot kill Connect workers; run pipelines on the local stack")

    def stop_worker(self, worker_id: str) -> None:
        raise NemesisError(f"the {self.name} backend cannot stop Connect workers; run pipelines on the local stack")

    def start_worker(self, worker_id: str) -> None:
        raise NemesisError(f"the {self.name} backend cannot start Connect workers; run pipelines on the local stack")

    def restart_outbox_db(self) -> None:
        raise NemesisError(f"the {self.name} backend cannot restart the outbox database; use the local stack")

    def proxy_name(self, node_id: int) -> str:
        return f"broker-{node_id}"

    def link_proxies(self, node_id: int) -> list[str]:
        """The Toxiproxy proxies of every link between this broker and the others, both ways."""
        raise NemesisError(
            f"the {self.name} backend routes only client traffic through Toxiproxy, so it cannot partition "
            "a broker from its peers; run partition scenarios on the local stack"
        )

    def fetch_proxies(self, node_id: int) -> list[str]:
        """The Toxiproxy proxies its followers fetch from it through."""
        return self.link_proxies(node_id)  # refused the same way


def link_proxies(node_id: int, broker_ids: tuple[int, ...]) -> list[str]:
    """The Toxiproxy proxies of every link into and out of a broker (one per direction and listener,
    named `link-<from>-<to>-<internal|controller>`): the ones a network partition cuts. The local
    stack and docker-compose.yaml name their link proxies so."""
    return [
        f"link-{s}-{t}-{listener}"
        for s in broker_ids
        for t in broker_ids
        if s != t and node_id in (s, t)
        for listener in ("internal", "controller")
    ]


def fetch_proxies(node_id: int, broker_ids: tuple[int, ...]) -> list[str]:
    """The link proxies its followers fetch its partitions' records through (their links into its
    inter-broker listener): cut, they fall out of its ISR while it stays in touch with the controllers."""
    return [f"link-{s}-{node_id}-internal" for s in broker_ids if s != node_id]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class DockerComposeBackend(Backend):
    """The deployment of docker-compose.yaml, through the Docker Engine's API on its socket (mounted
    into the container that runs the nemesis; no docker CLI needed). A container is found by its
    compose project and service labels, and is acted on only when its `semantics.nemesis` label
    gives it the role the fault needs: a file or form can name no other container."""

    name = "docker"
    ROLE = "semantics.nemesis"

    def __init__(self, socket_path: str | None = None, project: str | None = None):
        self.socket_path = socket_path or locations.setting("docker_socket") or "/var/run/docker.sock"
        self.project = project or locations.setting("compose_project") or ""

    def _call(self, method: str, path: str, timeout: float = 30) -> object:
        conn = _UnixHTTPConnection(self.socket_path, timeout)
        try:
            conn.request(method, path)
            res = conn.getresponse()
            body = res.read()
        except OSError as e:
            raise NemesisError(f"the Docker Engine at {self.socket_path}: {e}") from None
        finally:
            conn.close()
        if res.status >= 400:
            detail = body.decode("utf-8", "replace").strip()[:300]
            raise NemesisError(f"the Docker Engine refused {method} {path.split('?')[0]}: {res.status} {detail}")
        return json.loads(body) if body.strip() else None

    def _container(self, service: str, role: str) -> str:
        if not self.project:
            raise NemesisError("SEMANTICS_COMPOSE_PROJECT is not set: the compose project the brokers run in")
        labels = [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]
        query = urllib.parse.urlencode({"all": "1", "filters": json.dumps({"label": labels})})
        found = self._call("GET", f"/containers/json?{query}")
        if not found:
            raise NemesisError(f"no container of service {service!r} in compose project {self.project!r}")
        [container] = found[:1]
        if container.get("Labels", {}).get(self.ROLE) != role:
            raise NemesisError(f"service {service!r} is not a {role} (its {self.ROLE} label): the nemesis leaves it be")
        return container["Id"]

    def _broker(self, node_id: int) -> str:
        return self._container(f"kafka-{int(node_id)}", "broker")

    def _state(self, container: str) -> dict:
        return self._call("GET", f"/containers/{container}/json")["State"]

    def kill(self, node_id: int) -> None:
        container = self._broker(node_id)
        self._call("POST", f"/containers/{container}/kill?signal=SIGKILL")
        deadline = time.monotonic() + 10
        while self._state(container)["Running"] and time.monotonic() < deadline:
            time.sleep(0.1)

    def start(self, node_id: int) -> None:
        self._call("POST", f"/containers/{self._broker(node_id)}/start")

    def pause(self, node_id: int) -> None:
        self._call("POST", f"/containers/{self._broker(node_id)}/pause")

    def resume(self, node_id: int) -> None:
        container = self._broker(node_id)
        if self._state(container)["Paused"]:
            self._call("POST", f"/containers/{container}/unpause")

    def is_running(self, node_id: int) -> bool:
        return bool(self._state(self._broker(node_id))["Running"])

    def stop(self, node_id: int) -> None:
        self._call("POST", f"/containers/{self._broker(node_id)}/stop?t=60", timeout=120)

    def _worker(self, worker_id: str) -> str:
        """A Connect worker by its REST id (`connect-1:8083`): the compose service is its host name."""
        return self._container(worker_id.partition(":")[0], "connect-worker")

    def kill_worker(self, worker_id: str) -> None:
        self._call("POST", f"/containers/{self._worker(worker_id)}/kill?signal=SIGKILL")

    def stop_worker(self, worker_id: str) -> None:
        self._call("POST", f"/containers/{self._worker(worker_id)}/stop?t=30", timeout=90)

    def start_worker(self, worker_id: str) -> None:
        self._call("POST", f"/containers/{self._worker(worker_id)}/start")

    def restart_outbox_db(self) -> None:
        self._call("POST", f"/containers/{self._container('postgres-cdc', 'outbox-db')}/restart?t=10", timeout=90)

    def link_proxies(self, node_id: int) -> list[str]:
        return link_proxies(node_id, self.broker_ids)

    def fetch_proxies(self, node_id: int) -> list[str]:
        return fetch_proxies(node_id, self.broker_ids)


def backend_from_env() -> Backend:
    """The backend SEMANTICS_NEMESIS_BACKEND names: `docker`, or a class as `module:Class` (the
    local stack's environment names its own, so this module never imports it)."""
    name = locations.setting("nemesis_backend") or ""
    if name == "docker":
        return DockerComposeBackend()
    module, _, cls = name.partition(":")
    if not module or not cls:
        raise NemesisError(
            f"SEMANTICS_NEMESIS_BACKEND={name!r}: use docker, or module:Class for a backend of your own "
            "(the local stack's environment, var/stack.env, sets it)"
        )
    try:
        backend = getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as e:
        raise NemesisError(f"SEMANTICS_NEMESIS_BACKEND={name!r}: {e}") from None
    if not isinstance(backend, Backend):
        raise NemesisError(f"SEMANTICS_NEMESIS_BACKEND={name!r} is not a nemesis Backend")
    return backend


class Toxiproxy:
    def __init__(self, base_url: str | None = None):
        if base_url is None:
            c = get_connection(TOXIPROXY_CONN_ID)
            base_url = f"http://{c.host}:{c.port or 8474}"
        self.base = base_url.rstrip("/")

    def _call(self, method: str, path: str, body: dict | None = None):
        req = urllib.request.Request(  # noqa: S310 (http to the Toxiproxy connection's API)
            f"{self.base}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 (http to the Toxiproxy connection's API)
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise NemesisError(f"toxiproxy {method} {path}: HTTP {e.code} {e.read()[:200]!r}") from None
        except urllib.error.URLError as e:
            raise NemesisError(f"toxiproxy at {self.base} cannot be reached: {e.reason}") from None
        return json.loads(raw) if raw else None

    def proxies(self) -> dict:
        return self._call("GET", "/proxies")

    def add_toxic(
        self, proxy: str, name: str, toxic_type: str, stream: str, attributes: dict, toxicity: float = 1.0
    ) -> None:
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {"name": name, "type": toxic_type, "stream": stream, "toxicity": toxicity, "attributes": attributes},
        )

    def remove_toxic(self, proxy: str, name: str) -> None:
        try:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        except NemesisError as e:
            if "HTTP 404" not in str(e):
                raise

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def heal(self) -> None:
        for name, p in self.proxies().items():
            for t in p.get("toxics") or []:
                self.remove_toxic(name, t["name"])
            if not p.get("enabled", True):
                self.set_enabled(name, True)


@dataclass
class Timeline:
    """What the nemesis did, with wall-clock and load-relative times."""

    t0: float = field(default_factory=time.monotonic)
    entries: list[dict] = field(default_factory=list)

    def record(self, action: str, **details) -> None:
        self.entries.append(
            {
                "t": round(time.monotonic() - self.t0, 3),
                "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
                "action": action,
                **details,
            }
        )


class Nemesis:
    def __init__(
        self,
        kafka_conf: dict,
        backend: Backend,
        toxiproxy: Toxiproxy | None = None,
        timeline: Timeline | None = None,
    ):
        self.kafka_conf = kafka_conf
        self.backend = backend
        self.toxiproxy = toxiproxy or Toxiproxy()
        self.timeline = timeline or Timeline()
        self._killed: set[int] = set()
        self._paused: set[int] = set()
        self._workers_down: set[str] = set()

    # ------------------------------------------------------------------ observations

    def leader_of(self, topic: str, partition: int = 0) -> int:
        md = topics.admin_client(self.kafka_conf).list_topics(topic, timeout=10)
        leader = md.topics[topic].partitions[partition].leader
        if leader < 0:
            raise NemesisError(f"{topic}[{partition}] has no leader")
        return leader

    def coordinator_of(self, transactional_id: str) -> int:
        """The broker coordinating a transactional.id: the leader of its __transaction_state
        partition, which Kafka picks as abs(String.hashCode) modulo the partition count."""
        md = topics.admin_client(self.kafka_conf).list_topics(TRANSACTION_STATE, timeout=10)
        partitions = len(md.topics[TRANSACTION_STATE].partitions)
        if not partitions:
            raise NemesisError(f"{TRANSACTION_STATE} does not exist yet: no transaction was ever begun")
        return self.leader_of(TRANSACTION_STATE, java_abs(java_string_hash(transactional_id)) % partitions)

    # ------------------------------------------------------------------ actions

    def kill(self, node_id: int) -> None:
        self.backend.kill(node_id)
        self._killed.add(node_id)
        self._paused.discard(node_id)  # a killed process is no longer stopped
        self.timeline.record("kill", broker=node_id, signal="SIGKILL")

    def restart(self, node_id: int) -> None:
        self.backend.start(node_id)
        self._killed.discard(node_id)
        self.timeline.record("restart", broker=node_id)

    def pause(self, node_id: int) -> None:
        self.backend.pause(node_id)
        self._paused.add(node_id)
        self.timeline.record("pause", broker=node_id, signal="SIGSTOP")

    def resume(self, node_id: int) -> None:
        self.backend.resume(node_id)
        self._paused.discard(node_id)
        self.timeline.record("resume", broker=node_id, signal="SIGCONT")

    def drop_responses(self, node_id: int) -> str:
        """Responses from the broker to clients are swallowed; requests still reach it."""
        proxy = self.backend.proxy_name(node_id)
        self.toxiproxy.add_toxic(proxy, "lost_ack", "timeout", "downstream", {"timeout": 0})
        self.timeline.record("drop_responses", broker=node_id, proxy=proxy)
        return proxy

    def restore_responses(self, node_id: int) -> None:
        proxy = self.backend.proxy_name(node_id)
        self.toxiproxy.remove_toxic(proxy, "lost_ack")
        self.timeline.record("restore_responses", broker=node_id, proxy=proxy)

    def partition(self, node_id: int) -> list[str]:
        """Cut the broker off by the network from the other brokers (replication) and the rest of
        the controller quorum, both ways; its clients still reach it."""
        return self._links("partition", node_id, self.backend.link_proxies(node_id), enabled=False)

    def heal_partition(self, node_id: int) -> None:
        self._links("heal_partition", node_id, self.backend.link_proxies(node_id), enabled=True)

    def cut_fetches(self, node_id: int) -> list[str]:
        """Its followers can no longer fetch from it; it still reaches the controllers, so past
        replica.lag.time.max.ms it shrinks its partitions' ISR to itself and goes on leading."""
        return self._links("cut_fetches", node_id, self.backend.fetch_proxies(node_id), enabled=False)

    def heal_fetches(self, node_id: int) -> None:
        self._links("heal_fetches", node_id, self.backend.fetch_proxies(node_id), enabled=True)

    def _links(self, action: str, node_id: int, proxies: list[str], enabled: bool) -> list[str]:
        for proxy in proxies:
            self.toxiproxy.set_enabled(proxy, enabled)
        self.timeline.record(action, broker=node_id, links=len(proxies))
        return proxies

    def stop(self, node_id: int) -> None:
        self.backend.stop(node_id)
        self._killed.add(node_id)
        self.timeline.record("stop", broker=node_id, signal="SIGTERM")

    def rolling_restart(self, _target=None, timeout: float = 180) -> None:
        """Each broker stopped (controlled shutdown) and started again in turn; the next one once
        every partition has its whole replica set in sync again, as an upgrade goes."""
        for node in self.backend.broker_ids:
            self.stop(node)
            self.restart(node)
            wait_healthy(self.kafka_conf, timeout=timeout)
            self.timeline.record("in_sync", broker=node)

    def kill_worker(self, worker_id: str) -> None:
        self.backend.kill_worker(worker_id)
        self._workers_down.add(worker_id)
        self.timeline.record("kill_worker", worker=worker_id, signal="SIGKILL")

    def stop_worker(self, worker_id: str) -> None:
        self.backend.stop_worker(worker_id)
        self._workers_down.add(worker_id)
        self.timeline.record("stop_worker", worker=worker_id, signal="SIGTERM")

    def start_worker(self, worker_id: str) -> None:
        self.backend.start_worker(worker_id)
        self._workers_down.discard(worker_id)
        self.timeline.record("start_worker", worker=worker_id)

    def restart_outbox_db(self, _target=None) -> None:
        self.backend.restart_outbox_db()
        self.timeline.record("restart_outbox_db")

    def poison(self, topic: str) -> None:
        """Another writer's records in a pipeline's topic that its sink's converter refuses: plain
        JSON where the JsonConverter (schemas.enable) expects {"schema", "payload"}. Each carries an
        event id in the `id` header, as the outbox router's records do, so the audit reads it."""
        from confluent_kafka import Producer

        ids = poison_ids(topic)
        failed: list[str] = []
        producer = Producer(
            librdkafka({**self.kafka_conf, "acks": "all", "enable.idempotence": "true", "log_level": 4})
        )
        for i, event_id in enumerate(ids):
            producer.produce(
                topic,
                key=f"poison{i}".encode(),
                value=json.dumps({"event_id": event_id, "seq": -1}).encode(),
                headers=[("id", event_id.encode())],
                on_delivery=lambda err, _msg: err is not None and failed.append(err.name()),
            )
        left = producer.flush(30)
        if left or failed:
            raise NemesisError(f"poison: {left} records undelivered, {len(failed)} failed ({', '.join(failed[:3])})")
        self.timeline.record("poison", topic=topic, records=len(ids), first_id=ids[0])

    def kill_producer(self, process) -> None:
        """SIGKILL of a producer process this one started (the forked load of producer_crash)."""
        process.kill()
        process.wait(10)
        self.timeline.record("kill_producer", pid=process.pid, signal="SIGKILL")

    def heal(self, wait: bool = True, timeout: float = 180) -> None:
        """Undo everything: SIGCONT, restart, clear toxics, enable every proxy (a partition's links
        too), start the Connect workers it stopped; then wait for a whole cluster."""
        for node in list(self._paused) or []:
            self.resume(node)
        for node in self.backend.broker_ids:
            self.backend.resume(node)  # paused by someone else, or by a crashed run
        self.toxiproxy.heal()
        for node in self.backend.broker_ids:
            if not self.backend.is_running(node):
                self.restart(node)
        for worker in sorted(self._workers_down):
            self.start_worker(worker)
        self.timeline.record("heal")
        if wait:
            wait_healthy(self.kafka_conf, timeout=timeout)
            self.timeline.record("healthy")


def poison_ids(topic: str) -> list[str]:
    """The event ids of the records `poison` writes into `topic`."""
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, f"semantics:poison:{topic}:{i}")) for i in range(POISON_RECORDS)]


def crash_here(point: str, **facts) -> None:
    """The calling process kills itself (SIGKILL) at a crash point only it can see, saying first
    where, on stdout, as `CRASH {json}` for whoever ran it."""
    print("CRASH " + json.dumps({"point": point, **facts}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def wait_healthy(kafka_conf: dict, timeout: float = 180, brokers: int = 3) -> None:
    """The health gate: all brokers in the metadata, and every partition of every topic led and
    with its whole replica set in sync (one metadata request a round)."""
    deadline = time.monotonic() + timeout
    admin = topics.admin_client(kafka_conf)
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=5)
            lagging = [
                f"{t.topic}[{p.id}]"
                for t in md.topics.values()
                for p in t.partitions.values()
                if p.leader < 0 or len(p.isrs) < len(p.replicas)
            ]
            if len(md.brokers) == brokers and not lagging:
                return
            last = f"{len(md.brokers)} brokers; not fully in sync: {', '.join(lagging[:5]) or '-'}"
        except Exception as e:
            last = str(e)
        time.sleep(1)
    raise NemesisError(f"the cluster is not healthy after {timeout:.0f}s: {last}")
