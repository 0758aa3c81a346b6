"""Reads a whole topic back with one consumer, for tests and small direct checks. The Spark
checker is the scalable path; this one holds what it reads in memory.

It stops at each partition's end (partition EOF), never by counting offsets: a transactional
topic has gaps where its commit and abort markers sit.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from delivery_semantics.plumbing.endpoints import librdkafka
from delivery_semantics.records.layouts import record_fields


@dataclass(frozen=True, slots=True)
class Record:
    event_id: str | None
    key: str | None
    seq: int | None
    partition: int
    offset: int


# A follower in the ISR that has not fetched holds the high watermark back until the leader
# drops it from the ISR, replica.lag.time.max.ms later (Kafka's default 30 s): an acks=1 record
# is acked before that and readable only after it. Past this bound the record's leader is gone,
# and the record with it.
ACKED_READABLE_WITHIN_S = 45.0


def high_watermarks(
    consumer: Consumer,
    topic: str,
    partitions: list[int],
    covering: dict | None = None,
    timeout: float = ACKED_READABLE_WITHIN_S,
    query_timeout: float = 15.0,
) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) of each partition, as the consumer's isolation level sees it.
    With `covering` (runs.acked_ends: partition to one past its last acked offset), waits until
    every watermark reaches its end or `timeout` passed, so that a record acked by its leader
    alone is not taken for lost while the followers copy it."""
    want = {int(p): int(end) for p, end in (covering or {}).items()}
    deadline = time.monotonic() + timeout
    while True:
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=query_timeout) for p in partitions}
        if all(marks[p][1] >= end for p, end in want.items() if p in marks) or time.monotonic() >= deadline:
            return marks
        time.sleep(0.2)


def read_topic(
    kafka_conf: dict,
    topic: str,
    isolation: str = "read_uncommitted",
    timeout: float = 120.0,
    covering: dict | None = None,
) -> list[Record]:
    """Every record of the topic; with `covering` (see high_watermarks), once the high watermarks
    reach it."""
    consumer = Consumer(
        {
            **librdkafka(kafka_conf),
            "group.id": f"readback-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        md = consumer.list_topics(topic, timeout=10).topics[topic]
        if md.error is not None:
            raise RuntimeError(f"topic {topic}: {md.error}")
        parts = sorted(md.partitions)
        if covering:
            high_watermarks(consumer, topic, parts, covering)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[Record] = []

        def keep(m) -> bool:
            eid, seq, _ = record_fields(m.value(), m.headers())
            out.append(
                Record(
                    eid,
                    m.key().decode() if m.key() else None,
                    seq,
                    m.partition(),
                    m.offset(),
                )
            )
            return True

        _consume_to_end(consumer, topic, set(parts), keep, timeout, isolation)
        return out
    finally:
        consumer.close()


def end_offsets(kafka_conf: dict, topic: str, timeout: float = 15.0, covering: dict | None = None) -> dict[int, int]:
    """The log end (high watermark) of each partition of the topic; with `covering`, once they
    reach it (high_watermarks)."""
    consumer = Consumer(
        {**librdkafka(kafka_conf), "group.id": f"end-offsets-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            raise RuntimeError(f"topic {topic}: {md.error if md else 'not found'}")
        marks = high_watermarks(consumer, topic, sorted(md.partitions), covering, query_timeout=timeout)
        return {p: hi for p, (_, hi) in marks.items()}
    finally:
        consumer.close()


def committed_positions(
    kafka_conf: dict, topic: str, positions: set[tuple[int, int]], timeout: float = 60.0
) -> set[tuple[int, int]]:
    """Which of the (partition, offset) positions a read_committed reader sees. Run it after the
    writer was fenced, so no transaction over those positions is still open."""
    if not positions:
        return set()
    by_part: dict[int, list[int]] = {}
    for p, o in positions:
        by_part.setdefault(p, []).append(o)
    consumer = Consumer(
        {
            **librdkafka(kafka_conf),
            "group.id": f"in-doubt-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, min(offs)) for p, offs in by_part.items()])
        last = {p: max(offs) for p, offs in by_part.items()}
        seen = set()

        def keep(m) -> bool:
            if (m.partition(), m.offset()) in positions:
                seen.add((m.partition(), m.offset()))
            return m.offset() < last[m.partition()]

        _consume_to_end(consumer, topic, set(by_part), keep, timeout, "read_committed")
        return seen
    finally:
        consumer.close()


def _consume_to_end(consumer, topic: str, open_parts: set[int], on_message, timeout: float, isolation: str) -> None:
    """Consumes until every partition is at its end (partition EOF) or `on_message` returns False
    for a message of it."""
    deadline = time.monotonic() + timeout
    while open_parts:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"reading {topic} ({isolation}): partitions {sorted(open_parts)} not at end after {timeout:.0f}s"
            )
        for m in consumer.consume(1000, 1.0):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(m.partition())
                    continue
                raise RuntimeError(f"reading {topic}: {err}")
            if not on_message(m):
                open_parts.discard(m.partition())


def copies_by_event(records: list[Record]) -> Counter:
    return Counter(r.event_id for r in records)
