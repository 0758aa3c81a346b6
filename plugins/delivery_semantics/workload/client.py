"""The producer clients: send events under a delivery mode and turn every delivery report into a
ledger outcome, getting the subtleties of DESIGN.md §2 right. `ProducerClient` holds what both
clients share; `LibrdkafkaClient` runs librdkafka here, `java_client.JavaClient` the Java client
in a JVM.

- acks=0: a report carries no offset and only means "handed to the socket" -> `sent`, never `acked`;
- a timed-out request may still have been written -> `unknown`, not `failed`;
- transactional: a report means written, not committed -> `acked` only once the transaction
  commits; the events of an aborted transaction are `aborted` and must be sent again.
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Producer

from delivery_semantics import clients
from delivery_semantics.catalog import COORDINATOR_ABORTED, DeliveryMode
from delivery_semantics.clients.librdkafka import NAME
from delivery_semantics.errors import ModeError
from delivery_semantics.history.ledger import Outcome, Report, Reports
from delivery_semantics.plumbing.endpoints import librdkafka
from delivery_semantics.records.event import event_id
from delivery_semantics.workload.generator import Generator

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


class ProducerFenced(RuntimeError):
    """A newer producer with the same transactional.id took over; this session must stop."""


def runtime(client: str) -> type[ProducerClient]:
    """The class that runs `client` (its ClientSpec's `runtime`, imported on first use)."""
    module, _, name = clients.spec(client).runtime.partition(":")
    return getattr(importlib.import_module(module), name)


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


def classify_error(err: KafkaError) -> str:
    return "failed" if err.code() in _NOT_WRITTEN else "unknown"


@dataclass
class Written:
    """A transaction whose records all have their reports, not yet committed or aborted."""

    producer: object  # the client's handle of the transactional.id it was written under
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


class AbortRequired(RuntimeError):
    """The broker requires the open transaction to be aborted (an abortable error)."""


# Why a transaction was aborted, as its events' `aborted` outcomes say (the error of a record that
# failed says it for that record): the checker's coordinator_aborted reads the coordinator's word.
ABORTED_BY_THE_APPLICATION = "aborted by the application"
ABORTED_FOR_A_FAILED_RECORD = "aborted: a record of its transaction failed"
ABORTED_BEHIND = "aborted behind the transaction before it, which was aborted"


def coordinator_aborted(why: str) -> str:
    return f"{COORDINATOR_ABORTED}: {why}"


# A transaction in doubt when its producer died or went fatal that a read_committed read does not
# show: the next producer's init fenced the old epoch, and the coordinator aborted what was open.
FENCED_AT_RESTART = coordinator_aborted("not committed when a new producer fenced its transactional.id")


class ProducerClient:
    """What both clients share: a run's events go out as (n, publish_at_ms) records, and their
    reports come back as `Reports`; a transaction is written, then committed or aborted, and its
    events' outcomes follow from that. A client subclass sends and commits; this class turns what
    it learns into outcomes."""

    def __init__(self, topic: str, gen: Generator, *, transactional: bool, acks0: bool):
        self.topic, self.gen, self.run_id, self.transactional = topic, gen, gen.run_id, transactional
        self.acks0 = acks0
        self.produced = 0
        self.errors: list[str] = []
        self._done = Reports(self.run_id)
        # Reports since the last drain, or of the open transaction: (n, partition, offset, latency_us).
        self._delivered: list[Report] = []
        self._failed: list[Outcome] = []

    def _take(self) -> tuple[list[Report], list[Outcome]]:
        """The reports since the last take."""
        out = self._delivered, self._failed
        self._delivered, self._failed = [], []
        return out

    def _failure(self, n: int, status: str, latency_us: int | None, error: str) -> Outcome:
        return Outcome(event_id(self.run_id, n), status, latency_us=latency_us, error=error, n=n)

    def drain(self) -> Reports:
        """The outcomes learned since the last drain."""
        if not self.transactional:
            delivered, failed = self._take()
            self._done.extend("sent" if self.acks0 else "acked", None, delivered)
            self._done.others.extend(failed)
        out, self._done = self._done, Reports(self.run_id)
        return out

    def commit(self, written: Written, before_commit: Callable[[Reports], None]) -> bool:
        """Commits a written transaction. Returns True when it committed; False when it was aborted
        (a record failed, or the broker required it), in which case every event got an `aborted`
        outcome. `before_commit` receives the `written` outcomes and must make them durable: if this
        process dies during the commit, they are how a resume learns what to check. Safe to call in
        another thread while the next transaction is written under the other id."""
        if written.failed:
            self.abort(written, ABORTED_FOR_A_FAILED_RECORD)
            return False
        reports = Reports(self.run_id)
        reports.extend("written", written.txn_no, list(written.delivered))
        before_commit(reports)
        try:
            self._commit_transaction(written.producer)
        except AbortRequired as e:
            # Every record had its report: what refused the commit is the coordinator's state of
            # the transaction (timed out, or an epoch bumped under it).
            self.abort(written, coordinator_aborted(f"the commit was refused: {e}"))
            return False
        self._done.commit(written.txn_no, written.delivered)
        return True

    def abort(self, written: Written, why: str) -> None:
        """Aborts a written transaction: every event gets an `aborted` outcome, its error `why`
        (a failed record's, its own)."""
        self._abort_transaction(written.producer)
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
                    f.error if f else why,
                    n,
                )
            )

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    # What a client is, before it sends: its own check of a configuration (no connection opened),
    # returning the effective values of the settings a finding reads, or ModeError in one line; and
    # the Kafka connection's librdkafka settings as its own.
    @classmethod
    def check(cls, conf: dict[str, str], mode: DeliveryMode) -> dict[str, str]:
        raise NotImplementedError

    @classmethod
    def connection(cls, kafka_conf: dict) -> dict:
        return dict(kafka_conf)

    # What a client does: send, flush, write a transaction, commit, abort, close.
    def send(self, records: list[tuple[int, int]]) -> None:
        raise NotImplementedError

    def flush(self, timeout: float) -> int:
        raise NotImplementedError

    def write_transaction(self, records: list[tuple[int, int]], txn_no: int) -> Written:
        raise NotImplementedError

    def _commit_transaction(self, producer) -> None:
        raise NotImplementedError

    def _abort_transaction(self, producer) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class LibrdkafkaClient(ProducerClient):
    """librdkafka in this process. The records go to librdkafka a batch at a time (produce_batch),
    each as the generator's value and key; a clean report is one tuple, no Event or Outcome object."""

    @classmethod
    def check(cls, conf: dict[str, str], mode: DeliveryMode) -> dict[str, str]:
        """librdkafka's own check (it refuses unknown keys and bad values; no connection is
        opened), after the rules it applies only once connected, said in one line."""
        eff = {**clients.spec(NAME).defaults, **conf}
        eff["acks"] = {"-1": "all"}.get(str(eff["acks"]).strip().lower(), str(eff["acks"]).strip().lower())
        if eff["acks"] not in ("0", "1", "all"):
            raise ModeError(f"acks={eff['acks']!r} must be 0, 1 or all")
        idempotent = _bool("enable.idempotence", eff["enable.idempotence"])
        retries = _int("retries", eff["retries"])
        in_flight = _int("max.in.flight.requests.per.connection", eff["max.in.flight.requests.per.connection"])
        for key in ("message.timeout.ms", "request.timeout.ms", "linger.ms"):
            if key in eff and _int(key, eff[key]) < 0:
                raise ModeError(f"{key} must be >= 0")
        if retries < 0 or in_flight < 1:
            raise ModeError("retries must be >= 0 and max.in.flight.requests.per.connection >= 1")
        if idempotent:
            if eff["acks"] != "all":
                raise ModeError(
                    f"enable.idempotence=true needs acks=all, got acks={eff['acks']}: "
                    "the broker can only de-duplicate what all in-sync replicas acknowledged"
                )
            if in_flight > 5:
                raise ModeError(
                    f"enable.idempotence=true needs max.in.flight.requests.per.connection <= 5, got {in_flight}"
                )
            if retries == 0:
                raise ModeError("enable.idempotence=true needs retries > 0: idempotence exists to make retries safe")
        if mode.transactional and not idempotent:
            raise ModeError("a transactional producer needs enable.idempotence=true (transactions are built on it)")
        probe = {**conf, "bootstrap.servers": "127.0.0.1:1", "log_level": 0, "error_cb": lambda _e: None}
        try:
            Producer(librdkafka({**probe, "transactional.id": "validate"} if mode.transactional else probe))
        except KafkaException as e:
            raise ModeError(f"librdkafka refused the producer settings: {e.args[0].str()}") from None
        except (TypeError, ValueError) as e:
            raise ModeError(f"librdkafka refused the producer settings: {e}") from None
        return eff

    def __init__(self, conf: dict, topic: str, gen: Generator, *, transactional: bool):
        super().__init__(topic, gen, transactional=transactional, acks0=conf.get("acks") == "0")
        # When transactional, the producer of the current or next transaction, one of `_turns`.
        conf = librdkafka(conf)
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
            self._failed.append(self._failure(n, classify_error(err), latency_us, err.name()))

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
        return Written(self.producer, records, txn_no, *self._take())

    def _commit_transaction(self, producer: Producer) -> None:
        try:
            self._call_with_retry(producer.commit_transaction, 60)
        except KafkaException as ex:
            if ex.args[0].txn_requires_abort():
                raise AbortRequired(ex.args[0].str()) from None
            raise

    def _abort_transaction(self, producer: Producer) -> None:
        self._call_with_retry(producer.abort_transaction, 60)

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
            try:
                producer.flush(5)
            except KafkaException as e:
                if not e.args[0].fatal():
                    raise  # a fatal producer is being let go: what it holds is lost with it
