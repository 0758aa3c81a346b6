"""Reconciliation at scale vs the floor, measured side by side in one run:

  floor      Kafka's own org.apache.kafka.tools.ConsumerPerformance reading the same topic once
  Spark      spark_apps/smoke_count.py through spark-submit with the checker's settings: a count()
             of the same topic through Spark's Kafka source, so the engine's own cost (JVM start,
             the Kafka source, a job) is told apart from the checker's
  checker    spark_apps/reconcile.py through spark-submit (local[2]): the topic read once (twice
             when transactional), the ledger rebuilt from its ranges and batch rows,
             classification, the merge of the results, and the deduplicated copy (to the
             lakehouse by default; --dedup-copy lakehouse,off measures each store back to back)

For each size it also samples the driver's peak resident memory. In local mode the executors run
inside the driver JVM, so this is the whole Spark process. Flat across sizes means nothing is
collected to the driver.

    bench/run reconcile [--sizes 1000000,3000000] [--mode idempotent] [--event-log var/spark-events]
    bench/run reconcile --sizes 10000000 --record-format avro   # runs written in Avro (from_avro)
    bench/run reconcile --runs RUN1,RUN2       # reuse runs loaded before (their topics must be intact)
    bench/run reconcile --runs RUN1 --no-dedup-copy   # the checker without the deduplicated copy
    bench/run reconcile --sizes 1000000,10000000 --dedup-copy lakehouse,off   # with and without, back to back
    bench/run reconcile --runs RUN1 --repeats 3       # three interleaved rounds, medians reported

A reused run's earlier results are deleted first, so every measurement writes as much as the first.
Before the first timed read of a topic, ConsumerPerformance reads it once untimed: the first read
after the brokers start comes from disk, and only the floor would pay for it.

With --event-log the checker writes Spark's event log there; bench/run spark_profile reads it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from datetime import date

import devstack
from delivery_semantics import catalog
from delivery_semantics.entry import spark_submit
from delivery_semantics.entry.spark_submit import spark_application_env
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing.endpoints import kafka_config
from delivery_semantics.workload import load


def _tree_rss_peak(root_pid: int, stop: threading.Event, peaks: dict) -> None:
    """Samples the RSS of the largest process (the JVM) and of the Python driver under root_pid."""
    while not stop.is_set():
        children = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ppid = int(fields[1])
                with open(f"/proc/{pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
                children[int(pid)] = (ppid, rss, comm)
            except (OSError, StopIteration, ValueError, IndexError):
                continue
        tree, frontier = set(), {root_pid}
        while frontier:
            tree |= frontier
            frontier = {p for p, (pp, _, _) in children.items() if pp in frontier} - tree
        for p in tree:
            if p in children:
                _, rss, comm = children[p]
                key = "jvm_mb" if comm == "java" else "python_mb" if comm.startswith("python") else None
                if key:
                    peaks[key] = max(peaks.get(key, 0), rss // 1024)
        time.sleep(0.25)


def event_log_conf(directory: str) -> dict:
    """Spark's event log as plain JSON lines, one file per application (spark_profile reads it)."""
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": os.path.abspath(directory),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def timed_reconcile(run_id: str, event_log: str | None = None, dedup_copy: str = "lakehouse") -> dict:
    conf = {}
    if event_log:
        os.makedirs(event_log, exist_ok=True)
        conf = event_log_conf(event_log)
    return timed_submit(spark_submit.command(spark_submit.reconcile_args([run_id], dedup_copy), conf=conf))


def spark_count(topic: str) -> float:
    """Spark's floor: the same spark-submit counting the topic's records and nothing else."""
    return timed_submit(spark_submit.command(["--topic", topic], app="smoke_count.py"))["seconds"]


def timed_submit(cmd: list[str]) -> dict:
    env = {**os.environ, **spark_application_env()}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, peaks = threading.Event(), {}
    sampler = threading.Thread(target=_tree_rss_peak, args=(proc.pid, stop, peaks), daemon=True)
    sampler.start()
    out, err = proc.communicate()
    elapsed = time.monotonic() - t0
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[-3:])} failed: {err[-2000:]}")
    return {"seconds": elapsed, **peaks, "summary": [ln for ln in out.splitlines() if ln.startswith("RECONCILED")]}


def consumer_performance(topic: str, messages: int) -> float:
    cmd = devstack.kafka_tool_command(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        kafka_config()["bootstrap.servers"],
        "--topic",
        topic,
        "--messages",
        str(messages),
        "--timeout",
        "60000",
        heap="1g",
    )
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    elapsed = time.monotonic() - t0
    if res.returncode != 0 or not re.search(r"\d", res.stdout):
        raise RuntimeError(f"ConsumerPerformance failed: {res.stderr[-1500:]}")
    return elapsed


