"""Retention of the platform's own runs (`local/semantics gc`): a scheduled matrix makes a topic
per run, each on three brokers, and a ledger partition, result rows and a deduplicated copy per
run, and would fill the disks.

- A topic unused for longer than the retention (made, loaded, read by a consumer run or
  reconciled; sql/V033's `platform_topics`) is deleted and recorded in `retired_topics` with the
  bytes it took. An audit's topic is a team's own and never a candidate.
- A run whose topic is retired can never be reconciled again, so its records go next: its
  partitions of the ledger's (a producer run) or the sink's (a consumer run) tables, its per-event
  discrepancy rows and its deduplicated copies (PostgreSQL rows, or its lakehouse partition,
  deleted in Delta and then from the disk: dedup.forget). Each is recorded in `retired_runs`
  (sql/V037) with what it took. Its summary and verdict stay: a run's verdict outlives its records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import psycopg2
import psycopg2.extras

from delivery_semantics import locations
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import Database, java_client_config
from delivery_semantics.reporting import dedup

RETENTION_ENV = "SEMANTICS_RETENTION_DAYS"
DEFAULT_DAYS = 7


class RetentionError(ValueError):
    """Bad input to gc: a one-line message, exit 2."""


@dataclass(frozen=True, slots=True)
class Expired:
    topic: str
    owner: str
    last_used_at: datetime
    bytes: int | None  # every replica's log on the brokers' disks; None when it could not be read


def retention_days(given: int | None = None) -> int:
    """The retention in whole days: the argument, else SEMANTICS_RETENTION_DAYS, else 7."""
    if given is not None:
        days = given
    else:
        text = (locations.setting("retention_days") or str(DEFAULT_DAYS)).strip()
        if not text.isdigit():
            raise RetentionError(f"{RETENTION_ENV}={text[:40]!r} is not a whole number of days")
        days = int(text)
    if not 0 <= days <= 36500:
        raise RetentionError(f"a retention of {days} days is out of range (0 to 36500)")
    return days


def expired(db: Database, kafka_conf: dict, days: int, sizes: bool = True) -> list[Expired]:
    """The platform's topics unused for more than `days` days that the cluster still holds."""
    with (
        psycopg2.connect(**db.psycopg2_kwargs()) as c,
        c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur,
    ):
        cur.execute(
            """SELECT topic, owner, last_used_at FROM platform_topics
               WHERE retired_at IS NULL AND last_used_at < now() - make_interval(days => %s)
               ORDER BY last_used_at, topic""",
            (days,),
        )
        rows = cur.fetchall()
    held = set(topics.admin_client(kafka_conf).list_topics(timeout=30).topics)
    rows = [r for r in rows if r["topic"] in held]
    measured = _sizes(kafka_conf, [r["topic"] for r in rows]) if sizes and rows else {}
    return [Expired(r["topic"], r["owner"], r["last_used_at"], measured.get(r["topic"])) for r in rows]


def _sizes(kafka_conf: dict, names: list[str]) -> dict[str, int]:
    from delivery_semantics.workload import java_client

    try:
        return java_client.topic_sizes(java_client_config(kafka_conf), names)
    except java_client.JavaClientError:
        return {}  # the sizes are a report; deleting does not need them


def retire(db: Database, kafka_conf: dict, doomed: list[Expired]) -> list[str]:
    """Deletes the topics and records each as retired; returns the ones Kafka refused, with why."""
    if not doomed:
        return []
    refused = []
    admin = topics.admin_client(kafka_conf)  # must outlive the futures
    futures = admin.delete_topics([topics.validate_topic_name(e.topic) for e in doomed], operation_timeout=60)
    gone = []
    for e in doomed:
        try:
            futures[e.topic].result(timeout=90)
            gone.append(e)
        except Exception as err:
            name = err.args[0].name() if err.args and hasattr(err.args[0], "name") else type(err).__name__
            if name == "UNKNOWN_TOPIC_OR_PART":
                gone.append(e)
            else:
                refused.append(f"{e.topic}: {name}")
    with psycopg2.connect(**db.psycopg2_kwargs()) as c, c.cursor() as cur:
        psycopg2.extras.execute_values(
            cur,
            "INSERT INTO retired_topics (topic, owner, bytes) VALUES %s ON CONFLICT (topic) DO NOTHING",
            [(e.topic, e.owner, e.bytes) for e in gone],
        )
    return refused


