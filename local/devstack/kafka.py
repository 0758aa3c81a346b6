"""Three Kafka brokers in KRaft mode from Maven Central's jars. Each advertises its client
listener through its own Toxiproxy port; inter-broker and controller traffic goes through one
link proxy per direction (`Link`); the SASL_SSL listener is direct."""

from __future__ import annotations

import base64
import os
import signal
import socket
import string
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from delivery_semantics.faults import nemesis
from devstack import oidc
from devstack.credentials import (
    SCRAM_USER,
    SECURE_HOST,
    TLS_CA,
    TLS_CLIENT_CERT,
    TLS_CLIENT_KEY,
    TLS_KEYSTORE,
    passwords,
)
from devstack.paths import CONFIG, KAFKA_LIB, LOGS, RUN, VAR, write_private
from devstack.ports import HOST, port_open, require_port_free, reserve_ports
from devstack.processes import StackError, pid_alive, read_pid, report, spawn, stop_together, terminate, wait_until
from devstack.service import Process, Service

BROKER_IDS = (1, 2, 3)
BROKER_HEAP = os.environ.get("SEMANTICS_BROKER_HEAP", "768m")


@dataclass(frozen=True)
class Broker:
    node_id: int

    @property
    def name(self) -> str:
        return f"broker-{self.node_id}"

    @property
    def proxy_port(self) -> int:
        return 9091 + self.node_id

    @property
    def client_port(self) -> int:
        return 19091 + self.node_id

    @property
    def secure_port(self) -> int:
        return 29091 + self.node_id

    @property
    def mtls_port(self) -> int:
        return 39091 + self.node_id

    @property
    def oauth_port(self) -> int:
        return 49091 + self.node_id

    @property
    def internal_port(self) -> int:
        return 19191 + self.node_id

    @property
    def controller_port(self) -> int:
        return 19291 + self.node_id

    @property
    def peer_host(self) -> str:
        """The name the other brokers reach this one by, for replication and the controller
        quorum. Each broker resolves it through its own hosts file (`hosts_file`): to the link
        proxy from that broker to this one, so one link can be cut without the others."""
        return f"kafka-{self.node_id}"

    @property
    def data_dir(self) -> Path:
        return VAR / "kafka" / self.name

    @property
    def hosts_file(self) -> Path:
        return self.data_dir / "hosts"

    @property
    def pid_file(self) -> Path:
        return RUN / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return LOGS / f"{self.name}.log"


BROKERS = tuple(Broker(i) for i in BROKER_IDS)


@dataclass(frozen=True)
class Link:
    """One direction of broker-to-broker traffic on one listener (inter-broker or controller),
    through its own Toxiproxy proxy: `source` reaches `target` at a loopback address of its own,
    so the nemesis can partition the network link by link."""

    source: Broker
    target: Broker
    listener: str  # "internal" or "controller"

    @property
    def name(self) -> str:
        return f"link-{self.source.node_id}-{self.target.node_id}-{self.listener}"

    @property
    def address(self) -> str:
        return f"127.0.{self.source.node_id}.{self.target.node_id}"

    @property
    def port(self) -> int:
        return self.target.internal_port if self.listener == "internal" else self.target.controller_port


LINKS = tuple(
    Link(s, t, listener) for s in BROKERS for t in BROKERS if s != t for listener in ("internal", "controller")
)


def links_of(node_id: int) -> list[str]:
    """The proxies of every link into and out of a broker, by the nemesis's naming (the stack's
    proxies are made from LINKS; test_stack holds the two together)."""
    return nemesis.link_proxies(node_id, BROKER_IDS)


def fetches_from(node_id: int) -> list[str]:
    return nemesis.fetch_proxies(node_id, BROKER_IDS)


def bootstrap_servers() -> str:
    """The client-facing bootstrap list: every broker through its Toxiproxy port."""
    return ",".join(f"{HOST}:{b.proxy_port}" for b in BROKERS)


def secure_bootstrap_servers() -> str:
    """The SASL_SSL listeners, direct: security is tested there, faults on the plaintext path."""
    return ",".join(f"{SECURE_HOST}:{b.secure_port}" for b in BROKERS)


CLUSTER_ID_FILE = VAR / "kafka" / "cluster.id"


