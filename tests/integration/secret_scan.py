"""Where a secret of the stack must never be: a process's arguments, a log, an artifact, a row of
the results database. `findings()` names each place one is found (never the secret itself); the
integration suite runs it over the whole run when it ends (conftest.py), and test_security.py
over the stack as it is."""

from __future__ import annotations

import subprocess
from pathlib import Path

import devstack
from delivery_semantics.reporting import report

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
            if not p.is_file() or p.stat().st_size > 512 << 20:
                continue
            data = p.read_bytes()
            found += [f"{p.relative_to(REPO)}: {name}" for name, v in needles.items() if v in data]
    return found


def in_rows(values: dict[str, str]) -> list[str]:
    tables = [
        r["t"]
        for r in report.query(
            "SELECT quote_ident(table_name) AS t FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
    ]
    patterns = [f"%{v}%" for v in values.values()]
    found = []
    for t in tables:
        n = report.query(f"SELECT count(*) AS n FROM {t} x WHERE x::text LIKE ANY(%s)", (patterns,))[0]["n"]
        if n:
            found.append(f"table {t}: {n} rows")
    return found


def findings() -> list[str]:
    values = secrets()
    return in_processes(values) + in_files(values) + in_rows(values)
