"""Composes a continuous audit's window: find where the previous window ended, read this window's
records, outbox rows and sink rows, look up the state the earlier windows left for exactly these
ids and keys, classify with checker/windows.py, and merge the rows in one transaction.

The lookups go through staging tables of this window's ids, joined in the database on the state
tables' keys: a window's cost follows the window, not the audit's history. A window's rows depend
only on the windows before it, so a rerun (or a backfill over recorded windows) writes them again
unchanged. Windows run in order: a window before the latest recorded one, never run, is refused.

State has a horizon (the audit's window.dedup_horizon, 7 days unless it says): `audit_sightings` is
partitioned by audit and window, and a window's merge drops the partitions of the windows that
ended more than the horizon before it, with the pending records of those windows. The lookups
read no further back, so a window's cost and the state's size stay flat once the horizon is full.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.sources import (
    InputError,
    Jdbc,
    Source,
    outbox_ledger,
    parallelism,
    read_topic,
    topic_offsets,
    typed,
)
from checker.windows import AuditWindow, discrepancies
from delivery_semantics import catalog, modes
from delivery_semantics.audit import audits
from delivery_semantics.audit.stores import Store

COUNTED = catalog.window_columns()  # audit_windows column: (stage, kind) it counts
_LOSSES = ", ".join(f"'{k}'" for k in catalog.LOSSES)  # the loss kinds as SQL literals
SINK_COUNTS = tuple(c for c, (stage, _) in COUNTED.items() if stage != catalog.OUTBOX_TOPIC)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def _ts(t: datetime | None) -> str:
    """A timestamp literal for the JDBC source's `query`, which takes no parameters: formatted
    here from a datetime, never from text."""
    return "NULL::timestamptz" if t is None else f"TIMESTAMPTZ '{_iso(t)}'"


def _name(audit: audits.Audit) -> str:
    """The audit's name as a literal; the name was validated as [A-Za-z0-9_-] when it was loaded."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", audit.name):
        raise InputError(f"{audit.name!r} is not an audit name")
    return f"'{audit.name}'"


class Bounds:
    """Where a window starts and ends, in time and in offsets: recorded by its first run."""

    def __init__(self, jdbc: Jdbc, src: Source, audit: audits.Audit, end: datetime):
        self.end = end
        a, t = audit.name, _iso(end)
        recorded = jdbc.scalar_rows(
            'SELECT "partition", start_offset, end_offset FROM audit_window_offsets '
            "WHERE audit = ? AND window_end = ?::timestamptz ORDER BY 1",
            [a, t],
        )
        prev = jdbc.scalar_rows(
            "SELECT extract(epoch FROM max(window_end))::bigint FROM audit_windows "
            "WHERE audit = ? AND window_end < ?::timestamptz",
            [a, t],
        )[0][0]
        self.start = datetime.fromtimestamp(int(prev), UTC) if prev is not None else None
        self.recorded_before = bool(recorded)
        if recorded:
            self.offsets = {int(r[0]): (int(r[1]), int(r[2])) for r in recorded}
            return
        later = jdbc.scalar_rows(
            "SELECT min(window_end)::text FROM audit_windows WHERE audit = ? AND window_end > ?::timestamptz", [a, t]
        )[0][0]
        if later:
            raise InputError(
                f"audit {a}: the window ending {t} was never run and a later one (ending {later}) was: "
                "windows run in order; rerun a recorded window or run one after the latest"
            )
        previous_end = {}
        if prev:
            previous_end = {
                int(r[0]): int(r[1])
                for r in jdbc.scalar_rows(
                    'SELECT "partition", end_offset FROM audit_window_offsets WHERE audit = ? AND window_end = ?::timestamptz',
                    [a, _iso(self.start)],
                )
            }
        marks = topic_offsets(src, int(end.timestamp() * 1000))
        self.offsets = {}
        for p, (low, high, at_end) in marks.items():
            start = max(previous_end.get(p, low), low)
            self.offsets[p] = (start, max(start, high if at_end is None else at_end))