def _cluster_id() -> str:
    if not CLUSTER_ID_FILE.exists():
        CLUSTER_ID_FILE.parent.mkdir(parents=True, exist_ok=True)
        CLUSTER_ID_FILE.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
    return CLUSTER_ID_FILE.read_text().strip()


def render_hosts_file(b: Broker) -> Path:
    """The broker's own name resolution (the JVM's jdk.net.hosts.file): itself directly, every
    other broker through the link proxy from this broker to that one."""
    names = [f"{HOST} localhost {socket.gethostname()} {b.peer_host}"]
    names += [
        f"{link.address} {link.target.peer_host}" for link in LINKS if link.source == b and link.listener == "internal"
    ]
    b.hosts_file.parent.mkdir(parents=True, exist_ok=True)
    b.hosts_file.write_text(
        "# Rendered by local/devstack/kafka.py: how this broker reaches its peers.\n" + "\n".join(names) + "\n"
    )
    return b.hosts_file


def _broker_jvm_flags(b: Broker) -> list[str]:
    # Kafka 4 fetches no OAuth URL it is not allowed to: the issuer's keys.
    return [
        f"-Djdk.net.hosts.file={render_hosts_file(b)}",
        f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={oidc.JWKS_URL}",
    ]


def _render_broker_config(b: Broker) -> Path:
    voters = ",".join(f"{x.node_id}@{x.peer_host}:{x.controller_port}" for x in BROKERS)
    template = string.Template((CONFIG / "server.properties.template").read_text())
    text = template.substitute(
        node_id=b.node_id,
        quorum_voters=voters,
        host=HOST,
        peer_host=b.peer_host,
        client_port=b.client_port,
        internal_port=b.internal_port,
        controller_port=b.controller_port,
        proxy_port=b.proxy_port,
        secure_host=SECURE_HOST,
        secure_port=b.secure_port,
        mtls_port=b.mtls_port,
        oauth_port=b.oauth_port,
        jwks_url=oidc.JWKS_URL,
        issuer=oidc.ISSUER,
        audience=oidc.AUDIENCE,
        ca=TLS_CA,
        keystore=TLS_KEYSTORE,
        keystore_password=passwords()["TLS_STORE_PASSWORD"],
        log_dir=b.data_dir / "data",
    )
    path = b.data_dir / "server.properties"
    return write_private(path, text)


def kafka_tool_command(main: str, *args: str, heap: str = "256m", extra: list[str] | None = None) -> list[str]:
    return [
        "java",
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={CONFIG / 'log4j2.properties'}",
        *(extra or []),
        "-cp",
        f"{KAFKA_LIB}/*",
        main,
        *args,
    ]


def _format_storage(b: Broker, config: Path) -> None:
    if (b.data_dir / "data" / "meta.properties").exists():
        return
    res = subprocess.run(
        kafka_tool_command(
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={_cluster_id()}",
            "-c",
            str(config),
            "--ignore-formatted",
            extra=_broker_jvm_flags(b),
        ),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"{b.name}: storage format failed: {(res.stderr or res.stdout).strip()[-800:]}")


