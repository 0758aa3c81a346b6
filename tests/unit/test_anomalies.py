"""Each anomaly function of the checker on a few rows made with createDataFrame, in local Spark:
the planted events are found, each with its kind and copies, and nothing else is."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from checker import anomalies, results
from checker.anomalies import Observation

RECORD = "event_id string, key string, seq bigint, publish_at timestamp, partition int, offset bigint, value binary"
LEDGER = (
    "event_id string, key string, seq bigint, publish_at timestamp, status string, "
    "aborted_positions array<struct<partition:int,offset:bigint>>"
)
SINK = RECORD + ", apply_no bigint, state_applied boolean"


def at(second: int) -> datetime:
    return datetime(2026, 11, 23, 12, 0, second, tzinfo=UTC)


def rec(eid, p, o, key=None, seq=None):
    return (eid, key, seq, at(0), p, o, None)


def led(eid, status, aborted=()):
    return (eid, None, None, at(0), status, [{"partition": p, "offset": o} for p, o in aborted])


@pytest.fixture(scope="module")
def planted(spark):
    records = spark.createDataFrame(
        [
            rec("e1", 0, 0),  # delivered once
            rec("e2", 0, 1),
            rec("e2", 1, 0),  # duplicate: 2 copies
            rec("e5", 1, 1),  # unknown in the ledger, yet landed
            rec("x1", 2, 0),  # no ledger row
            rec(None, 0, 9),  # malformed
            rec("e6", 0, 5, "k1", 2),
            rec("e7", 0, 6, "k1", 1),  # e7: lower seq after a higher one
            rec("e8", 0, 20),  # at a position the ledger saw aborted
        ],
        RECORD,
    )
    ledger = spark.createDataFrame(
        [
            led("e1", "acked"),
            led("e2", "acked"),
            led("e3", "acked"),
            led("e4", "failed"),
            led("e5", "unknown"),
            led("e6", "acked"),
            led("e7", "acked"),
            led("e8", "acked", aborted=[(0, 20)]),
        ],
        LEDGER,
    )
    return Observation(records, ledger, "read_committed")


def found(rows) -> set[tuple]:
    return {(r["event_id"], r["kind"], r["copies"]) for r in rows.collect()} if rows is not None else set()


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (anomalies.duplicate, {("e2", "duplicate", 2)}),
        (anomalies.lost_acked, {("e3", "lost_acked", 0)}),
        (anomalies.lost_unacked, {("e4", "lost_unacked", 0)}),
        (anomalies.coordinator_aborted, set()),  # a per-event ledger cannot say
        (anomalies.unknown_landed, {("e5", "unknown_landed", 1)}),
        (anomalies.unexpected, {("x1", "unexpected", 1)}),
        (anomalies.out_of_order, {("e7", "out_of_order", 1)}),
        (anomalies.aborted_visible, {("e8", "aborted_visible", 1)}),
        (anomalies.malformed, {("partition 0 offset 9", "malformed", 1)}),
        (anomalies.stale_overwrite, set()),
        (anomalies.torn_transaction, set()),
        (anomalies.inconsistent_offset, set()),
        (anomalies.poll_skip, set()),
        (anomalies.nonmonotonic_poll, set()),
    ],
)
def test_each_kind_finds_exactly_its_planted_event(planted, kind, expected):
    assert found(kind(planted)) == expected


def test_discrepancies_compose_every_kind_and_the_totals_count(planted):
    rows = anomalies.discrepancies(planted, "run-1").collect()
    assert {(r["event_id"], r["kind"]) for r in rows} == {
        ("e2", "duplicate"),
        ("e3", "lost_acked"),
        ("e4", "lost_unacked"),
        ("e5", "unknown_landed"),
        ("x1", "unexpected"),
        ("e7", "out_of_order"),
        ("e8", "aborted_visible"),
        ("partition 0 offset 9", "malformed"),
    }
    assert {(r["reconciliation_id"], r["isolation"]) for r in rows} == {("run-1", "read_committed")}
    dup = next(r for r in rows if r["kind"] == "duplicate")
    assert (dup["partitions"], dup["offsets"]) == ([0, 1], [0, 1])
    t = anomalies.totals(planted)
    assert t == {
        "ledger_events": 8,
        "ledger_acked": 6,
        "distinct_events": 7,
        "records_with_id": 8,
        "delivered_once": 5,
        "duplicate_copies": 1,
        # what tells the kinds whether they have anything to look for
        "duplicated_events": 1,
        "read_more_than_twice": 0,
        "acked_elsewhere": 0,
    }  # e1, e5, e6, e7, e8: one copy each


def test_a_committed_transaction_partly_visible_is_torn(spark, planted):
    """t1 has e1 read and e3 not: e3 is torn (and lost_acked). t2 was read whole; t3 not at all,
    which is a loss but not a torn transaction."""
    txns = spark.createDataFrame(
        [("e1", "0/1"), ("e3", "0/1"), ("e6", "0/2"), ("e7", "0/2"), ("e9", "1/1"), ("e10", "1/1")],
        "event_id string, txn string",
    )
    obs = Observation(planted.records, planted.ledger, "read_committed", transactions=txns)
    [row] = anomalies.torn_transaction(obs).collect()
    assert (row["event_id"], row["kind"], row["copies"], row["partitions"], row["offsets"]) == (
        "e3",
        "torn_transaction",
        0,
        [0],
        [0],
    )
    assert (
        anomalies.torn_transaction(Observation(planted.records, planted.ledger, "read_uncommitted", transactions=txns))
        is None
    )
    assert anomalies.torn_transaction(planted) is None, "no transactions known"


def test_a_torn_transaction_lists_every_position_of_the_events_that_were_read(spark):
    """t1's e1 was read three times, e2 once, e3 never: e3's row holds all four positions, the
    same that e1's duplicate row holds for e1."""
    ledger = spark.createDataFrame([led(e, "acked") for e in ("e1", "e2", "e3")], LEDGER)
    records = spark.createDataFrame([rec("e1", 0, 1), rec("e1", 1, 9), rec("e1", 0, 5), rec("e2", 2, 3)], RECORD)
    txns = spark.createDataFrame([(e, "0/1") for e in ("e1", "e2", "e3")], "event_id string, txn string")
    obs = Observation(records, ledger, "read_committed", transactions=txns)
    [torn] = anomalies.torn_transaction(obs).collect()
    assert (torn["event_id"], torn["copies"], torn["partitions"], torn["offsets"]) == ("e3", 0, [0, 1, 2], [1, 3, 5, 9])
    [dup] = anomalies.duplicate(obs).collect()
    assert (dup["event_id"], dup["copies"], dup["partitions"], dup["offsets"]) == ("e1", 3, [0, 1], [1, 5, 9])


