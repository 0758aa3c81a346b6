"""PostgreSQL from Debian's packages, two clusters: the platform's (its database, Airflow's, and a
team's outbox and sink database with an owner that writes it and a read-only role that audits
read it with), and the change-data-capture outbox of the connector pipelines (`wal_level=logical`,
read by Debezium), on its own so that restarting it (the `outbox_db_restart` fault) leaves the
ledger and Airflow alone."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack.credentials import passwords
from devstack.paths import LOGS, RUN, VAR
from devstack.ports import HOST, require_port_free
from devstack.processes import StackError, pid_alive, report
from devstack.service import Process, Service

PG_PORT = int(os.environ.get("SEMANTICS_PG_PORT", "5433"))
PLATFORM_DB = "semantics"
AIRFLOW_DB = "airflow"
OUTBOX_DB = "outbox_demo"
OUTBOX_OWNER = "outbox_app"
OUTBOX_READER = "outbox_reader"

CDC_PORT = int(os.environ.get("SEMANTICS_CDC_PG_PORT", "5434"))
CDC_DB = "outbox_cdc"


@dataclass(frozen=True)
class Cluster:
    name: str
    port: int
    settings: str = ""

    @property
    def data(self) -> Path:
        return VAR / self.name / "data"

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    @property
    def socket_dir(self) -> Path:
        return RUN / self.name


MAIN = Cluster("postgres", PG_PORT)
# Debezium reads the outbox through a logical replication slot, one per pipeline run.
CDC = Cluster(
    "postgres-cdc",
    CDC_PORT,
    "shared_buffers = 128MB\nwal_level = logical\nmax_replication_slots = 32\nmax_wal_senders = 32\n",
)


def pg_bin(name: str) -> str:
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


def postgres_pid(cluster: Cluster = MAIN) -> int | None:
    pid_file = cluster.data / "postmaster.pid"
    pid = read_pid_first_line(pid_file)
    return pid if pid_alive(pid) else None


def read_pid_first_line(path: Path) -> int | None:
    try:
        return int(path.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _psql(sql: str, db: str = "postgres", cluster: Cluster = MAIN) -> str:
    cmd = _as_pg_owner(
        [
            pg_bin("psql"),
            "-h",
            str(cluster.socket_dir),
            "-p",
            str(cluster.port),
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


def start_postgres(cluster: Cluster = MAIN) -> str:
    if postgres_pid(cluster):
        return "already running"
    require_port_free(cluster.port, cluster.name)
    uid, gid = _pg_owner_ids()
    for d in (cluster.data.parent, cluster.socket_dir, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    os.chown(cluster.socket_dir, uid, gid)
    if not (cluster.data / "PG_VERSION").exists():
        cluster.data.mkdir(parents=True, exist_ok=True)
        _chown_tree(cluster.data.parent, uid, gid)
        res = subprocess.run(
            _as_pg_owner(
                [
                    pg_bin("initdb"),
                    "-D",
                    str(cluster.data),
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
            raise StackError(f"{cluster.name}: initdb failed: {res.stderr.strip()[-500:]}")
        with open(cluster.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# delivery-semantics local stack\n"
                f"listen_addresses = '{HOST}'\nport = {cluster.port}\n"
                f"unix_socket_directories = '{cluster.socket_dir}'\n"
                "shared_buffers = 512MB\nwork_mem = 32MB\nmaintenance_work_mem = 256MB\n"
                "max_connections = 200\nsynchronous_commit = on\nmax_wal_size = 2GB\n" + cluster.settings
            )
    if not cluster.log.exists():
        cluster.log.touch()
    os.chown(cluster.log, uid, gid)
    res = subprocess.run(
        _as_pg_owner([pg_bin("pg_ctl"), "-D", str(cluster.data), "-l", str(cluster.log), "-w", "-t", "60", "start"]),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(
            f"{cluster.name}: pg_ctl start failed: {res.stderr.strip() or res.stdout.strip()}; see {cluster.log}"
        )
    return "started"


def bootstrap_postgres() -> str:
    """Roles and databases, idempotently: the platform's, Airflow's, and a team's outbox database
    with an owner that writes it and a read-only role that audits read it with."""
    s = passwords()
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


def bootstrap_cdc() -> str:
    """The pipelines' outbox database: its owner writes the outbox and is the role Debezium
    replicates with (it owns the tables, so it may publish them); the reader audits it."""
    s = passwords()
    for role, attrs, pw in (
        (OUTBOX_OWNER, "LOGIN REPLICATION", s["OUTBOX_OWNER_PASSWORD"]),
        (OUTBOX_READER, "LOGIN", s["OUTBOX_READER_PASSWORD"]),
    ):
        verb = "ALTER" if _psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'", cluster=CDC) else "CREATE"
        _psql(f"{verb} ROLE {role} {attrs} PASSWORD '{pw}'", cluster=CDC)
    if not _psql(f"SELECT 1 FROM pg_database WHERE datname = '{CDC_DB}'", cluster=CDC):
        _psql(f"CREATE DATABASE {CDC_DB} OWNER {OUTBOX_OWNER}", cluster=CDC)
    _psql(
        f"ALTER ROLE {OUTBOX_READER} SET default_transaction_read_only = on;\n"
        f"GRANT CONNECT ON DATABASE {CDC_DB} TO {OUTBOX_READER};",
        cluster=CDC,
    )
    _psql(
        f"GRANT USAGE ON SCHEMA public TO {OUTBOX_READER};\n"
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {OUTBOX_OWNER} IN SCHEMA public GRANT SELECT ON TABLES TO {OUTBOX_READER};",
        db=CDC_DB,
        cluster=CDC,
    )
    wal = _psql("SHOW wal_level", cluster=CDC)
    if wal != "logical":
        raise StackError(f"{CDC.name}: wal_level is {wal}, and Debezium needs logical; see {CDC.data}/postgresql.conf")
    return f"wal_level=logical; {CDC_DB} written by {OUTBOX_OWNER}, readable by {OUTBOX_READER}"


def restart_postgres(cluster: Cluster, mode: str = "fast") -> None:
    """pg_ctl restart: `fast` ends sessions cleanly, `immediate` is a crash and recovery."""
    res = subprocess.run(
        _as_pg_owner([pg_bin("pg_ctl"), "-D", str(cluster.data), "-l", str(cluster.log), "-m", mode, "-w", "restart"]),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"{cluster.name}: pg_ctl restart failed: {res.stderr.strip() or res.stdout.strip()}")


def stop_postgres(cluster: Cluster = MAIN) -> None:
    if postgres_pid(cluster):
        subprocess.run(
            _as_pg_owner([pg_bin("pg_ctl"), "-D", str(cluster.data), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            text=True,
        )


def _role(login: str, password_name: str, db: str, port: int = PG_PORT) -> dict:
    return {
        "conn_type": "postgres",
        "host": HOST,
        "port": port,
        "login": login,
        "password": passwords()[password_name],
        "schema": db,
    }


def connections() -> dict[str, dict]:
    """The platform's database, and a team's own: the outbox its application writes, and the
    read-only role an audit reads it with."""
    return {
        "ledger_db": _role(PLATFORM_DB, "SEMANTICS_DB_PASSWORD", PLATFORM_DB),
        "outbox_db": _role(OUTBOX_READER, "OUTBOX_READER_PASSWORD", OUTBOX_DB),
        "outbox_app": _role(OUTBOX_OWNER, "OUTBOX_OWNER_PASSWORD", OUTBOX_DB),
        # The connector pipelines' outbox (logical decoding): the load and Debezium write and read
        # it as its owner; audits read it with the read-only role.
        "cdc_outbox_app": _role(OUTBOX_OWNER, "OUTBOX_OWNER_PASSWORD", CDC_DB, CDC_PORT),
        "cdc_outbox": _role(OUTBOX_READER, "OUTBOX_READER_PASSWORD", CDC_DB, CDC_PORT),
    }


def airflow_database_url() -> str:
    return f"postgresql+psycopg2://airflow:{passwords()['AIRFLOW_DB_PASSWORD']}@{HOST}:{PG_PORT}/{AIRFLOW_DB}"


def cluster_service(cluster: Cluster, bootstrap, connections_of=lambda: {}) -> Service:
    """A PostgreSQL cluster as a service of the stack: started, then `bootstrap` (its roles and
    databases); `connections_of` publishes its connections."""

    def start() -> None:
        report(cluster.name, start_postgres(cluster))
        report(cluster.name, bootstrap())

    def stop() -> None:
        stop_postgres(cluster)
        report(cluster.name, "stopped")

    return Service(
        cluster.name,
        start,
        stop,
        (Process(cluster.name, cluster.port, lambda: postgres_pid(cluster)),),
        connections_of,
    )


# The connections of both clusters are the main one's to publish: they share roles and passwords.
SERVICE = cluster_service(MAIN, bootstrap_postgres, connections)
CDC_SERVICE = cluster_service(CDC, bootstrap_cdc)