def quorum_leader() -> int:
    """The node id of the KRaft quorum's leader, the active controller."""
    res = subprocess.run(
        kafka_tool_command(
            "org.apache.kafka.tools.MetadataQuorumCommand",
            "--bootstrap-controller",
            ",".join(f"{HOST}:{b.controller_port}" for b in BROKERS),
            "describe",
            "--status",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    for line in res.stdout.splitlines():
        if line.startswith("LeaderId:"):
            return int(line.split()[1])
    raise StackError(f"the controller quorum named no leader: {(res.stderr or res.stdout).strip()[-800:]}")


def broker_pid(b: Broker) -> int | None:
    pid = read_pid(b.pid_file)
    return pid if pid_alive(pid) else None


def start_broker(b: Broker) -> str:
    if broker_pid(b):
        return "already running"
    for port, what in (
        (b.client_port, "client"),
        (b.secure_port, "SASL_SSL"),
        (b.mtls_port, "mutual TLS"),
        (b.oauth_port, "OAUTHBEARER"),
        (b.internal_port, "inter-broker"),
        (b.controller_port, "controller"),
    ):
        require_port_free(port, f"{b.name} ({what} listener)")
    reserve_ports([b.client_port, b.secure_port, b.mtls_port, b.oauth_port, b.internal_port, b.controller_port])
    config = _render_broker_config(b)
    _format_storage(b, config)
    spawn(
        kafka_tool_command(
            "kafka.Kafka", str(config), heap=BROKER_HEAP, extra=[f"-Dkafka.logs.dir={LOGS}", *_broker_jvm_flags(b)]
        ),
        b.log_file,
        b.pid_file,
    )
    return "started"


def stop_broker(b: Broker, grace: float = 30) -> None:
    terminate(broker_pid(b), grace)


def kill_broker(b: Broker, sig: int = signal.SIGKILL) -> None:
    """Sends `sig`; after SIGKILL, returns only once the process is gone, since the kernel takes a
    moment to tear down a JVM and its listeners, and a caller checks the cluster right after."""
    pid = broker_pid(b)
    if not pid:
        return
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def wait_for_cluster(timeout: float = 120) -> None:
    """Until the metadata, fetched through the proxies, lists all 3 brokers."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers(), "socket.timeout.ms": 3000})

    def ready() -> bool:
        try:
            md = admin.list_topics(timeout=3)
        except Exception:
            return False
        return len(md.brokers) == len(BROKERS)

    wait_until(ready, timeout, "the 3-broker Kafka cluster", LOGS)


def add_scram_user() -> str:
    """The SCRAM-SHA-512 user of the SASL_SSL listener, upserted through the plaintext listener."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap_servers(), "socket.timeout.ms": 10000})
    upsert = UserScramCredentialUpsertion(
        SCRAM_USER,
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        passwords()["KAFKA_SCRAM_PASSWORD"].encode(),
    )
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(timeout=30)
    return f"SCRAM-SHA-512 user {SCRAM_USER!r} on the SASL_SSL listeners {secure_bootstrap_servers()}"


def connections() -> dict[str, dict]:
    return {
        "kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap_servers()}},
        # The SASL_SSL listener, direct (no proxy): SCRAM-SHA-512 over TLS with the stack's CA.
        "kafka_secure": {
            "conn_type": "kafka",
            "login": SCRAM_USER,
            "password": passwords()["KAFKA_SCRAM_PASSWORD"],
            "extra": {
                "bootstrap.servers": secure_bootstrap_servers(),
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "ssl.ca.location": str(TLS_CA),
            },
        },
        # The mutual-TLS listener, direct: a client certificate signed by the stack's CA. The
        # password field holds the client key's password, the connection's one secret.
        "kafka_mtls": {
            "conn_type": "kafka",
            "password": passwords()["CLIENT_KEY_PASSWORD"],
            "extra": {
                "bootstrap.servers": ",".join(f"{SECURE_HOST}:{b.mtls_port}" for b in BROKERS),
                "security.protocol": "SSL",
                "ssl.ca.location": str(TLS_CA),
                "ssl.certificate.location": str(TLS_CLIENT_CERT),
                "ssl.key.location": str(TLS_CLIENT_KEY),
            },
        },
    }


def _start() -> None:
    for b in BROKERS:
        report(b.name, start_broker(b))
    for b in BROKERS:
        wait_until(lambda b=b: port_open(b.client_port) or not broker_pid(b), 90, b.name, b.log_file)
        if not broker_pid(b):
            raise StackError(f"{b.name}: exited during start-up; see {b.log_file}")
    wait_for_cluster()
    report("kafka", f"3 brokers up, bootstrap {bootstrap_servers()}")
    report("kafka", add_scram_user())


SERVICE = Service(
    "kafka",
    _start,
    # Together: one at a time, the last ones would wait on a lost quorum.
    lambda: stop_together(BROKERS, broker_pid, kill_broker),
    tuple(
        Process(b.name, b.client_port, lambda b=b: broker_pid(b), f"{b.proxy_port}->{b.client_port}") for b in BROKERS
    ),
    connections,
    # The brokers advertise their client listeners through the proxies; the secure ones need the
    # certificates, and the OAUTHBEARER one the token issuer's keys.
    needs=("tls", "toxiproxy", "oidc"),
)
