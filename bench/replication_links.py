"""What the proxied links cost: replication and the controller quorum go through Toxiproxy (one
link per pair of brokers, so that a partition can cut one broker off). Kafka's own
ProducerPerformance, acks=all on RF 3, on the same brokers restarted with their peers reached
through the links and directly, alternated.

    bench/run replication_links [--messages N] [--repeats R]

Direct is this bench's own variant: the brokers' hosts files name each peer at 127.0.0.1. The
stack is left as it was found, with the links.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import date

from producer import producer_performance

import devstack
from delivery_semantics import modes
from delivery_semantics.faults.nemesis import wait_healthy
from delivery_semantics.plumbing.endpoints import kafka_config
from devstack import kafka as stack_kafka

_with_links = stack_kafka.render_hosts_file


def _direct(b: devstack.Broker):
    path = _with_links(b)
    path.write_text("".join(f"{devstack.HOST} {x.peer_host}\n" for x in devstack.BROKERS if x != b) + path.read_text())
    return path


def restart_brokers(direct: bool) -> None:
    stack_kafka.render_hosts_file = _direct if direct else _with_links
    try:
        for b in devstack.BROKERS:  # one at a time, so the quorum stays
            devstack.stop_broker(b)
            devstack.start_broker(b)
            devstack.wait_for_cluster()
            wait_healthy(kafka_config(), timeout=180)
    finally:
        stack_kafka.render_hosts_file = _with_links


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--payload-bytes", type=int, default=200)
    args = ap.parse_args()
    if args.messages <= 0 or args.repeats <= 0:
        print("replication_links: --messages and --repeats must be > 0", file=sys.stderr)
        return 2
    mode = modes.get_mode("at_least_once_all")
    conf = kafka_config()
    rps: dict[str, list[float]] = {"links": [], "direct": []}
    try:
        for _ in range(args.repeats):
            for variant in ("direct", "links"):
                restart_brokers(direct=variant == "direct")
                r = producer_performance(mode, args.messages, args.payload_bytes, conf)
                rps[variant].append(r["rps"])
                print(f"{variant}: {r['rps']:,.0f} records/s, p99 {r['p99_ms']:.0f} ms", flush=True)
    finally:
        restart_brokers(direct=False)
    links, direct = statistics.median(rps["links"]), statistics.median(rps["direct"])
    print(
        f"\n{date.today()}, ProducerPerformance acks=all, {args.messages:,} records of {args.payload_bytes} B, "
        f"3 partitions RF 3, median of {args.repeats}\n"
        "| peers reached | records/s | links / direct |\n|---|---|---|\n"
        f"| directly | {direct:,.0f} | |\n| through the links | {links:,.0f} | {links / direct:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