def test_an_acked_position_holding_another_event_is_an_inconsistent_offset(spark):
    """a's ack was at 0/5, which now holds b: the log was rewritten there. c is where it was
    acked; d moved, but nothing took its place; e was read three times, once where acked."""
    ledger = spark.createDataFrame(
        [
            (*led(eid, "acked"), p << anomalies.OFFSET_BITS | o)
            for eid, p, o in (("a", 0, 5), ("b", 0, 6), ("c", 1, 2), ("d", 1, 3), ("e", 2, 5))
        ],
        LEDGER + ", acked_position bigint",
    )
    records = spark.createDataFrame(
        [rec("b", 0, 5), rec("c", 1, 2), rec("d", 1, 7), rec("e", 2, 1), rec("e", 2, 5), rec("e", 2, 9)], RECORD
    )
    rows = anomalies.inconsistent_offset(Observation(records, ledger, "read_uncommitted")).collect()
    assert [(r["event_id"], r["kind"], r["copies"], r["partitions"], r["offsets"]) for r in rows] == [
        ("a", "inconsistent_offset", 0, [0], [5])
    ]
    assert anomalies.inconsistent_offset(Observation(records, ledger.drop("acked_position"), "read_committed")) is None


def test_two_reads_showing_different_records_at_one_position_are_inconsistent_offsets(spark):
    """Both reads hold a at 0/0 and c at 1/0; at 0/1 read_committed shows b where read_uncommitted
    showed x (the log changed between the reads); read_uncommitted alone holds the aborted y at
    0/2, which read_committed skips: no inconsistency. b's ack was recorded at 0/0, where a is, so
    the ledger finds b too: one row, not two."""
    committed = spark.createDataFrame([rec("a", 0, 0), rec("b", 0, 1), rec("c", 1, 0)], RECORD)
    uncommitted = spark.createDataFrame([rec("a", 0, 0), rec("x", 0, 1), rec("y", 0, 2), rec("c", 1, 0)], RECORD)
    ledger = spark.createDataFrame(
        [(*led(eid, "acked"), p << anomalies.OFFSET_BITS | o) for eid, p, o in (("a", 0, 0), ("b", 0, 0), ("c", 1, 0))],
        LEDGER + ", acked_position bigint",
    )
    obs = Observation(committed, ledger.drop("acked_position"), "read_committed", other_read=uncommitted)
    rows = anomalies.inconsistent_offset(obs).collect()
    assert [(r["event_id"], r["kind"], r["copies"], r["partitions"], r["offsets"]) for r in rows] == [
        ("b", "inconsistent_offset", 1, [0], [1])
    ]
    assert [r["event_id"] for r in anomalies.inconsistent_offset(Observation(committed, ledger, "x")).collect()] == [
        "b"
    ], "the ledger's half alone finds b"
    both = anomalies.inconsistent_offset(Observation(committed, ledger, "read_committed", other_read=uncommitted))
    assert [r["event_id"] for r in both.collect()] == ["b"]
    assert anomalies.inconsistent_offset(Observation(committed, ledger.drop("acked_position"), "x")) is None
    same = Observation(
        uncommitted.where("event_id != 'y'"), ledger.drop("acked_position"), "read_committed", other_read=uncommitted
    )
    assert anomalies.inconsistent_offset(same).count() == 0