def reconcile_window(
    spark: SparkSession,
    jdbc: Jdbc,
    src: Source,
    audit: audits.Audit,
    end: datetime,
    outbox_store: Store,
    sink_store: Store | None,
    timings: dict | None = None,
) -> dict:
    """One window of a continuous audit, read, classified and merged. Returns its audit_windows row;
    `timings` gets the seconds of each phase (docs/SCALE.md): reading the window and staging its
    ids and keys, classifying (with the lookups of the earlier state), staging this window's state,
    and the merge."""
    timings = {} if timings is None else timings
    clock = [time.monotonic()]

    def lap(phase: str) -> None:
        now = time.monotonic()
        timings[phase] = round(now - clock[0], 2)
        clock[0] = now

    b = Bounds(jdbc, src, audit, end)
    grace = audit.grace
    isolation = src.definition.isolation
    token = jdbc.staging_token(src.reconciliation_id)
    staged: list[str] = []

    def stage(df: DataFrame, what: str) -> str:
        table = f"stg_window_{what}_{token}"
        staged.append(table)
        jdbc.write(df, table)
        return table

    try:
        records = read_topic(
            spark, src, isolation, {p: o[0] for p, o in b.offsets.items()}, {p: o[1] for p, o in b.offsets.items()}
        ).cache()
        since = b.start - 2 * grace if b.start else None
        outbox = (
            outbox_ledger(outbox_store.read(spark, "publish_at", since, end), src)
            .select("event_id", "status", F.col("publish_at").alias("created_at"))
            .where(F.col("event_id").isNotNull())
            .cache()
        )
        sink = None
        if sink_store is not None:
            types = {"event_id": "string", "key": "string", "version": "bigint", "applied_at": "timestamp"}
            applied = typed(sink_store.read(spark, "applied_at", b.start, end), types)
            sink = applied.where(F.col("event_id").isNotNull()).cache()

        name, t, start = _name(audit), _ts(end), _ts(b.start)
        topic_due_for_sink = None
        if sink is not None:
            due_since = _ts(b.start - grace) if b.start else "'-infinity'::timestamptz"
            topic_due_for_sink = jdbc.read(
                f"SELECT s.event_id, s.first_at FROM audit_sightings s WHERE s.audit = {name} AND s.side = 'topic' "
                f"AND s.window_end < {t} AND s.first_at >= {due_since} AND s.first_at < {_ts(end - grace)} "
                "AND NOT EXISTS (SELECT 1 FROM audit_sightings e WHERE e.audit = s.audit AND e.side = 'topic' "
                "AND e.event_id = s.event_id AND e.window_end < s.window_end)"
            ).cache()
        # Every event the window judges, whatever brought it here (its records, outbox rows and sink
        # rows, and the records that fall due for the sink in it), and every key it reads.
        judged = [df for df in (records, outbox, sink, topic_due_for_sink) if df is not None]
        ids = judged[0].select("event_id")
        for more in judged[1:]:
            ids = ids.unionByName(more.select("event_id"))
        keys = records.select("key") if sink is None else records.select("key").unionByName(sink.select("key"))
        ids_table = stage(ids.where(F.col("event_id").isNotNull()).distinct(), "ids")
        keys_table = stage(keys.where(F.col("key").isNotNull()).distinct(), "keys")
        jdbc.execute_in_transaction(
            [(f"CREATE INDEX ON {table} ({col})", []) for table, col in ((ids_table, "event_id"), (keys_table, "key"))]
            + [(f"ANALYZE {table}", []) for table in (ids_table, keys_table)]
        )
        lap("read_and_stage_ids_s")
        w = AuditWindow(
            end,
            b.start,
            grace,
            isolation,
            records,
            outbox,
            **_earlier_state(jdbc, name, t, start, _ts(end - audit.dedup_horizon), ids_table, keys_table),
            sink=sink,
            topic_due_for_sink=topic_due_for_sink,
            horizon=audit.dedup_horizon,
        )

        disc = discrepancies(w).coalesce(parallelism(spark)).cache()
        counted = {
            (r["stage"], r["kind"]): int(r["n"])
            for r in disc.groupBy("stage", "kind").agg(F.count(F.lit(1)).alias("n")).collect()
        }
        row = _window_row(src, audit, b, isolation, w.totals(), counted)
        lap("classify_with_lookups_s")
        stg_disc = stage(disc, "disc")
        stg_seen = stage(w.sightings(), "seen")
        stg_pending = stage(w.pending(), "pending")
        lap("stage_state_s")
        _merge(jdbc, audit, b, row, stg_disc, stg_seen, stg_pending, token)
        lap("merge_s")
        return row
    finally:
        if staged:
            jdbc.execute_in_transaction([(f"DROP TABLE IF EXISTS {t}", []) for t in staged])


