"""MariaDB from Debian's packages: a team's outbox in MySQL's dialect, with an owner that writes it
and a read-only user (SELECT only) that audits read it with, as the PostgreSQL outbox has."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from devstack.credentials import passwords
from devstack.paths import LOGS, RUN, VAR
from devstack.ports import HOST, port_open
from devstack.processes import StackError, pid_alive, read_pid, report, terminate, wait_until
from devstack.service import Process, Service

MARIADB_PORT = int(os.environ.get("SEMANTICS_MARIADB_PORT", "3307"))
OUTBOX_DB = "outbox_demo"
OUTBOX_OWNER = "outbox_app"
OUTBOX_READER = "outbox_reader"

DATA = VAR / "mariadb" / "data"
SOCKET = RUN / "mariadb" / "mariadb.sock"
PID_FILE = RUN / "mariadb" / "mariadb.pid"
LOG = LOGS / "mariadb.log"


def mariadb_bin(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    raise StackError(f"mariadb: `{name}` not found; install Debian's mariadb-server package (local/setup does it)")


def _user() -> list[str]:
    # mariadbd refuses to run as root unless told which account to be: the package's own.
    return ["--user=mysql"] if os.geteuid() == 0 else []


def mariadb_pid() -> int | None:
    pid = read_pid(PID_FILE)
    return pid if pid_alive(pid) else None


def start_mariadb() -> str:
    if mariadb_pid():
        return "already running"
    for d in (DATA.parent, SOCKET.parent, LOGS):
        d.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("mysql")
        for d in (DATA.parent, SOCKET.parent):
            os.chown(d, pw.pw_uid, pw.pw_gid)
    if not (DATA / "mysql").exists():
        res = subprocess.run(
            [
                mariadb_bin("mariadb-install-db"),
                *_user(),
                f"--datadir={DATA}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise StackError(f"mariadb: mariadb-install-db failed: {(res.stderr or res.stdout).strip()[-500:]}")
    LOG.touch()
    if os.geteuid() == 0:
        pw = pwd.getpwnam("mysql")
        os.chown(LOG, pw.pw_uid, pw.pw_gid)
    subprocess.Popen(
        [
            mariadb_bin("mariadbd"),
            "--no-defaults",
            *_user(),
            f"--datadir={DATA}",
            f"--socket={SOCKET}",
            f"--pid-file={PID_FILE}",
            f"--log-error={LOG}",
            f"--bind-address={HOST}",
            f"--port={MARIADB_PORT}",
            "--default-time-zone=+00:00",
            "--innodb-buffer-pool-size=128M",
            "--skip-name-resolve",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_until(lambda: port_open(MARIADB_PORT) and SOCKET.exists(), 60, "mariadb", LOG)
    return "started"


def _sql(statements: str) -> str:
    # As root over the socket (socket authentication); on stdin: the statements hold passwords.
    res = subprocess.run(
        [mariadb_bin("mariadb"), f"--socket={SOCKET}", "-uroot", "-N", "-B"],
        input=statements,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise StackError(f"mariadb: {res.stderr.strip()}")
    return res.stdout.strip()


def bootstrap_mariadb() -> str:
    """The outbox database, its owner, and a reader that may only SELECT, idempotently."""
    s = passwords()
    _sql(
        f"CREATE DATABASE IF NOT EXISTS {OUTBOX_DB};\n"
        f"CREATE USER IF NOT EXISTS '{OUTBOX_OWNER}'@'%' IDENTIFIED BY '{s['OUTBOX_OWNER_PASSWORD']}';\n"
        f"ALTER USER '{OUTBOX_OWNER}'@'%' IDENTIFIED BY '{s['OUTBOX_OWNER_PASSWORD']}';\n"
        f"GRANT ALL PRIVILEGES ON {OUTBOX_DB}.* TO '{OUTBOX_OWNER}'@'%';\n"
        f"CREATE USER IF NOT EXISTS '{OUTBOX_READER}'@'%' IDENTIFIED BY '{s['OUTBOX_READER_PASSWORD']}';\n"
        f"ALTER USER '{OUTBOX_READER}'@'%' IDENTIFIED BY '{s['OUTBOX_READER_PASSWORD']}';\n"
        f"GRANT SELECT ON {OUTBOX_DB}.* TO '{OUTBOX_READER}'@'%';\n"
        "FLUSH PRIVILEGES;\n"
    )
    return f"{OUTBOX_DB} readable by {OUTBOX_READER} (SELECT only), port {MARIADB_PORT}"


def stop_mariadb() -> None:
    terminate(mariadb_pid(), 60)


def _user_conn(login: str, password_name: str) -> dict:
    return {
        "conn_type": "mysql",
        "host": HOST,
        "port": MARIADB_PORT,
        "login": login,
        "password": passwords()[password_name],
        "schema": OUTBOX_DB,
    }


def connections() -> dict[str, dict]:
    return {
        "outbox_mysql": _user_conn(OUTBOX_READER, "OUTBOX_READER_PASSWORD"),
        "outbox_mysql_app": _user_conn(OUTBOX_OWNER, "OUTBOX_OWNER_PASSWORD"),
    }


def _start() -> None:
    report("mariadb", start_mariadb())
    report("mariadb", bootstrap_mariadb())


def _stop() -> None:
    stop_mariadb()
    report("mariadb", "stopped")


SERVICE = Service("mariadb", _start, _stop, (Process("mariadb", MARIADB_PORT, mariadb_pid),), connections)
