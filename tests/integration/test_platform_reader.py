"""The platform reader (spark_apps/java/PlatformTopicSource.java) against Spark's Kafka source, on
a real topic with every case of a platform run's two text layouts planted: well-formed records,
values with too few or too many fields, empty and null values, text that is not ASCII or not
UTF-8, blank and non-canonical ids, seqs and times that are not numbers, absent, repeated and
empty headers, null keys, and a committed and an aborted transaction. Both readers must give the
same rows, every column, under both isolation levels, with one task per partition and with the
partitions split."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from checker import sources
from delivery_semantics.plumbing.endpoints import kafka_config, spark_kafka_options
from delivery_semantics.plumbing.spark import spark_jars
from delivery_semantics.records import layouts

pytestmark = pytest.mark.timeout(900)
RUN = "r20261127t120000_0a1b2c"
P = f"{RUN}-"

VALUES = [
    f"{P}1 1 1764240000000 payload".encode(),
    f"{P}2 2 1764240000001 pay load with spaces ".encode(),  # more than four fields: the rest is the payload
    f"{P}3 3 1764240000002 ".encode(),  # an empty payload
    f"{P}4 4 1764240000003".encode(),  # three fields: malformed
    b"",
    None,  # a tombstone
    f"{P}05 5 1764240000004 p".encode(),  # not the canonical text of 5
    f"{P}+6 6 1764240000005 p".encode(),
    f"{P}-7 7 1764240000006 p".encode(),
    f"{P}99999999999999999999 8 1764240000007 p".encode(),  # beyond a long
    f" {P}9 9 1764240000008 p".encode(),  # a leading space: an empty id, the rest shifted
    "rün-10 10 1764240000009 päyload".encode(),
    b"\xff\xfe-11 11 1764240000010 p\xc3",  # not UTF-8
    f"{P}12 +12 1764240000011 p".encode(),
    f"{P}13 1.5 1764240000012 p".encode(),
    f"{P}14 -14 soon p".encode(),
    f"{P}15 99999999999999999999 1764240000014 p".encode(),
    b"   ",
    b"other-16 16 1764240000015 p",
    f"{P}17\t 17 1764240000016 p".encode(),
]
HEADERS = [
    [("event_id", f"{P}1".encode()), ("seq", b"1"), ("publish_at", b"1764240000000"), ("run_id", RUN.encode())],
    [("seq", b"2"), ("event_id", f"{P}2".encode()), ("publish_at", b"1764240000001")],  # another order
    [("event_id", f"{P}3".encode()), ("event_id", f"{P}33".encode()), ("seq", b"3")],  # repeated: the first
    [("event_id", None), ("seq", None), ("publish_at", None)],  # present, without values
    [],
    [("event_id", b""), ("seq", b"x"), ("publish_at", b"1.5")],
    [("Event_Id", f"{P}7".encode()), ("event_id ", f"{P}7".encode())],  # near names only
    [("event_id", "rün-8".encode()), ("seq", b"\xff8"), ("publish_at", b"\xc3")],
    [("run_id", RUN.encode()), ("publish_at", b"1764240000009"), ("seq", b"9"), ("event_id", f"{P}09".encode())],
]
KEYS = [None, b"k1", "kü".encode(), b"", b"\xff"]


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("platform-reader")
        .config("spark.jars", spark_jars())
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _plant(conf: dict, topic: str, layout: str) -> None:
    rows = (
        [(v, None) for v in VALUES]
        if layout == layouts.VALUE_LAYOUT
        else [(b"payload" if i % 3 else None, h) for i, h in enumerate(HEADERS)]
    )
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    plain = Producer({**conf, "enable.idempotence": True})
    for i, (value, headers) in enumerate(rows):
        plain.produce(
            topic, value=value, key=KEYS[i % len(KEYS)], headers=headers, partition=i % 3, on_delivery=delivered
        )
    assert plain.flush(60) == 0 and not failed, failed
    txn = Producer({**conf, "transactional.id": f"{topic}-txn"})
    txn.init_transactions(30)
    for commit in (True, False, True):
        txn.begin_transaction()
        for i, (value, headers) in enumerate(rows[:6]):
            txn.produce(
                topic, value=value, key=KEYS[i % len(KEYS)], headers=headers, partition=i % 3, on_delivery=delivered
            )
        if commit:
            txn.commit_transaction(30)
        else:
            txn.flush(30)
            txn.abort_transaction(30)
    assert not failed, failed
    # A commit returns before its markers are in every partition: until then read_committed
    # stops short of the end (the last stable offset), for either reader.
    committed = Consumer({**conf, "group.id": f"{topic}-lso", "isolation.level": "read_committed"})
    try:
        for _ in range(60):
            stable = [
                committed.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) for p in range(3)
            ]
            if all(hi == _high(conf, topic, p) for p, (_, hi) in enumerate(stable)):
                return
            time.sleep(0.5)
    finally:
        committed.close()
    raise AssertionError("the last transaction's markers never reached every partition")


def _high(conf: dict, topic: str, partition: int) -> int:
    c = Consumer({**conf, "group.id": f"{topic}-hw", "isolation.level": "read_uncommitted"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1]
    finally:
        c.close()


def _rows(spark, src, isolation, end, via):
    df = sources.read_topic(spark, src, isolation, dict.fromkeys(end, 0), end, via=via)
    return sorted(
        (tuple(r) for r in df.collect()),
        key=lambda r: (r[df.columns.index("partition")], r[df.columns.index("offset")]),
    )


@pytest.mark.parametrize("layout", [layouts.VALUE_LAYOUT, layouts.HEADERS_LAYOUT])
def test_the_platform_reader_gives_the_rows_spark_kafka_source_gives(spark, fresh_topic, monkeypatch, layout):
    conf = kafka_config()
    topic = fresh_topic("platform-reader")
    _plant(conf, topic, layout)
    run = {
        "run_id": RUN,
        "topic": topic,
        "mode": "transactional",
        "scenario": "clean",
        "messages": 100,
        "record_layout": layout,
    }
    src = sources.platform_source(run, sources.Kafka(conf, spark_kafka_options(conf)))
    assert src.layout == layout
    end = {p: hi for p, (_, hi, _) in sources.topic_offsets(src).items()}
    planted = len(VALUES if layout == layouts.VALUE_LAYOUT else HEADERS)
    for isolation, expected in (("read_committed", planted + 12), ("read_uncommitted", planted + 18)):
        spark_rows = _rows(spark, src, isolation, end, "kafka")
        assert len(spark_rows) == expected
        assert _rows(spark, src, isolation, end, "platform") == spark_rows, isolation
        monkeypatch.setattr(sources, "MIN_SPLIT_RECORDS", 1)  # each partition in two tasks
        assert _rows(spark, src, isolation, end, "platform") == spark_rows, f"{isolation}, split"
        monkeypatch.setattr(sources, "MIN_SPLIT_RECORDS", 50_000)
    # The default for a platform layout is the platform reader, and the planted ids are where
    # they were put: 1, 2 and 3 in the plain writes and in both committed transactions.
    got = sources.read_topic(spark, src, "read_committed", dict.fromkeys(end, 0), end).collect()
    numbered = Counter(r["n"] for r in got if r["n"] is not None and r["n"] >= 0)
    if layout == layouts.VALUE_LAYOUT:
        assert numbered == {1: 3, 2: 3, 3: 3, 12: 1, 13: 1, 14: 1, 15: 1}
        # three fields, empty, a tombstone (each also in both transactions), a leading space, blanks
        assert sum(r["event_id"] is None for r in got) == 11
    else:
        assert numbered == {1: 3, 2: 3, 3: 3}
        assert sum(r["event_id"] is None for r in got) == 4 + 2 * 3  # the rows 3-6, and 3-5 twice
