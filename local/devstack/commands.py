"""`local/stack start|stop [SERVICE ...]`, `status|reset|env|ui|sample`: the services of the
registry (`services.SERVICES`), in its order."""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from devstack import postgres
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
from devstack.environment import write_env_file
from devstack.mariadb import mariadb_bin
from devstack.paths import KAFKA_LIB, LOGS, REPO, RUN, TOXIPROXY_BIN, VAR
from devstack.postgres import pg_bin
from devstack.processes import MIN_JAVA, StackError, java_version, report
from devstack.service import Service
from devstack.services import BY_NAME, SERVICES


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


def with_needs(names: list[str]) -> list[Service]:
    """The services named, and those they need first, in the registry's order; an unknown name
    is refused in one line."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise StackError(f"no service named {', '.join(map(repr, unknown))}; the services: {', '.join(BY_NAME)}")
    wanted: set[str] = set()

    def add(name: str) -> None:
        if name not in wanted:
            wanted.add(name)
            for need in BY_NAME[name].needs:
                add(need)

    for n in names:
        add(n)
    return [s for s in SERVICES if s.name in wanted]


def start(names: list[str] | None = None) -> None:
    """Every service, or those named (with what they need). The platform's schema and Airflow's
    database are migrated whenever PostgreSQL is among them."""
    services = with_needs(names) if names else list(SERVICES)
    check_prerequisites()
    for d in (VAR, LOGS, RUN):
        d.mkdir(parents=True, exist_ok=True)
        # The stack's umask makes everything its owner's; PostgreSQL and MariaDB run as their
        # packages' accounts, which must pass through these folders to their own (nothing here is
        # listable by them, and every file stays 0600).
        d.chmod(0o711)
    for service in services:
        service.start()
    if postgres.SERVICE in services:
        report("schema", migrate_schema())
        report("airflow-db", migrate_airflow())
        write_airflow_passwords()
    env_file = write_env_file()
    report("env", f"source {env_file.relative_to(REPO)} to use the stack from a shell")


def stop(names: list[str] | None = None) -> None:
    """Every service (the UI first), or only those named, in the reverse of the start order."""
    services = with_needs(names) if names else list(SERVICES)
    if names:
        services = [s for s in services if s.name in names]
    else:
        stop_ui()
    for service in reversed(services):
        service.stop()


def reset() -> None:
    stop()
    if VAR.exists():
        shutil.rmtree(VAR)
    report("var", "wiped (downloads in .cache/ kept)")


def status_rows() -> list[tuple[str, str, str, str]]:
    return [
        (p.name, "up" if p.up() else "down", p.shown_port or str(p.port), str(p.pid() or "-"))
        for service in SERVICES
        for p in service.processes
    ]


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
        description="the local stack: 3 KRaft brokers, Toxiproxy, PostgreSQL, MariaDB, Kafka Connect, Spark, Airflow",
    )
    parser.add_argument("command", choices=["start", "stop", "status", "reset", "env", "ui", "sample"])
    parser.add_argument(
        "services", nargs="*", metavar="SERVICE", help=f"start or stop only these ({', '.join(BY_NAME)})"
    )
    args = parser.parse_args(argv)
    try:
        if args.services and args.command not in ("start", "stop"):
            raise StackError(f"only start and stop take service names, not {args.command}")
        if args.command == "start":
            start(args.services)
        elif args.command == "stop":
            stop(args.services)
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
