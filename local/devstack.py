"""The local stack without Docker, for development, tests and CI: 3 KRaft brokers, Toxiproxy,
PostgreSQL, Airflow's database and, on demand, the Airflow UI processes. Not part of what a
deployment mounts (docker-compose.yaml runs its own services).

Usage: local/stack {start,stop,status,reset,env,ui}

Everything lives under the repository: downloads in .cache/ (made by local/setup), state and
logs in var/. `start` is idempotent, `stop` keeps data, `reset` wipes var/.

The interface for tests and benchmarks: `environment()`, `secret(name)`, `status_rows()`,
`wait_for_cluster()`, `BROKERS`, `broker_pid()`, `kill_broker()`, `toxiproxy_url()`,
`kafka_tool_command()`, and `NemesisBackend`, the nemesis's local backend.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from delivery_semantics.catalog import CLUSTER_POOL, CLUSTER_POOL_SLOTS
from delivery_semantics.nemesis import Backend, NemesisError

REPO = Path(os.environ.get("SEMANTICS_HOME", Path(__file__).resolve().parents[1]))
CACHE = REPO / ".cache"
VAR = Path(os.environ.get("SEMANTICS_VAR", REPO / "var"))
LOGS = VAR / "logs"
RUN = VAR / "run"
KAFKA_LIB = CACHE / "kafka" / "lib"
SPARK_JARS = CACHE / "spark" / "jars"
TOXIPROXY_BIN = CACHE / "toxiproxy" / "bin" / "server"
CONFIG = REPO / "local" / "config"

HOST = "127.0.0.1"
BROKER_IDS = (1, 2, 3)
BROKER_HEAP = os.environ.get("SEMANTICS_BROKER_HEAP", "768m")
PG_PORT = int(os.environ.get("SEMANTICS_PG_PORT", "5433"))
TOXIPROXY_PORT = int(os.environ.get("SEMANTICS_TOXIPROXY_PORT", "8474"))
# Where audit alerts are mailed on the local stack: nothing listens there unless a test starts
# its mail catcher (tests/integration/test_continuous_audits.py).
SMTP_PORT = int(os.environ.get("SEMANTICS_SMTP_PORT", "8025"))
PLATFORM_DB = "semantics"
AIRFLOW_DB = "airflow"
OUTBOX_DB = "outbox_demo"
OUTBOX_OWNER = "outbox_app"
OUTBOX_READER = "outbox_reader"
SCRAM_USER = "semantics"
TLS_DIR = VAR / "tls"
TLS_CA = TLS_DIR / "ca.pem"
TLS_KEYSTORE = TLS_DIR / "broker.p12"
# The hostname the SASL_SSL listener advertises and its certificate names.
SECURE_HOST = "localhost"
MIN_JAVA = 17


class StackError(RuntimeError):
    """A start-up precondition failed; the message names the component and the cause."""


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
    """The proxies of every link into and out of a broker: the ones a network partition cuts."""
    return [link.name for link in LINKS if node_id in (link.source.node_id, link.target.node_id)]


def bootstrap_servers() -> str:
    """The client-facing bootstrap list: every broker through its Toxiproxy port."""
    return ",".join(f"{HOST}:{b.proxy_port}" for b in BROKERS)


# --------------------------------------------------------------------------- processes


def secure_bootstrap_servers() -> str:
    """The SASL_SSL listeners, direct: security is tested there, faults on the plaintext path."""
    return ",".join(f"{SECURE_HOST}:{b.secure_port}" for b in BROKERS)


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _require_port_free(port: int, component: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise StackError(
                f"{component}: port {HOST}:{port} is already taken by another process ({e.strerror}); "
                f"stop that process or free the port, then run start again"
            ) from None


def _spawn(cmd: list[str], log_file: Path, pid_file: Path, env: dict | None = None) -> int:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=REPO,
        )
    pid_file.write_text(str(proc.pid))
    return proc.pid


def _wait_until(predicate, timeout: float, what: str, log_file: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    hint = f"; see {log_file}" if log_file else ""
    raise StackError(f"{what} did not come up within {timeout:.0f}s{hint}")


def _terminate(pid: int | None, grace: float) -> None:
    if not _pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.2)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _pid_alive(pid):
            time.sleep(0.1)


# --------------------------------------------------------------------------- prerequisites


def java_version() -> int:
    java = shutil.which("java")
    if not java:
        raise StackError("java: no `java` on PATH; install a JDK 17 or newer (local/setup does it)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    try:
        raw = out.split('"')[1]
        major = int(raw.split(".")[0])
        return 8 if major == 1 else major
    except (IndexError, ValueError):
        raise StackError(f"java: cannot read the version from `java -version`: {out.strip()[:200]}") from None


def check_prerequisites() -> None:
    major = java_version()
    if major < MIN_JAVA:
        raise StackError(f"java: Kafka 4 and Spark 4 need Java {MIN_JAVA}+, found Java {major}")
    if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
        raise StackError(f"kafka: no broker jars in {KAFKA_LIB}; run local/setup first (it needs Maven)")
    if not TOXIPROXY_BIN.exists():
        raise StackError(f"toxiproxy: no binary at {TOXIPROXY_BIN}; run local/setup first (it needs Go)")
    _pg_bin("postgres")


# --------------------------------------------------------------------------- secrets and env

SECRETS_FILE = VAR / "secrets.env"


SECRET_NAMES = (
    "SEMANTICS_DB_PASSWORD",
    "AIRFLOW_DB_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "KAFKA_SCRAM_PASSWORD",  # the SCRAM-SHA-512 user of the SASL_SSL listener
    "TLS_STORE_PASSWORD",  # the brokers' PKCS12 keystore
    "OUTBOX_OWNER_PASSWORD",  # the application that writes the outbox database
    "OUTBOX_READER_PASSWORD",  # the read-only role audits read it with
)


def _secrets() -> dict[str, str]:
    """Passwords for the local roles, made once per stack (a name added later is made when first
    needed) and never committed or printed."""
    out = {}
    if SECRETS_FILE.exists():
        for line in SECRETS_FILE.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    missing = [k for k in SECRET_NAMES if k not in out]
    if missing:
        VAR.mkdir(parents=True, exist_ok=True)
        alphabet = string.ascii_letters + string.digits
        out.update({k: "".join(secrets.choice(alphabet) for _ in range(24)) for k in missing})
        SECRETS_FILE.touch(mode=0o600)
        SECRETS_FILE.chmod(0o600)
        SECRETS_FILE.write_text("".join(f"{k}={v}\n" for k, v in out.items()))
    return out


def secret(name: str) -> str:
    """One of the stack's generated passwords (SECRET_NAMES)."""
    return _secrets()[name]


