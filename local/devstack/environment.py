"""The environment of everything that talks to the local stack (Airflow, the CLI, tests, Spark):
Airflow's settings, and each service's connections, which the service itself names."""

from __future__ import annotations

import json
import os
from pathlib import Path

from devstack import mail, postgres
from devstack.paths import KAFKA_LIB, LOGS, REPO, SPARK_JARS, VAR, write_private
from devstack.ports import HOST
from devstack.services import SERVICES

# The nemesis's backend here, by module and class: the production nemesis does not import the
# local stack.
NEMESIS_BACKEND = "devstack.nemesis_backend:ProcessBackend"


def environment() -> dict[str, str]:
    venv_bin = REPO / ".venv" / "bin"
    jars = ",".join(str(p) for p in sorted(SPARK_JARS.glob("*.jar")))
    connections = {
        **{conn_id: c for service in SERVICES for conn_id, c in service.connections().items()},
        **mail.connections(),  # the mail catcher: started by the tests that need it
        # JSON, because a URI cannot carry local[2]
        "spark_default": {"conn_type": "spark", "host": "local[2]"},
    }
    return {
        "SEMANTICS_HOME": str(REPO),
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{REPO / 'plugins'}:{REPO / 'local'}",
        "AIRFLOW_HOME": str(VAR / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.airflow_database_url(),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(LOGS / "airflow"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(VAR / "airflow" / "passwords.json"),
        **{f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(c) for conn_id, c in connections.items()},
        "SEMANTICS_NEMESIS_BACKEND": NEMESIS_BACKEND,
        # The brokers', PostgreSQL's and the lakehouse's data: a run checks their disk first.
        "SEMANTICS_DATA_DISKS": str(VAR),
        "SEMANTICS_SPARK_JARS": jars,
        # The Java load client's kafka-clients: the brokers' own version (one version of Kafka).
        "SEMANTICS_KAFKA_CLIENT_JARS": str(KAFKA_LIB),
        "SPARK_LOCAL_IP": HOST,
    }


def write_env_file() -> Path:
    env_file = VAR / "stack.env"
    lines = [f"export {k}={_shell_quote(v)}" for k, v in environment().items()]
    return write_private(env_file, "\n".join(lines) + "\n")


def _shell_quote(v: str) -> str:
    return "'" + v.replace("'", "'\"'\"'") + "'"