def test_a_session_that_skips_a_record_or_goes_back_shows_poll_anomalies(spark):
    """Partition 0 holds p0-p9 but nothing at offset 5 (a transaction marker); partition 1, q0-q3.
    Session 1 polls p0-p2, then p4 (p3 skipped), p6 (5 is no record: not a skip), p7-p9, and q0,
    then q2 (q1 skipped), q3; session 2 polls p9, then p8 (backwards). A new session starting
    anywhere is not a skip."""
    topic = spark.createDataFrame(
        [rec(f"p{o}", 0, o) for o in range(10) if o != 5] + [rec(f"q{o}", 1, o) for o in range(4)], RECORD
    )
    log = spark.createDataFrame(
        [
            (1, 1, 0, [0, 1, 2]),
            (1, 1, 1, [0]),
            (1, 2, 0, [4, 6, 7]),
            (1, 2, 1, [2, 3]),
            (1, 3, 0, [8, 9]),
            (2, 1, 0, [9, 8]),
        ],
        "session int, poll_no int, partition int, offsets array<bigint>",
    )
    ledger = spark.createDataFrame([led(f"p{o}", "acked") for o in range(10)], LEDGER)
    obs = Observation(topic, ledger, "read_committed", polls=anomalies.poll_steps(log), polled_topic=topic)
    assert found(anomalies.poll_skip(obs)) == {("p3", "poll_skip", 1), ("q1", "poll_skip", 1)}
    assert found(anomalies.nonmonotonic_poll(obs)) == {("p8", "nonmonotonic_poll", 1)}
    assert anomalies.poll_skip(Observation(topic, ledger, "read_committed")) is None, "no poll log"


def test_read_uncommitted_counts_the_copies_read_committed_does_not_see(spark):
    """e9: two copies, one committed; e10: its one copy committed; e11: acked and read once, as a
    clean event is, yet read_committed does not see it."""
    records = spark.createDataFrame([rec("e9", 0, 1), rec("e9", 0, 3), rec("e10", 0, 4), rec("e11", 0, 5)], RECORD)
    ledger = spark.createDataFrame([led("e9", "acked"), led("e10", "acked"), led("e11", "acked")], LEDGER)
    committed = spark.createDataFrame([("e9", 1), ("e10", 1)], "event_id string, copies int")
    obs = Observation(records, ledger, "read_uncommitted", committed_copies=committed)
    assert found(anomalies.aborted_visible(obs)) == {("e9", "aborted_visible", 1), ("e11", "aborted_visible", 1)}
    assert found(anomalies.duplicate(obs)) == {("e9", "duplicate", 2)}
    assert anomalies.totals(obs)["delivered_once"] == 2