def _earlier_state(jdbc: Jdbc, name: str, t: str, start: str, horizon: str, ids_table: str, keys_table: str) -> dict:
    """What the windows before the one ending at `t`, back to the horizon, left, for the window's
    staged ids and keys only: the one place a window looks up its state, so a window's cost follows
    the window. `name`, `t`, `start` and `horizon` are literals (_name, _ts), the tables the window's own."""
    earlier = f"s.audit = {name} AND s.window_end < {t} AND s.window_end >= {horizon}"
    return {
        "prior": jdbc.read(
            f"SELECT DISTINCT s.event_id, s.side FROM audit_sightings s JOIN {ids_table} i ON i.event_id = s.event_id "
            f"WHERE {earlier}"
        ).cache(),
        "open_losses": jdbc.read(
            f"SELECT l.event_id, l.stage, l.window_end AS lost_in_window, l.occurred_at FROM audit_discrepancies l "
            f"JOIN {ids_table} i ON i.event_id = l.event_id WHERE l.audit = {name} AND l.window_end < {t} "
            f"AND l.window_end >= {horizon} "
            f"AND l.kind IN ({_LOSSES}) AND NOT EXISTS (SELECT 1 FROM audit_discrepancies r WHERE r.audit = l.audit "
            "AND r.event_id = l.event_id AND r.stage = l.stage AND r.kind = 'late' AND r.window_end > l.window_end "
            f"AND r.window_end < {t})"
        ).cache(),
        "carried": jdbc.read(
            f"SELECT event_id, first_at, copies, partitions, offsets FROM audit_pending "
            f"WHERE audit = {name} AND window_end = {start}"
        ).cache(),
        "key_versions": jdbc.read(
            f"SELECT s.side, s.key, max(s.version) AS max_version FROM audit_sightings s JOIN {keys_table} k "
            f"ON k.key = s.key WHERE {earlier} AND s.version IS NOT NULL "
            "GROUP BY s.side, s.key"
        ).cache(),
    }


def _window_row(src: Source, audit: audits.Audit, b: Bounds, isolation: str, totals: dict, counted: dict) -> dict:
    counts = {col: counted.get(sk, 0) for col, sk in COUNTED.items()}
    judged = catalog.Counts.from_window(counts)
    verdict, broken = src.definition.verdict(isolation, judged)
    row = {
        "audit": audit.name,
        "window_end": _iso(b.end),
        "window_start": _iso(b.start) if b.start else None,
        "grace_seconds": int(audit.grace.total_seconds()),
        "dedup_horizon_seconds": int(audit.dedup_horizon.total_seconds()),
        "reconciliation_id": src.reconciliation_id,
        "topic": src.topic,
        "mode": audit.judged_as,
        "isolation": isolation,
        **totals,
        **counts,
        "promise": src.definition.promise,
        "verdict": verdict,
        "broken_by": ",".join(broken) or None,
        "sink_table": None,
        "sink_strategy": None,
        "sink_promise": None,
        "sink_verdict": None,
        "sink_broken_by": None,
    }
    if audit.sink:
        strategy = catalog.get_strategy(audit.sink_strategy)
        sink_verdict, sink_broken = modes.verdict(
            strategy.name, audits.AUDIT_SCENARIO, strategy.isolation, judged, catalog.TOPIC_SINK
        )
        row.update(
            sink_table=audit.sink_label,
            sink_strategy=strategy.name,
            sink_promise=strategy.promise.text,
            sink_verdict=sink_verdict,
            sink_broken_by=",".join(sink_broken) or None,
        )
    else:
        row.update({c: None for c in SINK_COUNTS})
    return row


def _state_inserts(a: str, t: str, stg_seen: str, stg_pending: str) -> list[tuple[str, list]]:
    return [
        (
            'INSERT INTO audit_sightings (audit, side, event_id, window_end, copies, first_at, "partition", "offset", '
            'key, version, created_at) SELECT ?, side, event_id, ?::timestamptz, copies, first_at, "partition", '
            f'"offset", key, version, created_at FROM {stg_seen}',
            [a, t],
        ),
        (
            'INSERT INTO audit_pending (audit, window_end, event_id, first_at, copies, "partitions", "offsets") '
            f'SELECT ?, ?::timestamptz, event_id, first_at, copies, "partitions", "offsets" FROM {stg_pending}',
            [a, t],
        ),
    ]


def _horizon_statements(jdbc: Jdbc, audit: audits.Audit, end: datetime, own: bool = True) -> list[tuple[str, list]]:
    """The window's own sightings partition (with `own`), and the state beyond the horizon of the
    window ending at `end` dropped: the partitions of windows that ended before end - horizon, what
    the migration left in the default partition from then, and those windows' pending records."""
    cutoff = end - audit.dedup_horizon
    name = _name(audit)
    stmts: list[tuple[str, list]] = []
    if own:
        stmts.append(
            (
                f"CREATE TABLE IF NOT EXISTS {audits.sightings_partition(audit.name, end)} PARTITION OF audit_sightings "
                f"FOR VALUES FROM ({name}, {_ts(end)}) TO ({name}, {_ts(end)} + interval '1 microsecond')",
                [],
            )
        )
    prefix = audits.sightings_partition(audit.name)
    partitions = jdbc.scalar_rows(audits.SIGHTINGS_PARTITIONS.format(mark="?"), [prefix])
    for (table,) in partitions:
        ended = table[len(prefix) :]
        if ended.isdigit() and int(ended) < cutoff.timestamp():
            stmts.append((f"DROP TABLE IF EXISTS {table}", []))
    stmts.append(
        (
            "DELETE FROM audit_sightings_default WHERE audit = ? AND window_end < ?::timestamptz",
            [audit.name, _iso(cutoff)],
        )
    )
    stmts.append(
        ("DELETE FROM audit_pending WHERE audit = ? AND window_end < ?::timestamptz", [audit.name, _iso(cutoff)])
    )
    return stmts


