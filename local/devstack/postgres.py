"""PostgreSQL from Debian's packages: the platform's database, Airflow's, and a team's outbox
database with an owner that writes it and a read-only role that audits read it with."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from devstack.base import HOST, LOGS, RUN, VAR, StackError, pid_alive, require_port_free
from devstack.credentials import passwords

PG_PORT = int(os.environ.get("SEMANTICS_PG_PORT", "5433"))
PLATFORM_DB = "semantics"
AIRFLOW_DB = "airflow"
OUTBOX_DB = "outbox_demo"
OUTBOX_OWNER = "outbox_app"
OUTBOX_READER = "outbox_reader"

PG_DATA = VAR / "postgres" / "data"
PG_LOG = LOGS / "postgres.log"
PG_SOCKET_DIR = RUN / "postgres"


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


def postgres_pid() -> int | None:
    pid_file = PG_DATA / "postmaster.pid"
    pid = read_pid_first_line(pid_file)
    return pid if pid_alive(pid) else None


def read_pid_first_line(path: Path) -> int | None:
    try:
        return int(path.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _psql(sql: str, db: str = "postgres") -> str:
    cmd = _as_pg_owner(
        [
            pg_bin("psql"),
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
    require_port_free(PG_PORT, "postgres")
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
                    pg_bin("initdb"),
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
        _as_pg_owner([pg_bin("pg_ctl"), "-D", str(PG_DATA), "-l", str(PG_LOG), "-w", "-t", "60", "start"]),
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"postgres: pg_ctl start failed: {res.stderr.strip() or res.stdout.strip()}; see {PG_LOG}")
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


def stop_postgres() -> None:
    if postgres_pid():
        subprocess.run(
            _as_pg_owner([pg_bin("pg_ctl"), "-D", str(PG_DATA), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            text=True,
        )


def _role(login: str, password_name: str, db: str) -> dict:
    return {
        "conn_type": "postgres",
        "host": HOST,
        "port": PG_PORT,
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
    }


def airflow_database_url() -> str:
    return f"postgresql+psycopg2://airflow:{passwords()['AIRFLOW_DB_PASSWORD']}@{HOST}:{PG_PORT}/{AIRFLOW_DB}"
