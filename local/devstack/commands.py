"""`local/stack start|stop|status|reset|env|ui`: the services in order."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time

from devstack.airflow_processes import (
    AIRFLOW_PROCESSES,
    API_SERVER_PORT,
    airflow_pid,
    migrate_airflow,
    migrate_schema,
    start_ui,
    stop_ui,
    write_airflow_passwords,
)
from devstack.base import (
    KAFKA_LIB,
    LOGS,
    MIN_JAVA,
    REPO,
    RUN,
    TOXIPROXY_BIN,
    VAR,
    StackError,
    java_version,
    port_open,
    report,
    wait_until,
)
from devstack.connect import WORKERS, kill_worker, start_workers, worker_pid
from devstack.credentials import make_tls
from devstack.environment import write_env_file
from devstack.kafka import (
    BROKERS,
    add_scram_user,
    bootstrap_servers,
    broker_pid,
    kill_broker,
    start_broker,
    wait_for_cluster,
)
from devstack.mariadb import MARIADB_PORT, bootstrap_mariadb, mariadb_bin, mariadb_pid, start_mariadb, stop_mariadb
from devstack.postgres import (
    CDC,
    PG_PORT,
    bootstrap_cdc,
    bootstrap_postgres,
    pg_bin,
    postgres_pid,
    start_postgres,
    stop_postgres,
)
from devstack.spark import SERVICES as SPARK_SERVICES
from devstack.spark import spark_pid, start_spark, stop_spark
from devstack.toxiproxy import TOXIPROXY_PORT, start_toxiproxy, stop_toxiproxy, toxiproxy_pid


def check_prerequisites() -> None:
    major = java_version()
    if major < MIN_JAVA:
        raise StackError(f"java: Kafka 4 and Spark 4 need Java {MIN_JAVA}+, found Java {major}")
    if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
        raise StackError(f"kafka: no broker jars in {KAFKA_LIB}; run local/setup first (it needs Maven)")
    if not TOXIPROXY_BIN.exists():
        raise StackError(f"toxiproxy: no binary at {TOXIPROXY_BIN}; run local/setup first (it needs Go)")
    pg_bin("postgres")
    mariadb_bin("mariadbd")


def start() -> None:
    check_prerequisites()
    for d in (VAR, LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
        # The stack's umask makes everything its owner's; PostgreSQL and MariaDB run as their
        # packages' accounts, which must pass through these folders to their own (nothing here is
        # listable by them, and every file stays 0600).
        d.chmod(0o711)
    report("postgres", start_postgres())
    report("postgres", bootstrap_postgres())
    report(CDC.name, start_postgres(CDC))
    report(CDC.name, bootstrap_cdc())
    report("mariadb", start_mariadb())
    report("mariadb", bootstrap_mariadb())
    report("tls", make_tls())
    report("toxiproxy", start_toxiproxy())
    for b in BROKERS:
        report(b.name, start_broker(b))
    for b in BROKERS:
        wait_until(lambda b=b: port_open(b.client_port) or not broker_pid(b), 90, b.name, b.log_file)
        if not broker_pid(b):
            raise StackError(f"{b.name}: exited during start-up; see {b.log_file}")
    wait_for_cluster()
    report("kafka", f"3 brokers up, bootstrap {bootstrap_servers()}")
    report("kafka", add_scram_user())
    report("connect", start_workers())
    report("spark", start_spark())
    report("schema", migrate_schema())
    report("airflow-db", migrate_airflow())
    write_airflow_passwords()
    env_file = write_env_file()
    report("env", f"source {env_file.relative_to(REPO)} to use the stack from a shell")


def stop() -> None:
    stop_ui()
    stop_spark()
    report("spark", "stopped")
    # Workers leave before the brokers go, together (each one's shutdown waits on its group).
    _stop_together(WORKERS, worker_pid, kill_worker)
    # Brokers shut down together: one at a time, the last ones would wait on a lost quorum.
    _stop_together(BROKERS, broker_pid, kill_broker)
    stop_toxiproxy()
    report("toxiproxy", "stopped")
    stop_postgres()
    report("postgres", "stopped")
    stop_postgres(CDC)
    report(CDC.name, "stopped")
    stop_mariadb()
    report("mariadb", "stopped")


def _stop_together(services, pid_of, kill, grace: float = 30) -> None:
    """SIGTERM to each, a shared grace, then SIGKILL to whatever is left."""
    for x in services:
        pid = pid_of(x)
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_of(x) for x in services):
        time.sleep(0.3)
    for x in services:
        kill(x)
        report(x.name, "stopped")


def reset() -> None:
    stop()
    if VAR.exists():
        shutil.rmtree(VAR)
    report("var", "wiped (downloads in .cache/ kept)")


def status_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    pid = postgres_pid()
    rows.append(("postgres", "up" if pid and port_open(PG_PORT) else "down", str(PG_PORT), str(pid or "-")))
    pid = postgres_pid(CDC)
    rows.append((CDC.name, "up" if pid and port_open(CDC.port) else "down", str(CDC.port), str(pid or "-")))
    pid = mariadb_pid()
    rows.append(("mariadb", "up" if pid and port_open(MARIADB_PORT) else "down", str(MARIADB_PORT), str(pid or "-")))
    pid = toxiproxy_pid()
    rows.append(
        ("toxiproxy", "up" if pid and port_open(TOXIPROXY_PORT) else "down", str(TOXIPROXY_PORT), str(pid or "-"))
    )
    for b in BROKERS:
        pid = broker_pid(b)
        up = pid and port_open(b.client_port)
        rows.append((b.name, "up" if up else "down", f"{b.proxy_port}->{b.client_port}", str(pid or "-")))
    for w in WORKERS:
        pid = worker_pid(w)
        rows.append((w.name, "up" if pid and port_open(w.rest_port) else "down", str(w.rest_port), str(pid or "-")))
    for sp in SPARK_SERVICES:
        pid = spark_pid(sp)
        rows.append((sp.name, "up" if pid and port_open(sp.port) else "down", str(sp.port), str(pid or "-")))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="stack",
        description="the local stack: 3 KRaft brokers, Toxiproxy, PostgreSQL, MariaDB, Kafka Connect, Airflow",
    )
    parser.add_argument("command", choices=["start", "stop", "status", "reset", "env", "ui", "sample"])
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
        elif args.command == "sample":
            from devstack.sample import TABLE, TOPIC, fill_quickstart

            planted = fill_quickstart()
            print(
                f"sample: {TABLE} and topic {TOPIC} made afresh for audits/quickstart.yaml; planted: {json.dumps(planted)}"
            )
        return 0
    except StackError as e:
        print(f"stack {args.command}: {e}", file=sys.stderr)
        return 2