# The tables a run has its own partition of (LIST by run id), by the side the run is on.
RUN_PARTITIONS = {
    "producer": ("ledger_event_rows", "ledger_event_ranges", "ledger_event_outcomes", "ledger_batches"),
    "consumer": ("sink_events",),
}
_BOUND = re.compile(r"^FOR VALUES IN \('((?:[^']|'')*)'\)$")


@dataclass(frozen=True, slots=True)
class HeldRun:
    """A run whose topic is retired and whose records the database or the lakehouse still holds."""

    run_id: str
    side: str
    partitions: tuple[str, ...]  # its partitions of RUN_PARTITIONS' tables
    database_bytes: int  # those partitions', its discrepancy rows' and its PostgreSQL copy's
    result_rows: int
    copy_rows: int
    lakehouse: tuple[str, ...]  # the lakehouse tables holding a partition of its copy
    lakehouse_bytes: int  # its partitions' files, by the Delta log


def held_runs(db: Database, topics_going: list[str] = ()) -> list[HeldRun]:
    """The runs whose topic is retired, or among `topics_going`, and whose records are not, oldest
    retirement first."""
    with (
        psycopg2.connect(**db.psycopg2_kwargs()) as c,
        c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur,
    ):
        cur.execute(
            """WITH gone AS (
                   SELECT topic, retired_at FROM retired_topics
                   UNION ALL
                   SELECT unnest(%s::text[]), now()
               )
               SELECT run_id, side FROM (
                   SELECT r.run_id, 'producer' AS side, g.retired_at FROM runs r JOIN gone g USING (topic)
                   UNION ALL
                   SELECT c.consumer_run_id, 'consumer', g.retired_at
                   FROM consumer_runs c JOIN gone g ON g.topic = c.input_topic
               ) h
               WHERE NOT EXISTS (SELECT 1 FROM retired_runs rr WHERE rr.run_id = h.run_id)
               GROUP BY run_id, side
               ORDER BY min(retired_at), run_id""",
            (list(topics_going),),
        )
        runs = cur.fetchall()
        if not runs:
            return []
        ids = [r["run_id"] for r in runs]
        parents = [t for tables in RUN_PARTITIONS.values() for t in tables]
        cur.execute(
            """SELECT c.oid::regclass::text AS partition, pg_get_expr(c.relpartbound, c.oid) AS bound,
                      pg_total_relation_size(c.oid) AS bytes
               FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = ANY (%s::regclass[])""",
            (parents,),
        )
        partitions: dict[str, list[tuple[str, int]]] = {}
        for row in cur.fetchall():
            bound = _BOUND.match(row["bound"] or "")
            if bound:
                partitions.setdefault(bound.group(1).replace("''", "'"), []).append((row["partition"], row["bytes"]))
        cur.execute(
            """SELECT reconciliation_id, count(*) AS n, sum(pg_column_size(d.*)) AS bytes
               FROM reconcile_discrepancies d WHERE reconciliation_id = ANY (%s) GROUP BY 1""",
            (ids,),
        )
        results = {r["reconciliation_id"]: (r["n"], int(r["bytes"])) for r in cur.fetchall()}
        cur.execute(
            """SELECT reconciliation_id, store, location, row_count FROM dedup_copies
               WHERE reconciliation_id = ANY (%s)""",
            (ids,),
        )
        copies: dict[str, list[dict]] = {}
        for r in cur.fetchall():
            copies.setdefault(r["reconciliation_id"], []).append(r)
        cur.execute(
            """SELECT reconciliation_id, sum(pg_column_size(e.*)) AS bytes FROM dedup_events e
               WHERE reconciliation_id = ANY (%s) GROUP BY 1""",
            (ids,),
        )
        copy_bytes = {r["reconciliation_id"]: int(r["bytes"]) for r in cur.fetchall()}
    in_each: dict[str, list[str]] = {}
    for rid, mine in copies.items():
        for c in mine:
            if c["store"] == "lakehouse":
                in_each.setdefault(c["location"], []).append(rid)
    lake_bytes: dict[str, int] = {}
    for location, rids in in_each.items():  # one read of each table's log
        for rid, size in dedup.partition_bytes(location, rids).items():
            lake_bytes[rid] = lake_bytes.get(rid, 0) + size
    held = []
    for r in runs:
        rid = r["run_id"]
        mine = partitions.get(rid, [])
        n_results, result_bytes = results.get(rid, (0, 0))
        in_lakehouse = tuple(sorted({c["location"] for c in copies.get(rid, []) if c["store"] == "lakehouse"}))
        run = HeldRun(
            rid,
            r["side"],
            tuple(p for p, _ in mine),
            sum(b for _, b in mine) + result_bytes + copy_bytes.get(rid, 0),
            n_results,
            sum(c["row_count"] for c in copies.get(rid, [])),
            in_lakehouse,
            lake_bytes.get(rid, 0),
        )
        if run.partitions or run.result_rows or run.copy_rows or rid in copies:
            held.append(run)
    return held