def test_a_sink_applies_an_older_version_over_a_newer_one(spark):
    def applied(eid, apply_no, second, state_applied=True):
        return (eid, "k", 1, at(second), 0, apply_no, None, apply_no, state_applied)

    sink = spark.createDataFrame(
        [
            applied("a", 1, 2),
            applied("b", 2, 1),  # b is older than a: stale
            applied("c", 3, 3),
            applied("d", 4, 1, False),  # d was skipped, not applied
        ],
        SINK,
    )
    ledger = spark.createDataFrame([led(e, "acked") for e in "abcd"], LEDGER)
    obs = Observation(sink, ledger, "read_committed", sink=True)
    assert found(anomalies.stale_overwrite(obs)) == {("b", "stale_overwrite", 1)}
    assert anomalies.stale_overwrite(Observation(sink, ledger, "read_committed")) is None, "topics have no state"


def test_a_clean_observation_has_no_discrepancy(spark):
    records = spark.createDataFrame([rec(f"e{i}", i % 3, i, f"k{i % 3}", i) for i in range(10)], RECORD)
    ledger = spark.createDataFrame([led(f"e{i}", "acked") for i in range(10)], LEDGER)
    obs = Observation(records, ledger, "read_uncommitted")
    assert anomalies.discrepancies(obs, "clean").count() == 0
    assert anomalies.totals(obs)["delivered_once"] == 10


def test_a_platform_runs_ids_are_keyed_by_their_number_and_reported_as_text(spark):
    """With the prefix, `<prefix><n>` is keyed by n alone; any other text, even one that reads
    as the same number, is an id of its own."""
    records = spark.createDataFrame(
        [
            rec("r1-1", 0, 0),
            rec("r1-2", 0, 1),
            rec("r1-2", 1, 0),
            rec("r1-2", 1, 4),  # duplicate: 3 copies, its positions grouped again
            rec("r1-07", 1, 1),  # not the generator's text for 7: unexpected
            rec("r2-4", 2, 0),  # another run's id: unexpected
            rec("r1--3", 2, 1),  # unexpected, and not a negative n
        ],
        RECORD,
    )
    ledger = spark.createDataFrame([led(f"r1-{i}", "acked") for i in (1, 2, 3, 7)], LEDGER)
    obs = Observation(records, ledger, "read_committed", id_prefix="r1-")
    keys = {(r["event_id"], r["n"], r["id_rest"]) for r in obs.records.collect()}
    assert keys == {
        ("r1-1", 1, ""),
        ("r1-2", 2, ""),
        ("r1-07", -1, "r1-07"),
        ("r2-4", -1, "r2-4"),
        ("r1--3", -1, "r1--3"),
    }
    assert {(r["event_id"], r["kind"]) for r in anomalies.discrepancies(obs, "r1").collect()} == {
        ("r1-2", "duplicate"),
        ("r1-3", "lost_acked"),
        ("r1-7", "lost_acked"),
        ("r1-07", "unexpected"),
        ("r2-4", "unexpected"),
        ("r1--3", "unexpected"),
    }
    dup = next(r for r in anomalies.duplicate(obs).collect())
    assert (dup["copies"], dup["partitions"], dup["offsets"]) == (3, [0, 1], [0, 1, 4])


@pytest.mark.parametrize("broadcast_limit", [0, 1_000_000], ids=["grouped", "broadcast"])
def test_first_copies_keep_each_events_lowest_offset_with_its_payload(spark, monkeypatch, broadcast_limit):
    monkeypatch.setattr(anomalies, "BROADCAST_MAX_ROWS", broadcast_limit)
    records = spark.createDataFrame(
        [
            ("r1-1", "k", 1, at(0), 0, 5, b"one"),
            ("r1-2", "k", 2, at(0), 0, 9, b"late copy"),
            ("r1-2", "k", 2, at(0), 1, 3, b"first copy"),
            ("odd", None, None, at(0), 2, 0, b"no number"),
            (None, None, None, at(0), 2, 1, b"malformed"),
        ],
        RECORD,
    )
    ledger = spark.createDataFrame([led("r1-1", "acked"), led("r1-2", "acked")], LEDGER)
    obs = Observation(records, ledger, "read_committed", id_prefix="r1-")
    first = obs.first_copies().select(obs.event_id(), *anomalies.FIRST_COPY).collect()
    assert {(r["event_id"], r["partition"], r["offset"], bytes(r["value"])) for r in first} == {
        ("r1-1", 0, 5, b"one"),
        ("r1-2", 1, 3, b"first copy"),
        ("odd", 2, 0, b"no number"),
    }


