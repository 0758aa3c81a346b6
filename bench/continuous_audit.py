"""A continuous audit's cost per window as its history grows: N consecutive hourly windows of M
events each (outbox, topic and sink), each reconciled by its own spark-submit as the audit's DAG
runs it. The ratio of the last window's time to the first's says whether the cost follows the
window or the history (issue 15 asks for at most 1.3 at 10 windows of 1M).

    bench/run continuous_audit [--windows 10] [--events 1000000] [--no-sink] [--reuse] [--horizon-windows 10]
                               [--one-application]

With --horizon-windows H the audit's window.dedup_horizon is H hours (H windows): after each window
the state tables' rows and bytes are printed, and they stop growing after window H + 1.

--reuse skips the build and reconciles the pipeline built before in the same hour afresh.

The pipeline is synthetic and clean: outbox rows COPYed into outbox_demo, their records produced
to a fresh topic on the plaintext listener, and the sink's apply log COPYed, all on a clock that
ends at the last full hour. Each window is timed twice: the whole spark-submit, and the
application's own time for the window (without the JVM's start).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import psycopg2
import yaml
from confluent_kafka import Producer

import devstack
from delivery_semantics.audit import audits
from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import database, kafka_config
from delivery_semantics.reporting import report

NAME = "bench_stream"
TOPIC = "bench-stream"
STATE_TABLES = ("audit_windows", "audit_window_offsets", "audit_sightings", "audit_pending", "audit_discrepancies")


def audit_file(sink: bool, horizon_windows: int | None = None) -> Path:
    spec = {
        "description": "bench/continuous_audit.py",
        "topic": TOPIC,
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db", **({"sink": "outbox_db"} if sink else {})},
        "record": {"event_id": {"header": "event_id"}, "key": {"record_key": True}},
        "outbox": {
            "table": "public.bench_events",
            "columns": {"event_id": "id", "key": "aggregate_id", "publish_at": "created_at", "status": "state"},
            "acked_values": ["SENT"],
        },
        "window": {"grace": "10m", **({"dedup_horizon": f"{horizon_windows}h"} if horizon_windows else {})},
    }
    if sink:
        spec["sink"] = {
            "table": "public.bench_applies",
            "columns": {"event_id": "event_id", "key": "order_id", "version": "version", "applied_at": "applied_at"},
        }
    path = devstack.VAR / "bench" / f"{NAME}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _partitions() -> list[tuple[str]]:
    sql = audits.SIGHTINGS_PARTITIONS.format(mark="%s")
    return [(r["relname"],) for r in report.query(sql, (audits.sightings_partition(NAME),))]


def state_size() -> dict:
    """The audit's state: its sightings (rows, partitions, bytes with indexes) and pending rows."""
    parts = [t for (t,) in _partitions()]
    size = sum(report.query("SELECT pg_total_relation_size(%s::regclass) AS b", (t,))[0]["b"] for t in parts)
    return {
        "sightings": report.query("SELECT count(*) AS n FROM audit_sightings WHERE audit = %s", (NAME,))[0]["n"],
        "partitions": len(parts),
        "bytes": size,
        "pending": report.query("SELECT count(*) AS n FROM audit_pending WHERE audit = %s", (NAME,))[0]["n"],
    }


def _copy(cur, table: str, columns: str, rows) -> None:
    buf = io.StringIO()
    for r in rows:
        buf.write("\t".join(r) + "\n")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} ({columns}) FROM STDIN", buf)