def environment() -> dict[str, str]:
    """Environment for everything that talks to the local stack: Airflow, the CLI, tests, Spark."""
    s = _secrets()
    venv_bin = REPO / ".venv" / "bin"
    jars = ",".join(str(p) for p in sorted(SPARK_JARS.glob("*.jar")))
    env = {
        "SEMANTICS_HOME": str(REPO),
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{REPO / 'plugins'}:{REPO / 'local'}",
        "AIRFLOW_HOME": str(VAR / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://airflow:{s['AIRFLOW_DB_PASSWORD']}@{HOST}:{PG_PORT}/{AIRFLOW_DB}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(LOGS / "airflow"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(VAR / "airflow" / "passwords.json"),
        # JSON, because a URI cannot carry local[2]
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap_servers()}}
        ),
        "AIRFLOW_CONN_LEDGER_DB": json.dumps(
            {
                "conn_type": "postgres",
                "host": HOST,
                "port": PG_PORT,
                "login": PLATFORM_DB,
                "password": s["SEMANTICS_DB_PASSWORD"],
                "schema": PLATFORM_DB,
            }
        ),
        # The SASL_SSL listener, direct (no proxy): SCRAM-SHA-512 over TLS with the stack's CA.
        "AIRFLOW_CONN_KAFKA_SECURE": json.dumps(
            {
                "conn_type": "kafka",
                "login": SCRAM_USER,
                "password": s["KAFKA_SCRAM_PASSWORD"],
                "extra": {
                    "bootstrap.servers": secure_bootstrap_servers(),
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "ssl.ca.location": str(TLS_CA),
                },
            }
        ),
        # A team's own database: the outbox its application writes, and the read-only role an
        # audit reads it with.
        "AIRFLOW_CONN_OUTBOX_DB": json.dumps(
            {
                "conn_type": "postgres",
                "host": HOST,
                "port": PG_PORT,
                "login": OUTBOX_READER,
                "password": s["OUTBOX_READER_PASSWORD"],
                "schema": OUTBOX_DB,
            }
        ),
        "AIRFLOW_CONN_OUTBOX_APP": json.dumps(
            {
                "conn_type": "postgres",
                "host": HOST,
                "port": PG_PORT,
                "login": OUTBOX_OWNER,
                "password": s["OUTBOX_OWNER_PASSWORD"],
                "schema": OUTBOX_DB,
            }
        ),
        "AIRFLOW_CONN_TOXIPROXY_DEFAULT": json.dumps({"conn_type": "http", "host": HOST, "port": TOXIPROXY_PORT}),
        "AIRFLOW_CONN_SMTP_ALERTS": json.dumps(
            {
                "conn_type": "smtp",
                "host": HOST,
                "port": SMTP_PORT,
                "extra": {"from_email": "semantics@localhost", "disable_ssl": True, "disable_tls": True},
            }
        ),
        "SEMANTICS_SPARK_JARS": jars,
        "SPARK_LOCAL_IP": HOST,
    }
    return env


