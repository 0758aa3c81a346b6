"""The producer client: sends events under a delivery mode and turns every delivery report into
a ledger outcome, getting the subtleties of DESIGN.md §2 right:

- acks=0: a report carries no offset and only means "handed to the socket" -> `sent`, never `acked`;
- a timed-out request may still have been written -> `unknown`, not `failed`;
- transactional: a report means written, not committed -> `acked` only once the transaction
  commits; the events of an aborted transaction are `aborted` and must be sent again.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from delivery_semantics import catalog
from delivery_semantics.catalog import ModeError
from delivery_semantics.history.ledger import Outcome, Report, Reports
from delivery_semantics.workload.generator import Generator, event_id

# Errors after which the record certainly is not in the log. Anything else (timeouts, lost
# connections, NOT_ENOUGH_REPLICAS_AFTER_APPEND, purged in flight) may have been written.
_NOT_WRITTEN = {
    getattr(KafkaError, name)
    for name in (
        "_PURGE_QUEUE",
        "MSG_SIZE_TOO_LARGE",
        "INVALID_RECORD",
        "RECORD_LIST_TOO_LARGE",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "_UNKNOWN_TOPIC",
        "UNKNOWN_TOPIC_OR_PART",
        "NOT_ENOUGH_REPLICAS",
        "INVALID_REQUIRED_ACKS",
        "_INVALID_ARG",
        "CORRUPT_MESSAGE",
        "INVALID_TXN_STATE",
        "_FENCED",
        "PRODUCER_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "_NOT_IMPLEMENTED",
    )
    if hasattr(KafkaError, name)
}

# Records handed to librdkafka in one produce_batch call; reports are served between calls.
PRODUCE_BATCH = 2000

# librdkafka registers a transaction's partitions itself (AddPartitionsToTxn: it has no KIP-890,
# transactions v2), and the coordinator refuses that with CONCURRENT_TRANSACTIONS, retried every
# 20 ms, until the previous transaction's markers are written: 40-60 ms a transaction on the local
# cluster. With two transactional.ids taking turns, one id's markers are written while the other's
# transaction fills. A transaction is written only once every record of the one before it was
# reported, so its records follow those in their partitions, as with one id.
TRANSACTIONAL_IDS = 2


def transactional_ids(transactional_id: str) -> list[str]:
    """The transactional.ids a producer takes turns with: the one it was given first."""
    return [transactional_id] + [f"{transactional_id}.{i}" for i in range(1, TRANSACTIONAL_IDS)]


# librdkafka aliases, so an override under either name is checked against the same rules.
_ALIASES = {
    "request.required.acks": "acks",
    "message.send.max.retries": "retries",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "delivery.timeout.ms": "message.timeout.ms",
    "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type",
}
# Set by the runner or the connection, never by a mode override.
_RESERVED = {"bootstrap.servers", "transactional.id", "on_delivery", "error_cb", "stats_cb"}


def _norm_acks(v: str) -> str:
    return {"-1": "all", "all": "all"}.get(str(v).strip().lower(), str(v).strip())


def _bool(key: str, v) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    raise ModeError(f"{key}={v!r} is not a boolean (true/false)")


def _int(key: str, v) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        raise ModeError(f"{key}={v!r} is not an integer") from None


def producer_config(mode: catalog.DeliveryMode | str, overrides: dict | None = None) -> dict[str, str]:
    """The mode's preset merged with overrides (librdkafka key names), normalised and checked for
    contradictions before anything is sent."""
    mode = catalog.get_mode(mode) if isinstance(mode, str) else mode
    conf = dict(mode.producer)
    for key, value in (overrides or {}).items():
        key = _ALIASES.get(key, key)
        if key in _RESERVED:
            raise ModeError(f"{key} cannot be overridden: the runner sets it from the connection and run")
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    conf["acks"] = _norm_acks(conf["acks"])
    if conf["acks"] not in ("0", "1", "all"):
        raise ModeError(f"acks={conf['acks']!r} must be 0, 1 or all")
    idempotent = _bool("enable.idempotence", conf["enable.idempotence"])
    retries = _int("retries", conf["retries"])
    in_flight = _int("max.in.flight.requests.per.connection", conf["max.in.flight.requests.per.connection"])
    for key in ("message.timeout.ms", "request.timeout.ms", "linger.ms"):
        if _int(key, conf[key]) < 0:
            raise ModeError(f"{key} must be >= 0")
    if retries < 0 or in_flight < 1:
        raise ModeError("retries must be >= 0 and max.in.flight.requests.per.connection >= 1")
    if idempotent:
        if conf["acks"] != "all":
            raise ModeError(
                f"enable.idempotence=true needs acks=all, got acks={conf['acks']}: "
                "the broker can only de-duplicate what all in-sync replicas acknowledged"
            )
        if in_flight > 5:
            raise ModeError(
                f"enable.idempotence=true needs max.in.flight.requests.per.connection <= 5, got {in_flight}"
            )
        if retries == 0:
            raise ModeError("enable.idempotence=true needs retries > 0: idempotence exists to make retries safe")
    if mode.transactional and not idempotent:
        raise ModeError("the transactional mode needs enable.idempotence=true (transactions are built on it)")
    if mode.name == "at_most_once" and (retries > 0 or conf["acks"] != "0"):
        raise ModeError("at_most_once means acks=0 and retries=0; a retrying or acking producer is at_least_once")
    return conf


class ProducerFenced(RuntimeError):
    """A newer producer with the same transactional.id took over; this session must stop."""


def classify_error(err: KafkaError) -> str:
    return "failed" if err.code() in _NOT_WRITTEN else "unknown"


@dataclass
class Written:
    """A transaction whose records all have their reports, not yet committed or aborted."""

    producer: Producer
    records: list[tuple[int, int]]
    txn_no: int
    delivered: list[Report]
    failed: list[Outcome]


@contextmanager
def few_collections() -> Iterator[None]:
    """For the length of a load. Every delivery report is a new tuple, so at the collector's default
    threshold (700) a 1M-record load runs 3,400 young passes and some full ones over every object the
    process holds: 0.4-0.55 s of 10 s in the idempotent mode. Here the objects alive at the start
    are left out of the passes, and a young pass waits for 50,000 new objects."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