def build(windows: int, events: int, sink: bool, ends: list[datetime]) -> None:
    kafka = kafka_config()
    try:
        topics.delete_topic(kafka, TOPIC)
    except Exception:
        pass
    for _ in range(30):
        try:
            if topics.ensure_topic(kafka, TOPIC, partitions=6):
                break
        except Exception:
            pass
        time.sleep(1)
    db = psycopg2.connect(**database("outbox_app").psycopg2_kwargs())
    with db, db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS public.bench_events, public.bench_applies")
        cur.execute("CREATE TABLE public.bench_events (id text, aggregate_id text, created_at timestamptz, state text)")
        cur.execute(
            "CREATE TABLE public.bench_applies (event_id text, order_id text, version int, applied_at timestamptz)"
        )
    p = Producer({**kafka, "acks": "all", "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4"})
    t0 = time.monotonic()
    for w in range(windows):
        start = ends[w] - timedelta(hours=1)
        step = timedelta(hours=1) / events
        created = [start + i * step for i in range(events)]
        ids = [f"w{w}-{i}" for i in range(events)]
        with db, db.cursor() as cur:
            _copy(
                cur,
                "public.bench_events",
                "id, aggregate_id, created_at, state",
                (
                    (e, f"o{i % 100_000}", c.isoformat(), "SENT")
                    for i, (e, c) in enumerate(zip(ids, created, strict=True))
                ),
            )
            if sink:
                _copy(
                    cur,
                    "public.bench_applies",
                    "event_id, order_id, version, applied_at",
                    (
                        (e, f"o{i % 100_000}", str(w * events + i), (c + timedelta(seconds=2)).isoformat())
                        for i, (e, c) in enumerate(zip(ids, created, strict=True))
                    ),
                )
        for i, (e, c) in enumerate(zip(ids, created, strict=True)):
            ts = int((c + timedelta(seconds=1)).timestamp() * 1000)
            while True:
                try:
                    p.produce(
                        TOPIC,
                        key=f"o{i % 100_000}".encode(),
                        value=b"{}",
                        headers=[("event_id", e.encode())],
                        timestamp=ts,
                    )
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(120) == 0
        print(f"  built window {w + 1}: {events} events ({time.monotonic() - t0:.0f} s so far)", flush=True)
    db.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--no-sink", dest="sink", action="store_false")
    ap.add_argument("--reuse", action="store_true", help="the pipeline built before, in the same hour")
    ap.add_argument("--horizon-windows", type=int, help="the audit's dedup_horizon, in windows (hours)")
    ap.add_argument("--one-application", action="store_true", help="all windows in one spark-submit, in order")
    args = ap.parse_args()
    if args.windows < 2 or args.events < 1:
        ap.error("--windows must be at least 2 and --events at least 1")
    last = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    ends = [last - timedelta(hours=args.windows - 1 - w) for w in range(args.windows)]
    audit = audits.load(audit_file(args.sink, args.horizon_windows))
    for table in STATE_TABLES:
        report.query(f"DELETE FROM {table} WHERE audit = %s RETURNING 1", (NAME,))
    with psycopg2.connect(**database("ledger_db").psycopg2_kwargs()) as db, db.cursor() as cur:
        audits.forget_state(cur, NAME)
    if not args.reuse:
        print(f"building {args.windows} windows of {args.events} events (sink: {args.sink})", flush=True)
        build(args.windows, args.events, args.sink, ends)

    rows = []

    def record(s: dict, wall: float) -> None:
        # A record stamped in the window's last second may land in the next one: a clean pipeline.
        assert abs(s["records_read"] - args.events) < max(2, args.events // 1000), s
        assert (s["lost_acked"], s["duplicate_events"], s["sink_lost"], s["open_discrepancies"]) == (0, 0, 0, 0), s
        state = state_size()
        state["phases"] = s.get("phases", {})
        end = ends[len(rows)]
        rows.append((end, wall, s["elapsed_s"], s["outbox_due"], s["sink_rows"], state))
        print(
            f"  window {len(rows)} ending {end:%H:%M}: {wall:.1f} s spark-submit, {s['elapsed_s']:.1f} s in the "
            f"application; state {state['sightings']} sightings in {state['partitions']} partitions, "
            f"{state['bytes'] / 1e6:.0f} MB, {state['pending']} pending; phases {state['phases']}",
            flush=True,
        )

    if args.one_application:
        # Every window in one spark-submit, in order, as a backfill runs them: no JVM start per window.
        r = spark_submit.run(
            audit=audit,
            window_ends=[e.isoformat() for e in ends],
            timeout=6 * 3600,
            on_result=lambda s: record(s, s["elapsed_s"]),
        )
        assert r.returncode == 0, r.error
    else:
        for end in ends:
            t = time.monotonic()
            r = spark_submit.run(audit=audit, window_ends=[end.isoformat()])
            assert r.returncode == 0, r.error
            record(r.summaries[0], time.monotonic() - t)

    first, last_row = rows[0], rows[-1]
    cpu = platform.processor() or platform.machine()
    print(f"\n{date.today()} on {cpu}, {args.windows} windows of {args.events} events, sink {args.sink}")
    phases = list(rows[0][5]["phases"])
    print(
        "| window | spark-submit s | in application s | "
        + " | ".join(p.removesuffix("_s").replace("_", " ") + " s" for p in phases)
        + " | outbox due | sink rows | sightings | partitions | state MB |"
    )
    print("|---" * (9 + len(phases)) + "|")
    for i, (_end, wall, inapp, due, sink_rows, st) in enumerate(rows, 1):
        print(
            f"| {i} | {wall:.1f} | {inapp:.1f} | "
            + " | ".join(f"{st['phases'].get(p, 0):.1f}" for p in phases)
            + f" | {due} | {sink_rows} | {st['sightings']} | {st['partitions']} | {st['bytes'] / 1e6:.0f} |"
        )
    print(f"\nlast / first: {last_row[1] / first[1]:.2f} (spark-submit), {last_row[2] / first[2]:.2f} (in application)")
    print(json.dumps({"ratio_wall": last_row[1] / first[1], "ratio_app": last_row[2] / first[2]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