def write_airflow_passwords() -> None:
    """SimpleAuthManager's login for the UI: user admin, password from var/secrets.env."""
    path = VAR / "airflow" / "passwords.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"admin": _secrets()["AIRFLOW_ADMIN_PASSWORD"]}))
    path.chmod(0o600)


def write_env_file() -> Path:
    env_file = VAR / "stack.env"
    lines = [f"export {k}={_shell_quote(v)}" for k, v in environment().items()]
    env_file.write_text("\n".join(lines) + "\n")
    env_file.chmod(0o600)
    return env_file


def _shell_quote(v: str) -> str:
    return "'" + v.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------- PostgreSQL

PG_DATA = VAR / "postgres" / "data"
PG_LOG = LOGS / "postgres.log"
PG_SOCKET_DIR = RUN / "postgres"


def _pg_bin(name: str) -> str:
    candidates = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if candidates:
        return str(candidates[-1])
    found = shutil.which(name)
    if found:
        return found
    raise StackError(f"postgres: `{name}` not found; install Debian's postgresql package (local/setup does it)")


def _as_pg_owner(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; use the Debian package's service account then.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _pg_owner_ids() -> tuple[int, int]:
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        return pw.pw_uid, pw.pw_gid
    return os.getuid(), os.getgid()


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            os.chown(os.path.join(root, n), uid, gid)


def postgres_pid() -> int | None:
    pid_file = PG_DATA / "postmaster.pid"
    pid = _read_pid_first_line(pid_file)
    return pid if _pid_alive(pid) else None


def _read_pid_first_line(path: Path) -> int | None:
    try:
        return int(path.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _psql(sql: str, db: str = "postgres") -> str:
    cmd = _as_pg_owner(
        [
            _pg_bin("psql"),
            "-h",
            str(PG_SOCKET_DIR),
            "-p",
            str(PG_PORT),
            "-U",
            "postgres",
            "-d",
            db,
            "-v",
            "ON_ERROR_STOP=1",
            "-qAt",
        ]
    )
    # On stdin, not -c: the statements can hold a password, and `ps` shows arguments.
    res = subprocess.run(cmd, input=sql, capture_output=True, text=True)
    if res.returncode != 0:
        raise StackError(f"postgres: {res.stderr.strip()}")
    return res.stdout.strip()


def start_postgres() -> str:
    if postgres_pid():
        return "already running"
    _require_port_free(PG_PORT, "postgres")
    uid, gid = _pg_owner_ids()
    for d in (PG_DATA.parent, PG_SOCKET_DIR, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    os.chown(PG_SOCKET_DIR, uid, gid)
    if not (PG_DATA / "PG_VERSION").exists():
        PG_DATA.mkdir(parents=True, exist_ok=True)
        _chown_tree(PG_DATA.parent, uid, gid)
        res = subprocess.run(
            _as_pg_owner(
                [
                    _pg_bin("initdb"),
                    "-D",
                    str(PG_DATA),
                    "-U",
                    "postgres",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise StackError(f"postgres: initdb failed: {res.stderr.strip()[-500:]}")
        with open(PG_DATA / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# delivery-semantics local stack\n"
                f"listen_addresses = '{HOST}'\nport = {PG_PORT}\n"
                f"unix_socket_directories = '{PG_SOCKET_DIR}'\n"
                "shared_buffers = 512MB\nwork_mem = 32MB\nmaintenance_work_mem = 256MB\n"
                "max_connections = 200\nsynchronous_commit = on\nmax_wal_size = 2GB\n"
            )
    if not PG_LOG.exists():
        PG_LOG.touch()
    os.chown(PG_LOG, uid, gid)
    res = subprocess.run(
        _as_pg_owner([_pg_bin("pg_ctl"), "-D", str(PG_DATA), "-l", str(PG_LOG), "-w", "-t", "60", "start"]),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"postgres: pg_ctl start failed: {res.stderr.strip() or res.stdout.strip()}; see {PG_LOG}")
    return "started"


def bootstrap_postgres() -> str:
    """Roles and databases, idempotently: the platform's, Airflow's, and a team's outbox database
    with an owner that writes it and a read-only role that audits read it with."""
    s = _secrets()
    for role, db, pw in (
        (PLATFORM_DB, PLATFORM_DB, s["SEMANTICS_DB_PASSWORD"]),
        ("airflow", AIRFLOW_DB, s["AIRFLOW_DB_PASSWORD"]),
        (OUTBOX_OWNER, OUTBOX_DB, s["OUTBOX_OWNER_PASSWORD"]),
        (OUTBOX_READER, None, s["OUTBOX_READER_PASSWORD"]),
    ):
        exists = _psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'")
        verb = "ALTER" if exists else "CREATE"
        _psql(f"{verb} ROLE {role} LOGIN PASSWORD '{pw}'")
        if db and not _psql(f"SELECT 1 FROM pg_database WHERE datname = '{db}'"):
            _psql(f"CREATE DATABASE {db} OWNER {role}")
    _psql(
        f"ALTER ROLE {OUTBOX_READER} SET default_transaction_read_only = on;\n"
        f"GRANT CONNECT ON DATABASE {OUTBOX_DB} TO {OUTBOX_READER};"
    )
    _psql(
        f"GRANT USAGE ON SCHEMA public TO {OUTBOX_READER};\n"
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {OUTBOX_READER};\n"
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {OUTBOX_OWNER} IN SCHEMA public GRANT SELECT ON TABLES TO {OUTBOX_READER};",
        db=OUTBOX_DB,
    )
    return f"roles ok; {OUTBOX_DB} readable by {OUTBOX_READER} (read-only)"


def stop_postgres() -> None:
    if postgres_pid():
        subprocess.run(
            _as_pg_owner([_pg_bin("pg_ctl"), "-D", str(PG_DATA), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            text=True,
        )


# --------------------------------------------------------------------------- Toxiproxy

TOXIPROXY_PID = RUN / "toxiproxy.pid"
TOXIPROXY_LOG = LOGS / "toxiproxy.log"
TOXIPROXY_CONFIG = VAR / "toxiproxy.json"


def toxiproxy_url(path: str = "") -> str:
    return f"http://{HOST}:{TOXIPROXY_PORT}{path}"


def toxiproxy_pid() -> int | None:
    pid = _read_pid(TOXIPROXY_PID)
    return pid if _pid_alive(pid) else None


def _toxiproxy_proxies() -> list[dict]:
    clients = [
        {"name": b.name, "listen": f"{HOST}:{b.proxy_port}", "upstream": f"{HOST}:{b.client_port}", "enabled": True}
        for b in BROKERS
    ]
    links = [
        {"name": link.name, "listen": f"{link.address}:{link.port}", "upstream": f"{HOST}:{link.port}", "enabled": True}
        for link in LINKS
    ]
    return clients + links


def _toxiproxy_get(path: str):
    with urllib.request.urlopen(toxiproxy_url(path), timeout=2) as r:
        return json.loads(r.read())


def start_toxiproxy() -> str:
    if toxiproxy_pid():
        _ensure_proxies()
        return "already running"
    _require_port_free(TOXIPROXY_PORT, "toxiproxy")
    for b in BROKERS:
        _require_port_free(b.proxy_port, f"toxiproxy ({b.name} proxy)")
    TOXIPROXY_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    TOXIPROXY_CONFIG.write_text(json.dumps(_toxiproxy_proxies(), indent=2))
    _spawn(
        [str(TOXIPROXY_BIN), "-host", HOST, "-port", str(TOXIPROXY_PORT), "-config", str(TOXIPROXY_CONFIG)],
        TOXIPROXY_LOG,
        TOXIPROXY_PID,
    )
    _wait_until(
        lambda: (
            _port_open(TOXIPROXY_PORT)
            and all(_port_open(b.proxy_port) for b in BROKERS)
            and all(_port_open(link.port, link.address) for link in LINKS)
        ),
        20,
        "toxiproxy",
        TOXIPROXY_LOG,
    )
    _ensure_proxies()
    return "started"


def _ensure_proxies() -> None:
    """Heal what a crashed fault run may have left behind: disabled proxies or leftover toxics;
    and create the proxies a Toxiproxy started by an older version of this file lacks."""
    existing = _toxiproxy_get("/proxies")
    missing = [p for p in _toxiproxy_proxies() if p["name"] not in existing]
    if missing:
        req = urllib.request.Request(
            toxiproxy_url("/populate"),
            method="POST",
            data=json.dumps(missing).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=5).read()
    for p in _toxiproxy_proxies():
        req = urllib.request.Request(
            toxiproxy_url(f"/proxies/{p['name']}"),
            method="POST",
            data=json.dumps({"enabled": True, "upstream": p["upstream"]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=2).read()
        for toxic in _toxiproxy_get(f"/proxies/{p['name']}/toxics"):
            urllib.request.urlopen(
                urllib.request.Request(toxiproxy_url(f"/proxies/{p['name']}/toxics/{toxic['name']}"), method="DELETE"),
                timeout=2,
            ).read()


def stop_toxiproxy() -> None:
    _terminate(toxiproxy_pid(), grace=5)


# --------------------------------------------------------------------------- Kafka

CLUSTER_ID_FILE = VAR / "kafka" / "cluster.id"


def _cluster_id() -> str:
    if not CLUSTER_ID_FILE.exists():
        CLUSTER_ID_FILE.parent.mkdir(parents=True, exist_ok=True)
        CLUSTER_ID_FILE.write_text(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
    return CLUSTER_ID_FILE.read_text().strip()


def _render_hosts_file(b: Broker) -> Path:
    """The broker's own name resolution (the JVM's jdk.net.hosts.file): itself directly, every
    other broker through the link proxy from this broker to that one."""
    names = [f"{HOST} localhost {socket.gethostname()} {b.peer_host}"]
    names += [
        f"{link.address} {link.target.peer_host}" for link in LINKS if link.source == b and link.listener == "internal"
    ]
    b.hosts_file.parent.mkdir(parents=True, exist_ok=True)
    b.hosts_file.write_text(
        "# Rendered by local/devstack.py: how this broker reaches its peers.\n" + "\n".join(names) + "\n"
    )
    return b.hosts_file


def _broker_jvm_flags(b: Broker) -> list[str]:
    return [f"-Djdk.net.hosts.file={_render_hosts_file(b)}"]


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
        keystore=TLS_KEYSTORE,
        keystore_password=_secrets()["TLS_STORE_PASSWORD"],
        log_dir=b.data_dir / "data",
    )
    path = b.data_dir / "server.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)
    return path


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
    pid = _read_pid(b.pid_file)
    return pid if _pid_alive(pid) else None


def start_broker(b: Broker) -> str:
    if broker_pid(b):
        return "already running"
    for port, what in (
        (b.client_port, "client"),
        (b.secure_port, "SASL_SSL"),
        (b.internal_port, "inter-broker"),
        (b.controller_port, "controller"),
    ):
        _require_port_free(port, f"{b.name} ({what} listener)")
    config = _render_broker_config(b)
    _format_storage(b, config)
    _spawn(
        kafka_tool_command(
            "kafka.Kafka", str(config), heap=BROKER_HEAP, extra=[f"-Dkafka.logs.dir={LOGS}", *_broker_jvm_flags(b)]
        ),
        b.log_file,
        b.pid_file,
    )
    return "started"


def stop_broker(b: Broker, grace: float = 30) -> None:
    _terminate(broker_pid(b), grace)


def kill_broker(b: Broker, sig: int = signal.SIGKILL) -> None:
    """Sends `sig`; after SIGKILL, returns only once the process is gone, since the kernel takes a
    moment to tear down a JVM and its listeners, and a caller checks the cluster right after."""
    pid = broker_pid(b)
    if not pid:
        return
    os.kill(pid, sig)
    if sig == signal.SIGKILL:
        deadline = time.monotonic() + 10
        while _pid_alive(pid) and time.monotonic() < deadline:
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

    _wait_until(ready, timeout, "the 3-broker Kafka cluster", LOGS)


def make_tls() -> str:
    """A local CA, and one certificate for the brokers' SASL_SSL listeners that names localhost and
    127.0.0.1, in a PKCS12 keystore. Made once; the keys never leave var/tls (mode 700)."""
    if TLS_KEYSTORE.exists() and TLS_CA.exists():
        return "CA and broker keystore present"
    if not shutil.which("openssl"):
        raise StackError("tls: openssl is missing (Debian: openssl)")
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    TLS_DIR.chmod(0o700)
    ca_key, key, csr, cert, ext = (TLS_DIR / n for n in ("ca.key", "broker.key", "broker.csr", "broker.pem", "san.ext"))
    ext.write_text(f"subjectAltName=DNS:{SECURE_HOST},IP:{HOST}\n")
    subj = "/O=delivery-semantics local stack/CN="
    steps = (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", TLS_CA, "-days", "825",
         "-subj", subj + "local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subj + SECURE_HOST],
        ["x509", "-req", "-in", csr, "-CA", TLS_CA, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "825", "-extfile", ext],
        # The store password on the environment, not the command line.
        ["pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", TLS_CA, "-name", "broker",
         "-out", TLS_KEYSTORE, "-passout", "env:TLS_STORE_PASSWORD"],
    )  # fmt: skip
    env = {**os.environ, "TLS_STORE_PASSWORD": _secrets()["TLS_STORE_PASSWORD"]}
    for args in steps:
        res = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise StackError(f"tls: openssl {args[0]} failed: {res.stderr.strip()[-400:]}")
    for p in TLS_DIR.iterdir():
        p.chmod(0o644 if p == TLS_CA else 0o600)  # the CA certificate is public; the keys are not
    return f"local CA and broker certificate made in {TLS_DIR.relative_to(REPO) if TLS_DIR.is_relative_to(REPO) else TLS_DIR}"


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
        _secrets()["KAFKA_SCRAM_PASSWORD"].encode(),
    )
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(timeout=30)
    return f"SCRAM-SHA-512 user {SCRAM_USER!r} on the SASL_SSL listeners {secure_bootstrap_servers()}"


class NemesisBackend(Backend):
    """The nemesis's `local` backend: the broker processes this stack started, by pid."""

    name = "local"
    broker_ids = BROKER_IDS

    def _pid(self, node_id: int) -> int:
        pid = broker_pid(BROKERS[node_id - 1])
        if pid is None:
            raise NemesisError(f"broker-{node_id} is not running")
        return pid

    def kill(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while broker_pid(BROKERS[node_id - 1]) and time.monotonic() < deadline:
            time.sleep(0.1)

    def start(self, node_id: int) -> None:
        start_broker(BROKERS[node_id - 1])

    def pause(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        pid = broker_pid(BROKERS[node_id - 1])
        if pid:
            os.kill(pid, signal.SIGCONT)

    def is_running(self, node_id: int) -> bool:
        return broker_pid(BROKERS[node_id - 1]) is not None

    def link_proxies(self, node_id: int) -> list[str]:
        return links_of(node_id)


# --------------------------------------------------------------------------- Airflow metadata DB

AIRFLOW_MIGRATED = VAR / "airflow" / ".migrated"


def migrate_airflow() -> str:
    stamp = (REPO / "requirements.lock").read_text() if (REPO / "requirements.lock").exists() else ""
    if AIRFLOW_MIGRATED.exists() and AIRFLOW_MIGRATED.read_text() == stamp:
        return "already migrated"
    env = {**os.environ, **environment()}
    (VAR / "airflow").mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [str(REPO / ".venv" / "bin" / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True
    )
    (LOGS / "airflow-db-migrate.log").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        raise StackError(f"airflow: `airflow db migrate` failed; see {LOGS / 'airflow-db-migrate.log'}")
    # Fault scenarios kill and pause the shared brokers, so runs must never overlap: a task that
    # runs a whole run takes every slot, a mapped producer task one.
    res = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "airflow"),
            "pools",
            "set",
            CLUSTER_POOL,
            str(CLUSTER_POOL_SLOTS),
            "loads that inject faults into the shared Kafka cluster",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"airflow: creating the kafka_cluster pool failed: {res.stderr.strip()[-300:]}")
    AIRFLOW_MIGRATED.write_text(stamp)
    return "migrated"


def _migrate_schema() -> str:
    os.environ.update({k: v for k, v in environment().items() if k.startswith("AIRFLOW_CONN_")})
    from delivery_semantics import schema

    applied = schema.migrate()
    return f"applied {', '.join(applied)}" if applied else "current"


# --------------------------------------------------------------------------- Airflow UI processes

AIRFLOW_PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
API_SERVER_PORT = int(os.environ.get("SEMANTICS_AIRFLOW_PORT", "8080"))


def _airflow_pid_file(name: str) -> Path:
    return RUN / f"airflow-{name}.pid"


def airflow_pid(name: str) -> int | None:
    pid = _read_pid(_airflow_pid_file(name))
    return pid if _pid_alive(pid) else None


def start_ui() -> None:
    """The four Airflow processes, for the web UI at http://127.0.0.1:8080 (login admin)."""
    env = {**os.environ, **environment()}
    for name in AIRFLOW_PROCESSES:
        if airflow_pid(name):
            _report(f"airflow-{name}", "already running")
            continue
        args = ["api-server", "--port", str(API_SERVER_PORT)] if name == "api-server" else [name]
        if name == "api-server":
            _require_port_free(API_SERVER_PORT, "airflow api-server")
        _spawn(
            [str(REPO / ".venv" / "bin" / "airflow"), *args],
            LOGS / f"airflow-{name}.log",
            _airflow_pid_file(name),
            env=env,
        )
        _report(f"airflow-{name}", "started")
    _wait_until(lambda: _port_open(API_SERVER_PORT), 120, "airflow api-server", LOGS / "airflow-api-server.log")
    _report(
        "ui",
        f"http://{HOST}:{API_SERVER_PORT}  (user admin, password: AIRFLOW_ADMIN_PASSWORD in "
        f"{SECRETS_FILE.relative_to(REPO) if SECRETS_FILE.is_relative_to(REPO) else SECRETS_FILE})",
    )


def stop_ui() -> None:
    for name in AIRFLOW_PROCESSES:
        pid = airflow_pid(name)
        if pid:
            # The processes lead their own session: stop their workers too.
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _terminate(pid, grace=20)
            _report(f"airflow-{name}", "stopped")


# --------------------------------------------------------------------------- commands


def start() -> None:
    check_prerequisites()
    for d in (LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
    _report("postgres", start_postgres())
    _report("postgres", bootstrap_postgres())
    _report("tls", make_tls())
    _report("toxiproxy", start_toxiproxy())
    for b in BROKERS:
        _report(b.name, start_broker(b))
    for b in BROKERS:
        _wait_until(lambda b=b: _port_open(b.client_port) or not broker_pid(b), 90, b.name, b.log_file)
        if not broker_pid(b):
            raise StackError(f"{b.name}: exited during start-up; see {b.log_file}")
    wait_for_cluster()
    _report("kafka", f"3 brokers up, bootstrap {bootstrap_servers()}")
    _report("kafka", add_scram_user())
    _report("schema", _migrate_schema())
    _report("airflow-db", migrate_airflow())
    write_airflow_passwords()
    env_file = write_env_file()
    _report("env", f"source {env_file.relative_to(REPO)} to use the stack from a shell")


def stop() -> None:
    stop_ui()
    for b in BROKERS:
        pid = broker_pid(b)
        if pid:
            os.kill(pid, signal.SIGTERM)
    # Brokers shut down together: one at a time, the last ones would wait on a lost quorum.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(broker_pid(b) for b in BROKERS):
        time.sleep(0.3)
    for b in BROKERS:
        kill_broker(b)
        _report(b.name, "stopped")
    stop_toxiproxy()
    _report("toxiproxy", "stopped")
    stop_postgres()
    _report("postgres", "stopped")


def reset() -> None:
    stop()
    if VAR.exists():
        shutil.rmtree(VAR)
    _report("var", "wiped (downloads in .cache/ kept)")


def status_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    pid = postgres_pid()
    rows.append(("postgres", "up" if pid and _port_open(PG_PORT) else "down", str(PG_PORT), str(pid or "-")))
    pid = toxiproxy_pid()
    rows.append(
        ("toxiproxy", "up" if pid and _port_open(TOXIPROXY_PORT) else "down", str(TOXIPROXY_PORT), str(pid or "-"))
    )
    for b in BROKERS:
        pid = broker_pid(b)
        up = pid and _port_open(b.client_port)
        rows.append((b.name, "up" if up else "down", f"{b.proxy_port}->{b.client_port}", str(pid or "-")))
    return rows


def status() -> int:
    rows = status_rows()
    print(f"{'component':<22} {'state':<6} {'port':<12} pid")
    for r in rows:
        print(f"{r[0]:<22} {r[1]:<6} {r[2]:<12} {r[3]}")
    down = [r[0] for r in rows if r[1] != "up"]
    for name in AIRFLOW_PROCESSES:
        pid = airflow_pid(name)
        print(
            f"{'airflow-' + name:<22} {'up' if pid else 'off':<6} "
            f"{str(API_SERVER_PORT) if name == 'api-server' else '-':<12} {pid or '-'}"
        )
    if down:
        print(f"down: {', '.join(down)}")
    return 1 if down else 0


def _report(component: str, state: str) -> None:
    print(f"{component:<12} {state}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stack", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status", "reset", "env", "ui"])
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            start()
        elif args.command == "stop":
            stop()
        elif args.command == "reset":
            reset()
        elif args.command == "status":
            return status()
        elif args.command == "env":
            print(write_env_file())
        elif args.command == "ui":
            start()
            start_ui()
        return 0
    except StackError as e:
        print(f"stack {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