def retire_runs(db: Database, held: list[HeldRun]) -> list[str]:
    """Each run's lakehouse partitions first (one Delta commit per table, then the files), then,
    one run at a time, its partitions
    detached concurrently (readers and loads never wait) and dropped, and its result and copy rows
    deleted with its `retired_runs` row in one transaction. A run whose lakehouse copy could not be
    deleted keeps everything; returns those, with why. A gc stopped midway is finished by the next."""
    refused, lakehouse_failed = [], set()
    by_location: dict[str, list[str]] = {}
    for run in held:
        for location in run.lakehouse:
            by_location.setdefault(location, []).append(run.run_id)
    for location, ids in sorted(by_location.items()):
        try:
            dedup.forget(location, ids)
        except Exception as e:  # the table unreadable, or busy past the retries: those runs keep all
            lakehouse_failed.update(ids)
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            refused += [f"{rid}: its lakehouse copy in {location}: {why}" for rid in ids]
    conn = psycopg2.connect(**db.psycopg2_kwargs())
    try:
        for run in held:
            if run.run_id in lakehouse_failed:
                continue
            conn.autocommit = True  # DETACH ... CONCURRENTLY runs outside a transaction
            with conn.cursor() as cur:
                for partition in run.partitions:
                    parent, pending = _parent_of(cur, partition)
                    if parent:
                        # A detach a gc stopped halfway is finished; a fresh one waits for no lock.
                        how = "FINALIZE" if pending else "CONCURRENTLY"
                        cur.execute(f"ALTER TABLE {parent} DETACH PARTITION {partition} {how}")
                    cur.execute(f"DROP TABLE IF EXISTS {partition}")
            conn.autocommit = False
            with conn, conn.cursor() as cur:
                cur.execute("DELETE FROM reconcile_discrepancies WHERE reconciliation_id = %s", (run.run_id,))
                cur.execute("DELETE FROM dedup_events WHERE reconciliation_id = %s", (run.run_id,))
                cur.execute("DELETE FROM dedup_copies WHERE reconciliation_id = %s", (run.run_id,))
                cur.execute(
                    """INSERT INTO retired_runs (run_id, side, database_bytes, result_rows, copy_rows, lakehouse_bytes)
                       VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (run_id) DO NOTHING""",
                    (
                        run.run_id,
                        run.side,
                        run.database_bytes,
                        run.result_rows,
                        run.copy_rows,
                        run.lakehouse_bytes,
                    ),
                )
    finally:
        conn.close()
    return refused


def _parent_of(cur, partition: str) -> tuple[str | None, bool]:
    """The partitioned table `partition` is attached to (the names are the ledger's own), and
    whether a concurrent detach of it was left pending."""
    cur.execute(
        "SELECT i.inhparent::regclass::text, i.inhdetachpending FROM pg_inherits i WHERE i.inhrelid = to_regclass(%s)",
        (partition,),
    )
    row = cur.fetchone()
    return (row[0], row[1]) if row else (None, False)


def human(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