@pytest.mark.parametrize("expected_at", [None, 0, 1, 2], ids=["no-hint", "hint-0", "hint-1", "hint-2"])
def test_a_header_field_is_the_first_header_of_its_name(spark, expected_at):
    """With or without the position the platform's producer puts it at."""
    from checker.formats import field

    headers = spark.createDataFrame(
        [
            ([("seq", b"7"), ("event_id", b"r1-1"), ("event_id", b"r1-2")],),
            ([("seq", b"7")],),
            ([],),
            (None,),
            ([("event_id", None)],),
            ([("event_id", b"r1-3"), ("seq", b"7"), ("event_id", b"r1-4")],),
            ([("a", b""), ("b", b""), ("event_id", b"r1-5")],),
        ],
        "headers array<struct<key:string,value:binary>>",
    )
    spec = {"header": "event_id"} | ({"at": expected_at} if expected_at is not None else {})
    read = [r[0] for r in headers.select(field(spec, "string")).collect()]
    assert read == ["r1-1", None, None, None, None, "r1-3", "r1-5"]


def test_the_checker_reads_a_platform_record_as_the_python_readers_do(spark):
    """The value layout's fields, split once; a value with fewer fields is malformed in both."""
    from checker.formats import field
    from checker.sources import _platform_fields
    from delivery_semantics.records.layouts import record_fields
    from delivery_semantics.workload.generator import Generator

    gen = Generator("r20261125t000000_abcdef", 3, 12, 1)
    values = [gen.wire(n, 1795578691086 + n)["value"] for n in range(4)]
    values += [b"r20261125t000000_abcdef-9 4 5 payload with spaces", b"r-1 2 3", b"", None]
    fields = _platform_fields("value")
    df = spark.createDataFrame([(v,) for v in values], "value binary")
    read = df.select(
        field(fields["event_id"], "string"), field(fields["seq"], "bigint"), field(fields["publish_at"], "millis")
    ).collect()
    expected = [record_fields(v, None) for v in values]
    assert [(r[0], r[1], int(r[2].timestamp() * 1000) if r[2] else None) for r in read] == expected
    assert expected[0] == ("r20261125t000000_abcdef-0", 0, 1795578691086)
    assert expected[4] == ("r20261125t000000_abcdef-9", 4, 5) and expected[5:] == [(None, None, None)] * 3


def test_a_reconciliation_releases_its_own_cached_reads_and_no_other_threads(spark):
    import threading

    from checker import cache

    def cached(df) -> bool:
        return df.storageLevel.useMemory

    outside = cache.keep(spark.range(3))
    other_started, mine_released = threading.Event(), threading.Event()
    held = {}

    def other_run():
        with cache.scope():
            held["df"] = cache.keep(spark.range(5))
            other_started.set()
            mine_released.wait(30)
            held["still"] = cached(held["df"])

    t = threading.Thread(target=other_run)
    t.start()
    other_started.wait(30)
    with cache.scope():
        mine = cache.keep(spark.range(4))
        assert cached(mine)
    assert not cached(mine), "released at the end of its scope"
    mine_released.set()
    t.join(30)
    assert held["still"], "another run's cache, side by side, outlives this one's scope"
    assert not cached(held["df"])
    assert cached(outside), "what is cached outside a scope stays"
    outside.unpersist()


OUTCOMES = "n bigint, outcome_no bigint, code int, pos bigint"
ABORTED = "n bigint, aborted_positions array<struct<partition:int,offset:bigint>>, by_coordinator boolean"


