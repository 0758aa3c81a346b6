"""Where a secret of the stack must never be: a process's arguments, a log, an artifact, a row of
the results database or of Airflow's, a record of the stack's own topics. `findings()` names each
place one is found (never the secret itself); the integration suite runs it over the whole run when
it ends (conftest.py), and test_security.py over the stack as it is. A `ProcessSampler` reads every
process's arguments through the run, since spark-submit and the JVMs are gone by its end.

Each secret is looked for as it is and in the forms it would take on its way somewhere: Base64 at
any alignment (which also finds it in an HTTP Basic `Authorization` header, user:password encoded),
and the secrets the platform derives from it (a client keystore's password)."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import threading
import time
from pathlib import Path

import psycopg2.errors

import devstack
from delivery_semantics.plumbing.endpoints import ledger_database

REPO = Path(__file__).resolve().parents[2]
# Text the platform writes as it runs; the stack's own configuration files (var/secrets.env,
# stack.env, the Connect secrets folder, the brokers' properties) are where secrets belong, mode 600.
SCANNED = (REPO / "var" / "logs", REPO / "artifacts", REPO / "var" / "reports")
MIN_SECRET = 8  # shorter values would match by chance
MIN_ENCODED = 12  # the shortest Base64 core looked for
# The topics a load writes: generated records, many and large, which no secret reaches by design.
RUN_TOPIC_PREFIXES = ("semantics.", "semantics-", "__consumer_offsets")
TOPIC_RECORDS = 200_000  # read at most this many records of one topic


def secrets() -> dict[str, str]:
    values = {k: v for k, v in devstack.passwords().items() if len(v) >= MIN_SECRET}
    values.update(_derived())
    return values


def _derived() -> dict[str, str]:
    """Secrets the platform derives from the stack's: the mutual-TLS client's keystore password
    (endpoints.client_keystore, derived from the key)."""
    from delivery_semantics.plumbing.endpoints import client_keystore
    from devstack.credentials import TLS_CLIENT_CERT, TLS_CLIENT_KEY

    try:
        conf = client_keystore(str(TLS_CLIENT_CERT), str(TLS_CLIENT_KEY), devstack.passwords()["CLIENT_KEY_PASSWORD"])
    except Exception:  # no TLS material on this stack: nothing derived from it
        return {}
    return {"derived: the mTLS client's keystore password": conf["ssl.keystore.password"]}


def needles(values: dict[str, str]) -> dict[str, bytes]:
    """Each secret as bytes, and its Base64 at each of the three alignments (the characters that
    depend on the secret's bytes alone): a name for each."""
    out = {}
    for name, v in values.items():
        raw = v.encode()
        out[name] = raw
        for k in range(3):
            encoded = base64.b64encode(b"\0" * k + raw)
            skip = (8 * k + 5) // 6
            core = encoded[skip : (8 * (k + len(raw))) // 6]
            if len(core) >= MIN_ENCODED:
                out[f"{name} (Base64, offset {k})"] = core
    return out


def _matches(data: bytes, found_in: str, wanted: dict[str, bytes]) -> list[str]:
    return [f"{found_in}: {name}" for name, v in wanted.items() if v in data]


def process_arguments() -> dict[int, bytes]:
    """Every process's arguments, read from /proc (no process of its own started)."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                out[int(entry.name)] = f.read()
        except OSError:  # gone since the listing, or not ours to read
            continue
    return out


def in_processes(values: dict[str, str]) -> list[str]:
    wanted = needles(values)
    found = []
    for pid, args in process_arguments().items():
        found += _matches(args, f"process {pid}", wanted)
    args = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    for line in args.splitlines():
        found += _matches(line.encode(), f"process {line.split(None, 1)[0]} (ps)", wanted)
    return sorted(set(found))


class ProcessSampler:
    """Reads every process's arguments every `interval` seconds, from start() to stop(), and keeps
    where a secret was seen: a spark-submit or a JVM that lived a second is seen."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.found: set[str] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="secret-scan-sampler")
        self._wanted: dict[str, bytes] = {}

    def start(self) -> ProcessSampler:
        self._wanted = needles(secrets())
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for pid, args in process_arguments().items():
                if any(v in args for v in self._wanted.values()):
                    name = args.split(b"\0", 1)[0].decode(errors="replace")[-60:]
                    self.found.update(_matches(args, f"process {pid} ({name}), seen while running", self._wanted))
            self.samples += 1

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(timeout=5)
        return sorted(self.found)


def in_files(values: dict[str, str]) -> list[str]:
    found = []
    wanted = needles(values)
    for root in SCANNED:
        for p in root.rglob("*") if root.is_dir() else ():
            try:
                if not p.is_file() or p.stat().st_size > 512 << 20:
                    continue
                data = p.read_bytes()
            except FileNotFoundError:  # a run's temporary file, gone since the listing
                continue
            found += _matches(data, str(p.relative_to(REPO)), wanted)
    return found


def in_rows(values: dict[str, str], connect_kwargs: dict | None = None, label: str = "") -> list[str]:
    """Every row of every table of a database (the results database unless told), as text, and,
    for bytea columns, as bytes; a partitioned table once, through its parent. The secrets travel
    as COPY data into temporary tables, never in a statement's text: a statement that fails (a
    run's staging table dropped since the listing) is written to the server's log whole, and the
    log is one of the places this scan reads. One regular expression of every form a row: a third
    of the time of a LIKE per form."""
    found = []
    wanted = needles(values)
    c = psycopg2.connect(**(connect_kwargs or ledger_database().psycopg2_kwargs()))
    try:
        c.autocommit = True
        with c.cursor() as cur:
            cur.execute("CREATE TEMPORARY TABLE secret_patterns (raw bytea)")
            cur.copy_expert(
                "COPY secret_patterns FROM STDIN", io.StringIO("".join(f"\\\\x{v.hex()}\n" for v in wanted.values()))
            )
            cur.execute("CREATE TEMPORARY TABLE secret_regex (pattern text)")
            regex = "|".join("".join(ch if ch.isalnum() else "\\" + ch for ch in v.decode()) for v in wanted.values())
            cur.copy_expert("COPY secret_regex FROM STDIN", io.StringIO(regex.replace("\\", "\\\\") + "\n"))
            cur.execute(_TABLES)
            tables = [t for (t,) in cur.fetchall()]
            cur.execute(_BYTEA_COLUMNS)
            bytea = cur.fetchall()
            for t in tables:
                try:
                    cur.execute(f"SELECT count(*) FROM {t} x WHERE x::text ~ (SELECT pattern FROM secret_regex)")
                except (psycopg2.errors.UndefinedTable, psycopg2.errors.InsufficientPrivilege):
                    continue
                (n,) = cur.fetchone()
                if n:
                    found.append(f"{label}table {t}: {n} rows")
            for t, col in bytea:
                try:
                    cur.execute(
                        f"SELECT count(*) FROM {t} x WHERE EXISTS "
                        f"(SELECT 1 FROM secret_patterns s WHERE position(s.raw IN x.{col}) > 0)"
                    )
                except (psycopg2.errors.UndefinedTable, psycopg2.errors.InsufficientPrivilege):
                    continue
                (n,) = cur.fetchone()
                if n:
                    found.append(f"{label}table {t}, bytea column {col}: {n} rows")
    finally:
        c.close()
    return found


# Tables and partitioned tables, not their partitions (the parent's scan reads them), outside the
# catalogs and the temporary schemas.
_OWN = (
    "c.relkind IN ('r', 'p') AND NOT c.relispartition AND n.nspname <> 'information_schema' "
    "AND n.nspname NOT LIKE 'pg\\_%'"
)
_TABLES = (
    "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c "
    f"JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_OWN}"
)
_BYTEA_COLUMNS = (
    "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), quote_ident(a.attname) FROM pg_attribute a "
    "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
    f"WHERE a.atttypid = 'bytea'::regtype AND a.attnum > 0 AND NOT a.attisdropped AND {_OWN}"
)


def in_airflow_rows(values: dict[str, str]) -> list[str]:
    """Airflow's own database: XComs, DAG runs' conf, rendered template fields, serialized DAGs."""
    from sqlalchemy.engine import make_url

    from devstack.postgres import airflow_database_url

    url = make_url(airflow_database_url())
    kwargs = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": url.database,
        "connect_timeout": 5,
    }
    return in_rows(values, kwargs, "Airflow's database: ")


def in_topics(values: dict[str, str]) -> list[str]:
    """The records of the stack's own topics (Connect's configurations, offsets and statuses, the
    audits' and pipelines' topics, the transaction log): keys, values and headers."""
    from confluent_kafka import Consumer, TopicPartition

    from delivery_semantics.plumbing.endpoints import kafka_config

    wanted = needles(values)
    conf = kafka_config()
    consumer = Consumer(
        {
            **conf,
            "group.id": "semantics-secret-scan",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    found = []
    try:
        metadata = consumer.list_topics(timeout=30)
        parts = []
        for topic, meta in sorted(metadata.topics.items()):
            if topic.startswith(RUN_TOPIC_PREFIXES) or meta.error is not None:
                continue
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    parts.append(TopicPartition(topic, p, low))
        consumer.assign(parts)
        open_parts, seen, deadline = len(parts), {}, time.monotonic() + 120
        while open_parts and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                open_parts -= 1  # the end of a partition (or an error on it): nothing more to read there
                continue
            topic = msg.topic()
            seen[topic] = seen.get(topic, 0) + 1
            if seen[topic] > TOPIC_RECORDS:
                continue
            data = b"\0".join([msg.key() or b"", msg.value() or b"", *(v or b"" for _, v in (msg.headers() or []))])
            for hit in _matches(data, f"topic {topic}", wanted):
                if hit not in found:
                    found.append(hit)
    finally:
        consumer.close()
    return found


def findings() -> list[str]:
    values = secrets()
    return in_processes(values) + in_files(values) + in_rows(values) + in_airflow_rows(values) + in_topics(values)