def _merge(jdbc: Jdbc, audit: audits.Audit, b: Bounds, row: dict, stg_disc, stg_seen, stg_pending, token) -> None:
    a, t = audit.name, row["window_end"]
    key = "audit = ? AND window_end = ?::timestamptz"
    stmts: list[tuple[str, list]] = []
    if not b.recorded_before:
        for p, (lo, hi) in sorted(b.offsets.items()):
            stmts.append(
                (
                    'INSERT INTO audit_window_offsets (audit, window_end, "partition", start_offset, end_offset) '
                    "VALUES (?, ?::timestamptz, ?, ?, ?)",
                    [a, t, p, lo, hi],
                )
            )
    for table in ("audit_discrepancies", "audit_sightings", "audit_pending"):
        stmts.append((f"DELETE FROM {table} WHERE {key}", [a, t]))
    stmts.append(
        (
            'INSERT INTO audit_discrepancies (audit, window_end, stage, kind, event_id, copies, "partitions", '
            '"offsets", occurred_at, delay_ms, lost_in_window) SELECT ?, ?::timestamptz, stage, kind, event_id, '
            f'copies, "partitions", "offsets", occurred_at, delay_ms, lost_in_window FROM {stg_disc}',
            [a, t],
        )
    )
    latest = jdbc.scalar_rows(
        "SELECT extract(epoch FROM max(window_end))::bigint FROM audit_windows WHERE audit = ?", [a]
    )[0][0]
    if latest is not None and b.end.timestamp() < int(latest) - audit.dedup_horizon.total_seconds():
        # A rerun of a window the latest one's horizon has passed: its results are rewritten, but
        # the state it would leave was dropped, and stays dropped.
        stmts += _horizon_statements(jdbc, audit, datetime.fromtimestamp(int(latest), UTC), own=False)
    else:
        stmts += _horizon_statements(jdbc, audit, b.end)
        stmts += _state_inserts(a, t, stg_seen, stg_pending)
        # A new partition has no statistics until autovacuum gets to it, and the next window's
        # lookups would be planned as if it were empty (a nested loop over 100k sightings took
        # minutes): analysed now, in the merge.
        stmts.append((f"ANALYZE {audits.sightings_partition(audit.name, b.end)}", []))
    cols = [c for c in row]
    casts = {"window_end": "::timestamptz", "window_start": "::timestamptz"}
    stmts.append(
        (
            f"INSERT INTO audit_windows ({', '.join(cols)}, open_discrepancies) "
            f"VALUES ({', '.join('?' + casts.get(c, '') for c in cols)}, 0) ON CONFLICT (audit, window_end) DO UPDATE SET "
            + ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in ("audit", "window_end")),
            [row[c] for c in cols],
        )
    )
    stmts.append(
        (
            "UPDATE audit_windows w SET open_discrepancies = (SELECT count(*) FROM audit_discrepancies d "
            "WHERE d.audit = w.audit AND ((d.window_end = w.window_end AND d.kind NOT IN "
            f"({_LOSSES}, 'late')) OR (d.window_end <= w.window_end AND d.kind IN ({_LOSSES}) AND NOT EXISTS ("
            "SELECT 1 FROM audit_discrepancies r WHERE r.audit = d.audit AND r.event_id = d.event_id "
            "AND r.stage = d.stage AND r.kind = 'late' AND r.window_end > d.window_end "
            f"AND r.window_end <= w.window_end)))) WHERE w.{key}",
            [a, t],
        )
    )
    stmts.append(
        ("INSERT INTO reconcile_jobs (reconciliation_id, staged_as) VALUES (?, ?)", [row["reconciliation_id"], token])
    )
    jdbc.execute_in_transaction(stmts)
    row["open_discrepancies"] = int(
        jdbc.scalar_rows(f"SELECT open_discrepancies FROM audit_windows WHERE {key}", [a, t])[0][0]
    )