@pytest.mark.parametrize("pending", [True, False], ids=["an-event-without-outcome", "every-event-has-one"])
@pytest.mark.parametrize("island_tests", [64, 0], ids=["islands-tested", "events-folded"])
def test_a_ledger_of_outcomes_folded_with_the_copies_equals_the_per_event_ledger_joined(
    spark, monkeypatch, pending, island_tests
):
    """The platform run's path (OutcomeLedger: outcome rows folded into the copies' aggregation)
    gives the same `joined`, kinds and totals as a per-event ledger joined with the copies."""
    monkeypatch.setattr(anomalies, "MAX_ISLAND_TESTS", island_tests)
    code = anomalies.STATUS_CODES

    def pos(p, o):
        return (p << anomalies.OFFSET_BITS) | o

    records = spark.createDataFrame(
        [
            rec("r1-1", 0, 0),
            rec("r1-2", 0, 1),
            rec("r1-2", 1, 0),  # duplicate
            rec("r1-5", 1, 1),  # unknown, yet landed
            rec("r1-6", 1, 2),
            rec("r1-7", 2, 0),
            rec("r1-10", 2, 4),  # an aborted copy's event, also written again
            rec("r1-11", 2, 6),  # acked at offset 5, read at 6
            rec("r1-12", 2, 5),  # at r1-11's acked position
            rec("r1-13", 0, 12),
            rec("r1-50", 0, 9),  # outcome rows, but never recorded: unexpected
            rec("x1", 0, 10),  # not numbered: unexpected
            rec(None, 0, 11),  # malformed
        ],
        RECORD,
    )
    o = [
        (1, 1, code["acked"], pos(0, 0)),
        (2, 1, code["acked"], pos(0, 1)),
        (3, 1, code["acked"], pos(1, 7)),  # lost acked
        (4, 1, code["failed"], None),  # lost unacked
        (5, 2, code["unknown"], None),
        (6, 1, code["written"], pos(1, 2)),
        (6, 2, code["acked"], pos(1, 2)),  # acked wins over the earlier written
        (7, 3, code["failed"], None),
        (7, 2, code["sent"], None),  # sent wins over a later failure
        (8, 1, code["failed"], None),
        (8, 2, code["unknown"], None),  # the latest wins: unknown
        (10, 1, code["aborted"], pos(2, 3)),
        (10, 2, code["acked"], pos(2, 4)),
        (11, 1, code["acked"], pos(2, 5)),
        (12, 1, code["acked"], pos(2, 5)),
        (13, 1, code["acked"], pos(0, 12)),
        (13, 2, code["failed"], None),  # acked wins over a later failure
        (50, 1, code["acked"], pos(0, 9)),
    ]
    islands = ((1, 14),) if pending else ((1, 9), (10, 14))  # 9: recorded, no outcome, not read
    aborted = spark.createDataFrame([(10, [{"partition": 2, "offset": 3}], False)], ABORTED)
    recorded = [n for lo, hi in islands for n in range(lo, hi)]
    folded_ledger = anomalies.OutcomeLedger(
        outcomes=spark.createDataFrame(o, OUTCOMES),
        islands=islands,
        events=spark.createDataFrame([(n,) for n in recorded], "n bigint"),
        aborted=aborted,
    )
    statuses = {1: "acked", 2: "acked", 3: "acked", 4: "failed", 5: "unknown", 6: "acked", 7: "sent"}
    statuses |= {8: "unknown", 9: "pending", 10: "acked", 11: "acked", 12: "acked", 13: "acked"}
    acked_at = {n: p for n, _, c, p in o if c == code["acked"]}
    per_event = spark.createDataFrame(
        [
            (
                f"r1-{n}",
                None,
                None,
                at(0),
                statuses[n],
                [{"partition": 2, "offset": 3}] if n == 10 else [],
                acked_at.get(n),
            )
            for n in recorded
        ],
        LEDGER + ", acked_position bigint",
    )

    def everything(ledger):
        obs = Observation(records, ledger, "read_committed", id_prefix="r1-")
        joined = sorted(repr(r.asDict(recursive=True)) for r in obs.joined.collect())
        found_rows = sorted(repr(tuple(r)) for r in anomalies.discrepancies(obs, "r1").collect())
        return joined, found_rows, anomalies.totals(obs)

    joined, found_rows, totals = everything(folded_ledger)
    assert (joined, found_rows, totals) == everything(per_event)
    kinds = {
        (r["event_id"], r["kind"])
        for r in anomalies.discrepancies(
            Observation(records, folded_ledger, "read_committed", id_prefix="r1-"), "r1"
        ).collect()
    }
    assert kinds >= {
        ("r1-2", "duplicate"),
        ("r1-3", "lost_acked"),
        ("r1-4", "lost_unacked"),
        ("r1-5", "unknown_landed"),
        ("r1-8", "lost_unacked"),
        ("r1-50", "unexpected"),
        ("x1", "unexpected"),
        ("r1-11", "inconsistent_offset"),
    }
    assert (("r1-9", "lost_unacked") in kinds) == pending
    assert totals["ledger_events"] == len(recorded)


