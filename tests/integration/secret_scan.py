"""Where a secret of the stack must never be: a process's arguments, a log, an artifact, a row of
the results database. `findings()` names each place one is found (never the secret itself); the
integration suite runs it over the whole run when it ends (conftest.py), and test_security.py
over the stack as it is."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import psycopg2.errors

import devstack
from delivery_semantics.plumbing.endpoints import ledger_database

REPO = Path(__file__).resolve().parents[2]
# Text the platform writes as it runs; the stack's own configuration files (var/secrets.env,
# stack.env, the Connect secrets folder, the brokers' properties) are where secrets belong, mode 600.
SCANNED = (REPO / "var" / "logs", REPO / "artifacts", REPO / "var" / "reports")
MIN_SECRET = 8  # shorter values would match by chance


def secrets() -> dict[str, str]:
    return {k: v for k, v in devstack.passwords().items() if len(v) >= MIN_SECRET}


def in_processes(values: dict[str, str]) -> list[str]:
    args = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [
        f"process {line.split(None, 1)[0]}: {name}"
        for line in args.splitlines()
        for name, v in values.items()
        if v in line
    ]


def in_files(values: dict[str, str]) -> list[str]:
    found = []
    needles = {name: v.encode() for name, v in values.items()}
    for root in SCANNED:
        for p in root.rglob("*") if root.is_dir() else ():
            try:
                if not p.is_file() or p.stat().st_size > 512 << 20:
                    continue
                data = p.read_bytes()
            except FileNotFoundError:  # a run's temporary file, gone since the listing
                continue
            found += [f"{p.relative_to(REPO)}: {name}" for name, v in needles.items() if v in data]
    return found


def in_rows(values: dict[str, str]) -> list[str]:
    """The secrets travel as COPY data into a temporary table, never in a statement's text: a
    statement that fails (a run's staging table dropped since the listing) is written to the
    server's log whole, and the log is one of the places this scan reads."""
    found = []
    c = psycopg2.connect(**ledger_database().psycopg2_kwargs())
    try:
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("CREATE TEMPORARY TABLE secret_patterns (pattern text)")
            escaped = (v.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") for v in values.values())
            text = "".join(f"%{v}%\n" for v in escaped)
            cur.copy_expert("COPY secret_patterns FROM STDIN", io.StringIO(text))
            cur.execute(
                "SELECT quote_ident(table_name) FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
            )
            for (t,) in cur.fetchall():
                try:
                    cur.execute(
                        f"SELECT count(*) FROM {t} x WHERE x::text LIKE ANY(SELECT pattern FROM secret_patterns)"
                    )
                except psycopg2.errors.UndefinedTable:
                    continue
                (n,) = cur.fetchone()
                if n:
                    found.append(f"table {t}: {n} rows")
    finally:
        c.close()
    return found


def findings() -> list[str]:
    values = secrets()
    return in_processes(values) + in_files(values) + in_rows(values)