class ProducerClient:
    """Sends a run's events, given as (n, publish_at_ms) records, and collects their delivery
    reports as `Reports`. The records go to librdkafka a batch at a time (produce_batch), each as
    the generator's value and key; a clean report is one tuple, no Event or Outcome object."""

    def __init__(self, conf: dict, topic: str, gen: Generator, *, transactional: bool):
        self.topic, self.gen, self.run_id, self.transactional = topic, gen, gen.run_id, transactional
        self.acks0 = conf.get("acks") == "0"
        self.produced = 0
        self.errors: list[str] = []
        self._done = Reports(self.run_id)
        # Reports since the last drain, or of the open transaction.
        self._delivered: list[Report] = []
        self._failed: list[Outcome] = []
        # When transactional, the producer of the current or next transaction, one of `_turns`.
        self.producer = Producer({**conf, "error_cb": self._on_error})
        self._turns = [self.producer]
        # A batch refused in part for a full queue would leave the order of its records to the
        # resend; a batch only goes in whole, once the queue has room for it (len() counts
        # every message librdkafka holds).
        self._queue_room = int(conf.get("queue.buffering.max.messages", 100000))
        self._batch = max(1, min(PRODUCE_BATCH, self._queue_room))
        if transactional:
            # Every id is initialised, so a killed session's open transaction is aborted whichever
            # id it had, and none is left to hold back read_committed readers.
            self._turns += [
                Producer({**conf, "transactional.id": tid, "error_cb": self._on_error})
                for tid in transactional_ids(conf["transactional.id"])[1:]
            ]
            for producer in self._turns:
                self._call_with_retry(producer.init_transactions, 60)
            self._turn = 0

    # ------------------------------------------------------------------ reports

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append(f"{err.name()}: {err.str()}")

    def _on_delivery(self, err: KafkaError | None, msg) -> None:
        n = self.gen.n_of(msg.value())
        latency = msg.latency()
        latency_us = int(latency * 1e6) if latency is not None else None
        if err is None:
            self._delivered.append((n, msg.partition(), None if self.acks0 else msg.offset(), latency_us))
        else:
            self._failed.append(
                Outcome(event_id(self.run_id, n), classify_error(err), latency_us=latency_us, error=err.name(), n=n)
            )

    def drain(self) -> Reports:
        """The outcomes learned since the last drain."""
        if not self.transactional:
            self._done.extend("sent" if self.acks0 else "acked", None, self._delivered)
            self._done.others.extend(self._failed)
            self._delivered, self._failed = [], []
        out, self._done = self._done, Reports(self.run_id)
        return out

    # ------------------------------------------------------------------ sending

    def _produce(self, records: list[tuple[int, int]]) -> None:
        producer, wire, topic, report, room, size = (
            self.producer,
            self.gen.wire,
            self.topic,
            self._on_delivery,
            self._queue_room,
            self._batch,
        )
        for lo in range(0, len(records), size):
            batch = [wire(n, publish_at_ms) for n, publish_at_ms in records[lo : lo + size]]
            while len(producer) + len(batch) > room:
                producer.poll(0.05)
            queued = producer.produce_batch(topic, batch, on_delivery=report)
            self.produced += queued
            if queued < len(batch):
                # Refused before it was queued (the queue had room): an unknown topic, a
                # record too large. produce() raised these; so does this.
                raise KafkaException(next(m["_error"] for m in batch if "_error" in m))
            producer.poll(0)

    def send(self, records: list[tuple[int, int]]) -> None:
        """Non-transactional: hand the records to librdkafka; reports arrive through poll/flush."""
        self._produce(records)
        self.producer.poll(0)

    def flush(self, timeout: float) -> int:
        return self.producer.flush(timeout)

    def pause(self, seconds: float) -> None:
        """Waits, serving delivery reports as they come: confluent-kafka measures a report's latency
        when poll serves it, so a paced load that slept would add its sleep to every ack latency."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.producer.poll(left)

    def write_transaction(self, records: list[tuple[int, int]], txn_no: int) -> Written:
        """Begins a transaction under the next transactional.id and writes the records, waiting for
        every report. The transaction stays open until `commit` or `abort`; the one before it must
        have been ended or be committing under the other id."""
        self._delivered, self._failed = [], []
        self.producer = self._turns[self._turn]
        self._turn = (self._turn + 1) % len(self._turns)
        self.producer.begin_transaction()
        self._produce(records)
        self.producer.flush(120)
        written = Written(self.producer, records, txn_no, self._delivered, self._failed)
        self._delivered, self._failed = [], []
        return written

    def commit(self, written: Written, before_commit: Callable[[Reports], None]) -> bool:
        """Commits a written transaction. Returns True when it committed; False when it was aborted
        (a record failed, or the broker required it), in which case every event got an `aborted`
        outcome. `before_commit` receives the `written` outcomes and must make them durable: if this
        process dies during the commit, they are how a resume learns what to check. Safe to call in
        another thread while the next transaction is written under the other id."""
        if written.failed:
            self.abort(written)
            return False
        reports = Reports(self.run_id)
        reports.extend("written", written.txn_no, list(written.delivered))
        before_commit(reports)
        try:
            self._call_with_retry(written.producer.commit_transaction, 60)
        except KafkaException as ex:
            if ex.args[0].txn_requires_abort():
                self.abort(written)
                return False
            raise
        self._done.commit(written.txn_no, written.delivered)
        return True

    def abort(self, written: Written) -> None:
        """Aborts a written transaction: every event gets an `aborted` outcome."""
        self._call_with_retry(written.producer.abort_transaction, 60)
        delivered = {r[0]: r for r in written.delivered}
        failed = {o.n: o for o in written.failed}
        for n, _ in written.records:
            r, f = delivered.get(n), failed.get(n)
            self._done.others.append(
                Outcome(
                    event_id(self.run_id, n),
                    "aborted",
                    r[1] if r else None,
                    r[2] if r else None,
                    r[3] if r else f.latency_us if f else None,
                    written.txn_no,
                    f.error if f else None,
                    n,
                )
            )

    def _call_with_retry(self, fn, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fn(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as ex:
                err = ex.args[0]
                if err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED) or err.fatal():
                    raise ProducerFenced(f"{fn.__name__}: {err.name()}: {err.str()}") from None
                if err.retriable() and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise

    def close(self) -> None:
        for producer in self._turns:
            producer.flush(5)
