"""The consumer-side clients (DESIGN.md §3, consumer side): one consumer process of a consumer run.

    python -m delivery_semantics.entry.cli consumer_session --consumer-run-id C --session N [--crash-after K]

It reads the run's input topic in the run's consumer group (read_committed, manual commits,
static membership so that a restarted process takes over at once) to the end of every
partition, and writes what it reads with the run's strategy:
- commit_before_process: commits the batch's offsets, then writes it to the sink (at-most-once);
- process_then_commit: writes the batch to the sink in one database transaction, then commits
  synchronously (at-least-once);
- process_then_commit_dedup: the same, into a sink that skips event ids it holds and applies an
  update only when it is newer (seed 000's remedy);
- transactional_copy: produces each record, transformed, to the output topic inside a
  transaction that also carries the input offsets (send_offsets_to_transaction);
- and three that reproduce a consumer setting's effect for `prove`: auto_commit (librdkafka's
  timer commits what poll() returned, then the sink write), start_at_latest (a new group at
  auto.offset.reset=latest) and slow_poll_loop (process_then_commit that stalls once, past
  max.poll.interval.ms, between its write and its commit, as a dynamic member).

With --crash-after K the process kills itself with SIGKILL at its strategy's weakest point,
in the first batch that takes the session past K records: after the commit and before the sink
write (commit_before_process), once the timer's commit has passed the batch and before its write
(auto_commit), after the sink write and before the commit (both process_then_commit strategies,
and slow_poll_loop), or halfway through producing a transaction's records, flushed
to the brokers and never committed (transactional_copy). Before dying it prints one CRASH line;
a session that reaches the end prints one DONE line. The workload (consumer_workload) starts
these processes and restarts them after a crash.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from delivery_semantics import catalog
from delivery_semantics.catalog import Strategy
from delivery_semantics.faults.nemesis import crash_here
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing.endpoints import Database, kafka_config, ledger_database, librdkafka
from delivery_semantics.records.layouts import H_EVENT_ID, record_fields, with_payload
from delivery_semantics.workload.sink import Sink, SinkRecord

H_COPIED_FROM = "copied_from"


class SessionError(RuntimeError):
    pass


def consumer_config(kafka_conf: dict, run: dict, strategy: Strategy) -> dict:
    """The run's consumer: its strategy's commits and start, and the client keys of its settings
    (consumer_workload.run_settings checked them; `app.` keys are the application's)."""
    conf = {
        **kafka_conf,
        "group.id": run["group_id"],
        "session.timeout.ms": 6000,
        "enable.auto.commit": strategy.auto_commit,
        "auto.offset.reset": strategy.offset_reset,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        **{k: int(v) for k, v in (run.get("settings") or {}).items() if not k.startswith("app.")},
    }
    if not strategy.stalls:
        # Static membership: a restarted process with the same instance id takes over the killed
        # one's partitions at once, instead of waiting out its session. A consumer that outlives
        # its poll interval must leave the group as a dynamic member does.
        conf["group.instance.id"] = f"{run['group_id']}.0"
    return conf


class _Input:
    """The run's input topic, consumed in batches until every partition reaches its end. Each
    poll's offsets are in the ledger (`consumer_polls`) before its records are processed, so the
    checker sees the polls of a session that was killed too."""

    def __init__(self, kafka_conf: dict, run: dict, timeout: float, ledger: Ledger, session: int, strategy: Strategy):
        self.ledger, self.run_id, self.session, self.polls = ledger, run["consumer_run_id"], session, 0
        self.topic, self.batch_size = run["input_topic"], int(run["batch_size"])
        self.open_parts = {int(p) for p in run["input_end_offsets"]}
        self.deadline = time.monotonic() + timeout
        self.left_group = 0  # times the client said the poll interval was exceeded
        self.consumer = Consumer(librdkafka(consumer_config(kafka_conf, run, strategy)))
        self.consumer.subscribe([self.topic])

    def batches(self):
        while self.open_parts:
            if time.monotonic() > self.deadline:
                raise SessionError(f"partitions {sorted(self.open_parts)} of {self.topic} not at their end in time")
            data = []
            for m in self.consumer.consume(self.batch_size, 1.0):
                err = m.error()
                if err is None:
                    data.append(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    self.open_parts.discard(m.partition())
                elif err.code() == KafkaError._MAX_POLL_EXCEEDED:
                    # The client left the group; the next poll joins it again.
                    self.left_group += 1
                else:
                    raise KafkaException(err)
            if data:
                self.polls += 1
                offsets: dict[int, list[int]] = {}
                for m in data:
                    offsets.setdefault(m.partition(), []).append(m.offset())
                self.ledger.record_poll(self.run_id, self.session, self.polls, offsets)
                yield data

    def next_offsets(self, batch) -> list[TopicPartition]:
        last: dict[int, int] = {}
        for m in batch:
            last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
        return [TopicPartition(self.topic, p, o + 1) for p, o in sorted(last.items())]

    def commit(self, batch) -> None:
        self.consumer.commit(offsets=self.next_offsets(batch), asynchronous=False)

    def await_auto_commit(self, batch, interval_ms: int) -> None:
        """Until the client's timer has committed past the batch poll() returned (its offsets were
        stored as it returned them): the moment auto-commit has taken the batch as consumed."""
        wanted = self.next_offsets(batch)
        deadline = time.monotonic() + 5 * interval_ms / 1000 + 10
        while time.monotonic() < deadline:
            committed = {tp.partition: tp.offset for tp in self.consumer.committed(wanted, timeout=10)}
            if all(committed.get(tp.partition, -1) >= tp.offset for tp in wanted):
                return
            time.sleep(min(0.2, interval_ms / 1000))
        raise SessionError(f"the auto-commit timer ({interval_ms} ms) did not commit past the batch in time")

    def close(self) -> None:
        self.consumer.close()


def sink_record(m) -> SinkRecord:
    eid, seq, at = record_fields(m.value(), m.headers())
    return SinkRecord(
        eid or f"partition {m.partition()} offset {m.offset()}",
        m.key().decode() if m.key() is not None else None,
        seq,
        at,
        m.partition(),
        m.offset(),
    )


def run_sink_session(
    run: dict,
    strategy: Strategy,
    kafka_conf: dict,
    db: Database,
    ledger: Ledger,
    session: int,
    crash_after: int | None,
    timeout: float,
) -> dict:
    sink = Sink(db, run["consumer_run_id"], dedup=strategy.dedup)
    source = _Input(kafka_conf, run, timeout, ledger, session, strategy)
    settings = run.get("settings") or {}
    processed = written = refused = 0
    try:
        for batch in source.batches():
            records = [sink_record(m) for m in batch]
            crash = crash_after is not None and processed + len(batch) >= crash_after
            if strategy.auto_commit:
                if crash:
                    source.await_auto_commit(batch, int(settings["auto.commit.interval.ms"]))
                    crash_here(strategy.crash_point, session=session, processed_before=processed, batch=len(batch))
                written += sink.apply(records, session)
            elif strategy.commit_first:
                source.commit(batch)
                if crash:
                    crash_here(strategy.crash_point, session=session, processed_before=processed, batch=len(batch))
                written += sink.apply(records, session)
            else:
                written += sink.apply(records, session)
                if crash:
                    crash_here(strategy.crash_point, session=session, processed_before=processed, batch=len(batch))
                if strategy.stalls and session == 1 and source.polls == 2:
                    time.sleep(int(settings["app.processing.ms"]) / 1000)
                try:
                    source.commit(batch)
                except KafkaException as e:
                    if not strategy.stalls:
                        raise
                    # Out of the group: the batch's partitions are someone's (or this client's once
                    # it joins again) from their last committed offsets.
                    refused += 1
                    print(f"commit refused after the stall: {e.args[0].str() if e.args else e}", flush=True)
            processed += len(batch)
    finally:
        source.close()
        sink.close()
    return {"processed": processed, "written": written, "commits_refused": refused, "left_group": source.left_group}


def transform(m) -> bytes | None:
    """The copy's value: the payload upper-cased, the event's fields as they were (a record of
    the headers layout carries them in its headers, and its value is all payload)."""
    value = m.value()
    if value is None or H_EVENT_ID in dict(m.headers() or []):
        return value.upper() if value is not None else None
    return with_payload(value, bytes.upper)


def run_copier_session(
    run: dict,
    strategy: Strategy,
    kafka_conf: dict,
    ledger: Ledger,
    session: int,
    crash_after: int | None,
    timeout: float,
) -> dict:
    producer = Producer(
        {
            **librdkafka(kafka_conf),
            "transactional.id": run["transactional_id"],
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "transaction.timeout.ms": 60000,
        }
    )
    # Fences the killed process's producer and aborts its open transaction; only then are the
    # input offsets read back, so none is pending.
    producer.init_transactions(60)
    source = _Input(kafka_conf, run, timeout, ledger, session, strategy)
    processed = 0
    try:
        for batch in source.batches():
            crash = crash_after is not None and processed + len(batch) >= crash_after
            producer.begin_transaction()
            for i, m in enumerate(batch):
                headers = [*(m.headers() or []), (H_COPIED_FROM, f"{m.topic()}/{m.partition()}/{m.offset()}".encode())]
                producer.produce(
                    run["output_topic"],
                    key=m.key(),
                    value=transform(m),
                    headers=headers,
                    partition=m.partition(),
                )
                if crash and i == len(batch) // 2:
                    producer.flush(30)
                    crash_here(
                        strategy.crash_point,
                        session=session,
                        processed_before=processed,
                        batch=len(batch),
                        produced_in_open_transaction=i + 1,
                    )
            producer.send_offsets_to_transaction(
                source.next_offsets(batch), source.consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(60)
            processed += len(batch)
    finally:
        source.close()
        producer.flush(10)
    return {"processed": processed, "written": processed}


def run_session(consumer_run_id: str, session: int, crash_after: int | None, timeout: float = 900) -> dict:
    db = ledger_database()
    kafka_conf = kafka_config()
    ledger = Ledger(db)
    try:
        run = ledger.get_consumer_run(consumer_run_id)
        if run is None:
            raise SessionError(f"no consumer run {consumer_run_id!r}")
        strategy = catalog.get_strategy(run["strategy"])
        started = time.monotonic()
        if strategy.transactional:
            result = run_copier_session(run, strategy, kafka_conf, ledger, session, crash_after, timeout)
        else:
            result = run_sink_session(run, strategy, kafka_conf, db, ledger, session, crash_after, timeout)
    finally:
        ledger.close()
    return {"session": session, **result, "seconds": round(time.monotonic() - started, 3)}
