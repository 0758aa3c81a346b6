"""Airflow on the local stack: its metadata database migrated, the cluster pool, and on demand the
four processes of the UI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from delivery_semantics.catalog import CLUSTER_POOL_SLOTS
from delivery_semantics.entry.deploy import DeployError, ensure_pool
from devstack.credentials import SECRETS_FILE, passwords
from devstack.environment import environment
from devstack.paths import LOGS, REPO, RUN, VAR, write_private
from devstack.ports import HOST, port_open, require_port_free
from devstack.processes import StackError, pid_alive, read_pid, report, spawn, terminate, wait_until

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
    try:
        ensure_pool(CLUSTER_POOL_SLOTS, env)
    except DeployError as e:
        raise StackError(f"airflow: {e}") from None
    AIRFLOW_MIGRATED.write_text(stamp)
    return "migrated"


def migrate_schema() -> str:
    os.environ.update({k: v for k, v in environment().items() if k.startswith("AIRFLOW_CONN_")})
    from delivery_semantics.history import schema

    applied = schema.migrate()
    return f"applied {', '.join(applied)}" if applied else "current"


AIRFLOW_PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
API_SERVER_PORT = int(os.environ.get("SEMANTICS_AIRFLOW_PORT", "8080"))


def _airflow_pid_file(name: str) -> Path:
    return RUN / f"airflow-{name}.pid"


def airflow_pid(name: str) -> int | None:
    pid = read_pid(_airflow_pid_file(name))
    return pid if pid_alive(pid) else None


def start_ui() -> None:
    """The four Airflow processes, for the web UI at http://127.0.0.1:8080 (login admin)."""
    env = {**os.environ, **environment()}
    for name in AIRFLOW_PROCESSES:
        if airflow_pid(name):
            report(f"airflow-{name}", "already running")
            continue
        args = ["api-server", "--host", HOST, "--port", str(API_SERVER_PORT)] if name == "api-server" else [name]
        if name == "api-server":
            require_port_free(API_SERVER_PORT, "airflow api-server")
        spawn(
            [str(REPO / ".venv" / "bin" / "airflow"), *args],
            LOGS / f"airflow-{name}.log",
            _airflow_pid_file(name),
            env=env,
        )
        report(f"airflow-{name}", "started")
    wait_until(lambda: port_open(API_SERVER_PORT), 120, "airflow api-server", LOGS / "airflow-api-server.log")
    report(
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
            terminate(pid, grace=20)
            report(f"airflow-{name}", "stopped")


def write_airflow_passwords() -> None:
    """SimpleAuthManager's login for the UI: user admin, password from var/secrets.env."""
    path = VAR / "airflow" / "passwords.json"
    write_private(path, json.dumps({"admin": passwords()["AIRFLOW_ADMIN_PASSWORD"]}))