EVENT_OUTCOMES = "n bigint, outcome_no bigint, code int, partition int, offset bigint, by_coordinator boolean"


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "no-transactions"])
def test_a_transaction_the_coordinator_aborted_names_the_cause_of_exactly_its_lost_events(spark, transactional):
    """coordinator_aborted: of the lost_unacked events, exactly those whose latest attempt was a
    transaction the coordinator aborted; an abort by the application, one sent again and acked, one
    read all the same, a later failure, and a run that aborted nothing name none."""
    code = anomalies.STATUS_CODES

    def pos(p, o):
        return (p << anomalies.OFFSET_BITS) | o

    # (n, outcome_no, status, partition, offset, by the coordinator), the per-event rows
    aborts = [
        (2, 1, "aborted", 0, 2, True),  # lost, the coordinator aborted it: named
        (3, 1, "aborted", 0, 3, False),  # lost, the application aborted it
        (4, 1, "aborted", 0, 4, True),  # sent again below and acked
        (5, 1, "aborted", 1, 5, True),
        (5, 2, "aborted", 1, 6, False),  # the latest abort, the application's
        (6, 1, "aborted", 1, 7, False),
        (6, 2, "aborted", 1, 8, True),  # the latest abort, the coordinator's: named
        (7, 1, "aborted", 2, 9, True),  # read all the same (unknown_landed, not lost)
        (9, 1, "aborted", 2, 11, True),
        (9, 2, "failed", None, None, False),  # failed after: its last attempt no transaction's
    ]
    singles = spark.createDataFrame([(n, o, code[st], p, off, c) for n, o, st, p, off, c in aborts], EVENT_OUTCOMES)
    batch = [(1, 1, code["acked"], pos(0, 1)), (4, 2, code["acked"], pos(0, 40))]
    outcomes = spark.createDataFrame(batch, OUTCOMES).unionByName(
        singles.select("n", "outcome_no", "code", anomalies.position(F.col("partition"), F.col("offset")).alias("pos"))
    )
    outcomes = outcomes.unionByName(spark.createDataFrame([(8, 1, code["failed"], None)], OUTCOMES))
    read = [rec("r1-1", 0, 1), rec("r1-4", 0, 40), rec("r1-7", 2, 9)]
    ledger = anomalies.OutcomeLedger(
        outcomes=outcomes,
        islands=((1, 10),),
        events=spark.createDataFrame([(n,) for n in range(1, 10)], "n bigint"),
        aborted=anomalies.aborted_events(singles),
        transactional=transactional,
    )
    obs = Observation(spark.createDataFrame(read, RECORD), ledger, "read_committed", id_prefix="r1-")
    kinds = {(r["event_id"], r["kind"]) for r in anomalies.discrepancies(obs, "r1").collect()}
    lost = {f"r1-{n}" for n in (2, 3, 5, 6, 8, 9)}
    assert {e for e, k in kinds if k == "lost_unacked"} == lost
    assert {e for e, k in kinds if k == "coordinator_aborted"} == {"r1-2", "r1-6"}
    assert ("r1-7", "unknown_landed") in kinds
    disc = anomalies.discrepancies(obs, "r1")
    counted = results.counts(disc, anomalies.totals(obs), obs)
    assert counted["coordinator_aborted"] == (2 if transactional else None)
    assert counted["lost_unacked"] == 6, "named within lost_unacked, not counted as a second loss"

    # A run that aborted nothing: none named, and counted 0 where transactions could have been.
    clean = anomalies.OutcomeLedger(
        outcomes=spark.createDataFrame([(1, 1, code["acked"], pos(0, 1))], OUTCOMES),
        islands=((1, 2),),
        events=spark.createDataFrame([(1,)], "n bigint"),
        aborted=None,
        transactional=transactional,
    )
    obs = Observation(spark.createDataFrame([rec("r1-1", 0, 1)], RECORD), clean, "read_committed", id_prefix="r1-")
    assert anomalies.coordinator_aborted(obs) is None
    counted = results.counts(anomalies.discrepancies(obs, "r1"), anomalies.totals(obs), obs)
    assert counted["coordinator_aborted"] == (0 if transactional else None)