def forget_results(run_id: str) -> None:
    lg = Ledger()
    try:
        with lg.conn, lg.conn.cursor() as cur:
            for table in ("dedup_events", "dedup_copies", "reconcile_discrepancies", "reconcile_summary"):
                cur.execute(f"DELETE FROM {table} WHERE reconciliation_id = %s", (run_id,))
    finally:
        lg.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,3000000")
    ap.add_argument("--mode", default="idempotent")
    ap.add_argument("--record-format", default="text", choices=["text", "avro"], help="the loaded runs' records")
    ap.add_argument("--runs", help="comma-separated completed runs to reconcile instead of loading new ones")
    ap.add_argument("--event-log", help="directory for Spark's event log (for bench/run spark_profile)")
    ap.add_argument(
        "--dedup-copy",
        default="lakehouse",
        help=f"comma-separated stores of the copy, each measured in turn: {', '.join(catalog.DEDUP_COPY_STORES)}",
    )
    ap.add_argument("--no-dedup-copy", dest="dedup_copy", action="store_const", const="off", help="--dedup-copy off")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved rounds per run; medians are reported")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    stores = args.dedup_copy.split(",")
    if unknown := [x for x in stores if x not in catalog.DEDUP_COPY_STORES]:
        ap.error(f"--dedup-copy: {', '.join(unknown)} is not one of {', '.join(catalog.DEDUP_COPY_STORES)}")
    rows = []
    lg = Ledger()
    if args.runs:
        found = [lg.get_run(r) for r in args.runs.split(",")]
        runs = [(run["messages"], run["topic"], run["run_id"]) for run in found]
        layouts = {run["record_layout"] for run in found}
    else:
        runs = []
        for n in [int(x) for x in args.sizes.split(",")]:
            s = load.start(load.LoadSpec(mode=args.mode, messages=n, seed=1, record_format=args.record_format))
            runs.append((n, s.topic, s.run_id))
        layouts = {args.record_format}
    lg.close()
    for n, topic, run_id in runs:
        consumer_performance(topic, n)  # untimed: every timed read finds the topic in the page cache
        rounds = []
        for _ in range(args.repeats):
            if args.runs or rounds:
                forget_results(run_id)
            floor = consumer_performance(topic, n)
            spark = spark_count(topic)
            by_store = {}
            for store in stores:
                forget_results(run_id)
                r = by_store[store] = timed_reconcile(run_id, args.event_log, dedup_copy=store)
                print(
                    f"{n} (copy {store}): floor {floor:.1f}s, Spark count {spark:.1f}s, reconcile {r['seconds']:.1f}s, "
                    f"ratio {r['seconds'] / floor:.1f}x, driver JVM peak {r.get('jvm_mb')} MB, "
                    f"python {r.get('python_mb')} MB; {r['summary']}",
                    file=sys.stderr,
                    flush=True,
                )
            rounds.append((floor, spark, by_store))
        floor = statistics.median(f for f, _, _ in rounds)
        spark = statistics.median(s for _, s, _ in rounds)
        for store in stores:
            r = {
                "seconds": statistics.median(b[store]["seconds"] for _, _, b in rounds),
                "jvm_mb": max(b[store].get("jvm_mb") or 0 for _, _, b in rounds),
                "python_mb": max(b[store].get("python_mb") or 0 for _, _, b in rounds),
            }
            rows.append((n, store, floor, spark, r))
    print(
        f"\nmachine: {platform.node()} {platform.machine()}, {date.today()}, mode {args.mode}, 200 B payloads "
        f"({'/'.join(sorted(layouts))} records), "
        f"3 partitions, spark local[2], driver memory 2g, medians of {args.repeats} interleaved round(s)"
    )
    print(
        "| events | copy | ConsumerPerformance s (floor) | Spark count s | reconcile s | reconcile / floor | "
        "Spark count / floor | checker s (reconcile - Spark count) | driver JVM peak RSS MB | Python driver peak MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, store, floor, spark, r in rows:
        print(
            f"| {n:,} | {store} | {floor:.1f} | {spark:.1f} | {r['seconds']:.1f} | {r['seconds'] / floor:.1f}x | "
            f"{spark / floor:.1f}x | {r['seconds'] - spark:.1f} | {r.get('jvm_mb')} | {r.get('python_mb')} |"
        )
    for store in stores:
        mine = [(n, r) for n, s, _, _, r in rows if s == store]
        if len(mine) >= 2:
            (n1, r1), (n2, r2) = mine[0], mine[-1]
            print(
                f"copy {store}: t({n2:,}) / t({n1:,}) = {r2['seconds'] / r1['seconds']:.2f} for {n2 / n1:.0f}x the events"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
