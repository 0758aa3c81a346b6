"""Producer throughput per delivery mode, measured side by side in one run on one cluster:

  ledger on   the load runner as users run it (write-ahead ledger, outcomes, resend rounds), with
              each number of producers asked for (--producers 1,2: one run with 1, one with 2)
  ledger off  the same generator and producer client, no ledger (transactional: each commit beside
              the next transaction's writing, as the runner does)
  baseline    Kafka's own org.apache.kafka.tools.ProducerPerformance, same acks/idempotence/
              transactions, same bytes a record (our value, with its event fields, plus key),
              same topic layout. Its transactions end by time:
              they last what txn_size records took it in the idempotent mode of the same round

    bench/run producer [--messages N] [--modes m1,m2] [--producers 1,2] [--repeats R] [--keep-topics]
                       [--client librdkafka|java] [--record-format text|avro] [--set linger.ms=5 ...]

--record-format avro writes Avro in Confluent's wire format (librdkafka); ProducerPerformance then
sends records of the same size.

--client java measures the Java client's load runner (kafka-clients in a JVM, driven by the same
session): ProducerPerformance then runs with exactly the runner's Java settings.

--set overrides a mode's producer settings (the client's key names) in all three, ProducerPerformance
too (for librdkafka: the keys it shares), so a setting is measured against itself: an A/B of a
preset is two runs, with and without it.

Prints a markdown table of records/s, p99 ack latency and the ratios, for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import devstack
from delivery_semantics import catalog, modes
from delivery_semantics.history.ledger import Reports
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import kafka_config
from delivery_semantics.records.layouts import RECORD_FORMATS
from delivery_semantics.workload import load
from delivery_semantics.workload.client import few_collections, runtime
from delivery_semantics.workload.generator import Generator, new_run_id
from delivery_semantics.workload.settings import resolve

# ProducerPerformance is the Java client: a Java load is measured against it with its own settings.
JAVA = "java"

# The load runner's defaults, which ledger_on's runs take: the other two measurements use the same.
KEYS, SEED = load.LoadSpec.keys, load.LoadSpec.seed


def _latencies(reports: Reports) -> list[int]:
    return [o.latency_us for o in reports.outcomes() if o.latency_us is not None]


def ledger_off(
    mode: catalog.DeliveryMode,
    messages: int,
    payload: int,
    txn_size: int,
    conf: dict,
    overrides: dict | None = None,
    client_name: str = catalog.DEFAULT_CLIENT,
    record_format: str = "text",
) -> dict:
    run_id = new_run_id()
    topic = f"bench.off.{mode.name}.{run_id}"
    topics.ensure_topic(conf, topic, partitions=3)
    connection = runtime(client_name).connection(conf)
    pconf = {**connection, **resolve(mode, client_name, overrides).conf}
    if mode.transactional:
        pconf["transactional.id"] = f"bench-{run_id}"
    gen = Generator(run_id, KEYS, payload, SEED, layout=RECORD_FORMATS[record_format])
    client = load.open_client(client_name, pconf, topic, gen, mode.transactional)
    latencies = []
    with few_collections():  # as the load runner's session
        t0 = time.monotonic()
        # Transactional, as the load runner does it: each commit runs beside the next transaction's writing.
        committer, committing = ThreadPoolExecutor(1), None
        txn_no = 0
        for batch in gen.batches(0, messages, 10_000):
            if mode.transactional:
                for i in range(0, len(batch), txn_size):
                    txn_no += 1
                    written = client.write_transaction(batch[i : i + txn_size], txn_no)
                    if committing is not None:
                        assert committing.result(), "a benchmark transaction was aborted"
                        latencies.extend(_latencies(client.drain()))
                    committing = committer.submit(client.commit, written, lambda _o: None)
            else:
                client.send(batch)
                latencies.extend(_latencies(client.drain()))
        if committing is not None:
            assert committing.result(), "a benchmark transaction was aborted"
        committer.shutdown()
        client.flush(120)
        latencies.extend(_latencies(client.drain()))
    elapsed = time.monotonic() - t0
    client.close()
    topics.delete_topic(conf, topic)
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1] / 1000 if latencies else None
    return {"rps": messages / elapsed, "p99_ms": p99}


def ledger_on(
    mode: catalog.DeliveryMode,
    messages: int,
    payload: int,
    txn_size: int,
    producers: int,
    conf: dict,
    keep_topic: bool,
    overrides: dict | None = None,
    client_name: str = catalog.DEFAULT_CLIENT,
    record_format: str = "text",
) -> dict:
    """Unless keep_topic, the run's topic is deleted once measured: a 1M run holds 0.8 GB with RF 3,
    and the rounds add up. The run stays in the ledger."""
    s = load.start(
        load.LoadSpec(
            mode=mode.name,
            messages=messages,
            payload_bytes=payload,
            txn_size=txn_size,
            producers=producers,
            overrides=dict(overrides or {}),
            client=client_name,
            record_format=record_format,
        )
    )
    assert s.acked + s.sent_unacked == messages, s.line()
    if not keep_topic:
        topics.delete_topic(conf, s.topic)
    return {"rps": s.records_per_sec, "p99_ms": s.ack_p99_ms, "run_id": s.run_id}


def producer_performance(
    mode: catalog.DeliveryMode,
    messages: int,
    record_size: int,
    conf: dict,
    transaction_ms: int | None = None,
    overrides: dict | None = None,
    client_name: str = catalog.DEFAULT_CLIENT,
) -> dict:
    topic = f"bench.pp.{mode.name}.{new_run_id()}"
    topics.ensure_topic(conf, topic, partitions=3)
    p = resolve(mode, catalog.DEFAULT_CLIENT, overrides if client_name == catalog.DEFAULT_CLIENT else None).effective
    props = {
        "bootstrap.servers": conf["bootstrap.servers"],
        "acks": p["acks"],
        "enable.idempotence": p["enable.idempotence"],
        "linger.ms": p["linger.ms"],
        "max.in.flight.requests.per.connection": p["max.in.flight.requests.per.connection"],
        "retries": p["retries"],
        "compression.type": p["compression.type"],
        # librdkafka's default batch.size; the Java client's 16 KiB would hold ~60 of these records
        "batch.size": "1000000",
    }
    if client_name == JAVA:  # exactly the Java load runner's settings
        props = {"bootstrap.servers": conf["bootstrap.servers"], **resolve(mode, JAVA, overrides).conf}
    cmd = devstack.kafka_tool_command(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(messages),
        "--record-size",
        str(record_size),
        "--throughput",
        "-1",
        "--producer-props",
        *[f"{k}={v}" for k, v in props.items()],
        heap="1g",
    )
    if mode.transactional:
        cmd += ["--transactional-id", f"bench-pp-{new_run_id()}", "--transaction-duration-ms", str(transaction_ms)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    topics.delete_topic(conf, topic)
    final = [ln for ln in res.stdout.splitlines() if "records sent" in ln and "99th" in ln]
    if res.returncode != 0 or not final:
        raise RuntimeError(f"ProducerPerformance failed: {res.stderr[-1500:]}")
    m = re.search(r"([\d.]+) records/sec .* ([\d.]+) ms 99th", final[-1])
    return {"rps": float(m.group(1)), "p99_ms": float(m.group(2))}


def record_bytes(messages: int, payload: int, record_format: str = "text") -> int:
    """What one of the load's records carries, value and key: ProducerPerformance's --record-size.
    The value holds the event id, seq and publish time besides the payload: 53 B more at 200 B."""
    gen = Generator(new_run_id(), KEYS, payload, SEED, layout=RECORD_FORMATS[record_format])
    record = gen.wire(messages - 1, int(time.time() * 1000))
    return len(record["value"]) + len(record["key"])


def transaction_ms(txn_size: int, idempotent_rps: float) -> int:
    """ProducerPerformance commits by time: the duration that gives its transactions txn_size
    records each, at the rate it reached with the same settings and no transactions."""
    return max(1, round(txn_size / idempotent_rps * 1000))


def _median(results: list[dict]) -> dict:
    """Per figure, the median over the repeats (None when no repeat had it)."""
    out = {}
    for key in ("rps", "p99_ms"):
        values = [r[key] for r in results if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--payload-bytes", type=int, default=200)
    ap.add_argument("--txn-size", type=int, default=10_000)
    ap.add_argument("--modes", default=",".join(catalog.MODES))
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds over all modes, interleaved; the table gives each figure's median",
    )
    ap.add_argument("--producers", default="1", help="comma-separated producer counts for the ledger-on runs")
    ap.add_argument("--keep-topics", action="store_true", help="keep the ledger-on runs' topics, to reconcile them")
    ap.add_argument(
        "--client", default=catalog.DEFAULT_CLIENT, help=f"the load runner's client: {', '.join(catalog.CLIENTS)}"
    )
    ap.add_argument("--record-format", default="text", choices=list(RECORD_FORMATS), help="the records' format")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a producer setting for every mode, ProducerPerformance included",
    )
    args = ap.parse_args()
    try:
        counts = [int(n) for n in args.producers.split(",")]
    except ValueError:
        counts = [0]
    if args.messages <= 0 or args.repeats <= 0 or min(counts) <= 0:
        print("producer: --messages, --repeats and --producers must be > 0", file=sys.stderr)
        return 2
    if any("=" not in kv for kv in args.set):
        print("producer: --set takes KEY=VALUE", file=sys.stderr)
        return 2
    overrides = dict(kv.split("=", 1) for kv in args.set)
    client = args.client
    try:
        for name in args.modes.split(","):
            resolve(modes.get_mode(name), client, overrides)
    except catalog.ModeError as e:
        print(f"producer: {e}", file=sys.stderr)
        return 2
    conf = kafka_config()
    pp_bytes = record_bytes(args.messages, args.payload_bytes, args.record_format)
    samples: dict[str, list] = {}
    for _ in range(args.repeats):  # round-robin, so a slow spell of the shared machine hits every mode
        idempotent_rps = None
        for name in args.modes.split(","):
            mode = modes.get_mode(name)
            txn_ms = None
            if mode.transactional:
                if idempotent_rps is None:
                    idempotent = modes.get_mode("idempotent")
                    idempotent_rps = producer_performance(
                        idempotent, args.messages, pp_bytes, conf, overrides=overrides, client_name=client
                    )["rps"]
                txn_ms = transaction_ms(args.txn_size, idempotent_rps)
            pp = producer_performance(mode, args.messages, pp_bytes, conf, txn_ms, overrides, client)
            if name == "idempotent":
                idempotent_rps = pp["rps"]
            fmt = args.record_format
            off = ledger_off(mode, args.messages, args.payload_bytes, args.txn_size, conf, overrides, client, fmt)
            on = [
                ledger_on(
                    mode,
                    args.messages,
                    args.payload_bytes,
                    args.txn_size,
                    n,
                    conf,
                    args.keep_topics,
                    overrides,
                    client,
                    fmt,
                )
                for n in counts
            ]
            samples.setdefault(name, []).append((pp, off, *on))
            print(
                json.dumps(
                    {
                        "mode": name,
                        "producer_performance": pp,
                        "pp_transaction_ms": txn_ms,
                        "ledger_off": off,
                        "ledger_on": dict(zip(counts, on, strict=True)),
                    }
                ),
                file=sys.stderr,
                flush=True,
            )
    rows = [(name, *(_median([s[i] for s in runs]) for i in range(2 + len(counts)))) for name, runs in samples.items()]
    ons = "".join(f"ledger on, {n} producer{'s' * (n > 1)} rec/s | on / PP | " for n in counts)
    header = f"| mode | ProducerPerformance rec/s | ledger off rec/s | {ons}ledger overhead (1 producer) | p99 ms PP / off / on |"
    print(
        f"\nmachine: {platform.node()} {platform.machine()}, {date.today()}, {args.messages:,} records of "
        f"{pp_bytes} B ({args.payload_bytes} B of payload), 3 partitions RF 3, transactions of {args.txn_size}, "
        f"median of {args.repeats}, the {client} client, {args.record_format} records"
        + "".join(f", {k}={v}" for k, v in overrides.items())
    )
    print(header)
    print("|" + "---|" * (5 + 2 * len(counts)))
    for name, pp, off, *on in rows:
        overhead = f"{1 - on[0]['rps'] / off['rps']:.0%}" if counts[0] == 1 else "-"
        p99 = " / ".join(f"{x['p99_ms']:.0f}" if x["p99_ms"] is not None else "-" for x in (pp, off, on[0]))
        cells = "".join(f"{x['rps']:,.0f} | {x['rps'] / pp['rps']:.2f}x | " for x in on)
        print(f"| {name} | {pp['rps']:,.0f} | {off['rps']:,.0f} | {cells}{overhead} | {p99} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
