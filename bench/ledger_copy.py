"""PostgreSQL's cost per event of the ledger alone, no Kafka: the load runner's batches of events
and outcomes, in the layout before V009 (events COPY'd from Python into partitions with a text
primary key and an outcomes index, maintained row by row) and in the layout now (events derived
by PostgreSQL from the batch's n range, partitions unindexed, one index built by the seal).

    bench/run ledger_copy [--events N] [--batch 10000] [--repeats 2]

Prints the time the ledger calls take per layout (the Python that formats the rows included,
as in the load) and the ratio. Each layout writes the same rows to a throwaway run it drops.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import date

from delivery_semantics.history.ledger import Ledger, Outcome, partition_name
from delivery_semantics.workload.generator import Generator, new_run_id

BEFORE, NOW = "before V009", "now"


def one(ledger: Ledger, events: int, batch: int, layout: str) -> dict:
    run_id = new_run_id("rbench")
    ledger.create_run(
        {
            "run_id": run_id,
            "mode": "at_least_once",
            "topic": "unused",
            "partitions": 3,
            "messages": events,
            "keys": 16,
            "payload_bytes": 0,
            "seed": 0,
            "producer_config": {},
        }
    )
    gen = Generator(run_id, 16, 0, 0)
    try:
        if layout == BEFORE:
            with ledger.conn, ledger.conn.cursor() as cur:
                cur.execute(f"ALTER TABLE {partition_name('ledger_events', run_id)} ADD PRIMARY KEY (run_id, event_id)")
                cur.execute(f"CREATE INDEX ON {partition_name('ledger_outcomes', run_id)} (run_id, event_id)")
        events_s = outcomes_s = 0.0
        for lo in range(0, events, batch):
            now_ms = int(time.time() * 1000)
            evs = [gen.event(n, now_ms) for n in range(lo, min(lo + batch, events))]
            outs = [Outcome(e.event_id, "acked", e.n % 3, e.n // 3, 1000 + e.n % 700) for e in evs]
            t = time.perf_counter()
            if layout == BEFORE:
                ledger.copy_events(run_id, evs)
            else:
                ledger.record_event_range(run_id, evs[0].n, evs[-1].n + 1, gen.keys, evs[0].publish_at_ms)
            t2 = time.perf_counter()
            ledger.copy_outcomes(run_id, 1, outs)
            events_s += t2 - t
            outcomes_s += time.perf_counter() - t2
        write_s = events_s + outcomes_s
        t = time.perf_counter()
        if layout == NOW:
            ledger.seal(run_id)
        seal_s = time.perf_counter() - t
    finally:
        ledger.drop_run(run_id)
    return {
        "events_s": events_s,
        "outcomes_s": outcomes_s,
        "write_s": write_s,
        "seal_s": seal_s,
        "total_s": write_s + seal_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.events <= 0 or args.batch <= 0 or args.repeats <= 0:
        print("ledger_copy: --events, --batch and --repeats must be > 0", file=sys.stderr)
        return 2
    ledger = Ledger()
    ledger.migrate()
    results = {BEFORE: [], NOW: []}
    try:
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits both alike
            for layout in results:
                results[layout].append(one(ledger, args.events, args.batch, layout))
    finally:
        ledger.close()
    med = {
        k: {f: statistics.median(r[f] for r in v) for f in ("events_s", "outcomes_s", "write_s", "seal_s", "total_s")}
        for k, v in results.items()
    }
    base = med[BEFORE]
    print(
        f"\nmachine: {platform.node()} {platform.machine()}, {date.today()}, {args.events:,} events + "
        f"{args.events:,} outcomes in COPY batches of {args.batch:,}, median of {args.repeats}"
    )
    print(
        "| layout | events s | outcomes s | write s (during the load) | seal s (end of session) | total s "
        "| events/s during the load | total vs before |"
    )
    print("|" + "---|" * 8)
    for name, m in med.items():
        print(
            f"| {name} | {m['events_s']:.2f} | {m['outcomes_s']:.2f} | {m['write_s']:.2f} | {m['seal_s']:.2f} | {m['total_s']:.2f} | "
            f"{args.events / m['write_s']:,.0f} | {m['total_s'] / base['total_s']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