@pytest.mark.parametrize(
    "change",
    [None, "duplicate", "overwritten", "lost", "unexpected", "malformed", "acked_twice", "written_not_acked"],
)
def test_records_read_exactly_as_acked_need_no_fold_and_any_difference_is_folded(spark, monkeypatch, change):
    """A run whose records are its acked events, once each, where they were acked, is known clean
    from two aggregations; the totals are the fold's. Any one difference goes through the fold,
    which reports it."""
    code = anomalies.STATUS_CODES

    def pos(p, o):
        return (p << anomalies.OFFSET_BITS) | o

    events = range(1, 21)
    # A transaction's events: written, then acked at the same positions.
    outcomes = [(n, 1, code["written"], pos(n % 3, n)) for n in events] + [
        (n, 2, code["acked"], pos(n % 3, n)) for n in events
    ]
    read = [rec(f"r1-{n}", n % 3, n) for n in events]
    expected = None
    if change == "duplicate":
        read.append(rec("r1-4", 1, 40))
        expected = ("r1-4", "duplicate")
    elif change == "overwritten":  # r1-6 read again where r1-5 was acked
        read[4] = rec("r1-6", 2, 5)
        expected = ("r1-5", "inconsistent_offset")
    elif change == "lost":
        del read[6]
        expected = ("r1-7", "lost_acked")
    elif change == "unexpected":
        read.append(rec("r1-99", 0, 42))
        expected = ("r1-99", "unexpected")
    elif change == "malformed":
        read.append(rec(None, 0, 43))
        expected = ("partition 0 offset 43", "malformed")
    elif change == "acked_twice":  # no kind: each record is where one of its acks says
        outcomes.append((8, 3, code["acked"], pos(2, 44)))
    elif change == "written_not_acked":
        outcomes = [o for o in outcomes if not (o[0] == 9 and o[2] == code["acked"])]
        expected = ("r1-9", "unknown_landed")
    ledger = anomalies.OutcomeLedger(
        outcomes=spark.createDataFrame(outcomes, OUTCOMES),
        islands=((1, 21),),
        events=spark.createDataFrame([(n,) for n in events], "n bigint"),
        aborted=None,
    )
    folds, notable = [], Observation._notable
    monkeypatch.setattr(Observation, "_notable", lambda self, rows: folds.append(1) or notable(self, rows))
    obs = Observation(spark.createDataFrame(read, RECORD), ledger, "read_committed", id_prefix="r1-")
    found = {(r["event_id"], r["kind"]) for r in anomalies.discrepancies(obs, "r1").collect()}
    totals = anomalies.totals(obs)
    assert bool(folds) == (change is not None)
    of_joined = (
        anomalies.duplicate,
        anomalies.lost_acked,
        anomalies.lost_unacked,
        anomalies.unknown_landed,
        anomalies.unexpected,
        anomalies.malformed,
    )
    # Read as acked, the kinds that read only `joined` or the records without an id are not planned.
    assert all((kind(obs) is None) == (change is None) for kind in of_joined)
    if change is None:
        assert found == set() and obs.joined.count() == 0
        assert totals == {
            "ledger_events": 20,
            "ledger_acked": 20,
            "distinct_events": 20,
            "records_with_id": 20,
            "delivered_once": 20,
            "duplicate_copies": 0,
            "duplicated_events": 0,
            "read_more_than_twice": 0,
            "acked_elsewhere": 0,
        }
        monkeypatch.setattr(Observation, "_read_as_acked", lambda self: False)
        folded = Observation(spark.createDataFrame(read, RECORD), ledger, "read_committed", id_prefix="r1-")
        assert anomalies.totals(folded) == totals, "the fold counts the same"
    else:
        assert expected in found if expected else found == set()
