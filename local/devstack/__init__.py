"""The local stack without Docker, for development, tests and CI: 3 KRaft brokers, Toxiproxy,
PostgreSQL (and a second cluster with logical decoding for the connector pipelines' outbox),
MariaDB (a team's MySQL outbox), two Kafka Connect clusters of two workers (exactly-once source
support off and on), a Spark standalone master and worker, Airflow's database and, on demand, the Airflow UI processes and a mail
catcher. Not part of what a deployment mounts (docker-compose.yaml runs
its own services).

Usage: local/stack {start,stop} [SERVICE ...] | {status,reset,env,ui,sample}

One module per service, as kafkatest's services/ are: postgres, mariadb, kafka, connect, spark, toxiproxy,
credentials (passwords, TLS), mail, airflow_processes. Each makes its `service.Service` object (start,
stop, processes, connections, needs); `services` is the registry, in start order; what they share is
`paths` (where the stack lives), `ports` (the loopback host and its ports) and `processes` (spawn,
wait, stop), `environment` the connections they publish, `commands` the `local/stack` commands over
the registry, and `nemesis_backend` the nemesis's backend over their processes.

Everything lives under the repository: downloads in .cache/ (made by local/setup), state and
logs in var/. `start` is idempotent, `stop` keeps data, `reset` wipes var/.

Tests and benchmarks import the names below.
"""

from devstack.commands import status_rows
from devstack.credentials import SCRAM_USER, passwords, secret
from devstack.environment import environment
from devstack.kafka import (
    BROKERS,
    Broker,
    broker_pid,
    fetches_from,
    kafka_tool_command,
    kill_broker,
    links_of,
    quorum_leader,
    start_broker,
    stop_broker,
    wait_for_cluster,
)
from devstack.nemesis_backend import ProcessBackend
from devstack.paths import LOGS, VAR
from devstack.ports import HOST
from devstack.postgres import start_postgres, stop_postgres
from devstack.processes import StackError
from devstack.toxiproxy import toxiproxy_url

__all__ = [
    "BROKERS",
    "HOST",
    "LOGS",
    "SCRAM_USER",
    "VAR",
    "Broker",
    "ProcessBackend",
    "StackError",
    "broker_pid",
    "environment",
    "fetches_from",
    "kafka_tool_command",
    "kill_broker",
    "links_of",
    "passwords",
    "quorum_leader",
    "secret",
    "start_broker",
    "start_postgres",
    "status_rows",
    "stop_broker",
    "stop_postgres",
    "toxiproxy_url",
    "wait_for_cluster",
]
