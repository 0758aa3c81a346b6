"""The cost of exactly-once in a connector pipeline: Debezium's outbox (PostgreSQL, outbox event
router) to a topic and Debezium's JDBC sink, with Kafka Connect's exactly-once source support off
(debezium_outbox, the baseline) and on (debezium_outbox_eos), side by side in one run on one stack,
in alternating order each repeat:

  throughput   outbox rows over the time from the first row written to the last applied to the sink,
               with the load as fast as one session commits (--txn-size rows a transaction)
  latency      outbox created_at to the first apply in the sink, p50 and p99, with the load paced at
               --rate events a second (below both pipelines' throughput, so no queue builds)

    bench/run pipeline [--events N] [--paced-events N] [--rate R] [--txn-size T] [--repeats R]

Prints a markdown table for docs/BENCHMARKS.md, with each EOS figure's ratio to the baseline's.
No audit runs (tests/integration/test_pipelines.py checks what the pipelines deliver).
"""

from __future__ import annotations

import argparse
import platform
import statistics
from datetime import date

from delivery_semantics.workload import connector_pipeline

PIPELINES = ("debezium_outbox", "debezium_outbox_eos")


def measure(name: str, events: int, txn_size: int, rate: int | None) -> dict:
    # No judge: throughput and latency only, the run stays `loaded`.
    return connector_pipeline.run(connector_pipeline.PipelineSpec(name, "none", events, txn_size, rate))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=50_000, help="events of each throughput run")
    ap.add_argument("--paced-events", type=int, default=6_000, help="events of each latency run")
    ap.add_argument("--rate", type=int, default=200, help="events a second of each latency run")
    ap.add_argument("--txn-size", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    results: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.repeats):
        for name in PIPELINES if i % 2 == 0 else reversed(PIPELINES):
            for kind, events, rate in (("throughput", args.events, None), ("latency", args.paced_events, args.rate)):
                row = measure(name, events, args.txn_size, rate)
                results.setdefault((name, kind), []).append(row)
                print(
                    f"{name} {kind} {row['run_id']}: {row['outbox_rows']} rows, {row['throughput_eps']} events/s, "
                    f"p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms",
                    flush=True,
                )

    def med(name, kind, col):
        return statistics.median(r[col] for r in results[(name, kind)])

    base = PIPELINES[0]
    print(
        f"\n{date.today()}, {platform.node()}: {args.repeats} repeats (medians); throughput runs {args.events:,} "
        f"events unpaced, latency runs {args.paced_events:,} events at {args.rate}/s; {args.txn_size} rows an "
        "outbox transaction\n"
    )
    print("| pipeline | throughput (events/s) | vs baseline | p50 latency (ms) | p99 latency (ms) | p99 vs baseline |")
    print("|---|---|---|---|---|---|")
    for name in PIPELINES:
        tput, p50, p99 = (
            med(name, "throughput", "throughput_eps"),
            med(name, "latency", "latency_p50_ms"),
            med(name, "latency", "latency_p99_ms"),
        )
        print(
            f"| {name} | {tput:,.0f} | {tput / med(base, 'throughput', 'throughput_eps'):.2f}x | {p50:,.0f} | "
            f"{p99:,.0f} | {p99 / med(base, 'latency', 'latency_p99_ms'):.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
