"""A continuous audit's window, classified by checker/windows.py on rows made with
createDataFrame: the second window of an audit with a 10-minute grace and a sink table, with one
event of every kind planted in each stage, and the state the first window left (ids it saw, a
loss it declared, records it left pending)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from checker import windows
from checker.windows import AuditWindow
from delivery_semantics import catalog
from delivery_semantics.catalog import OUTBOX_SINK, OUTBOX_TOPIC, TOPIC_SINK

T1, T2 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC), datetime(2026, 11, 23, 13, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)


def at(h: int, m: int) -> datetime:
    return datetime(2026, 11, 23, h, m, tzinfo=UTC)


RECORDS = [  # event_id, key, seq, partition, offset, record_at
    ("a", "ka", 1, 0, 0, at(12, 10)),
    ("d", "kd", 1, 0, 1, at(12, 20)),
    ("d", "kd", 1, 1, 0, at(12, 20)),  # d: twice in the window
    ("s", "ks", 1, 1, 1, at(12, 30)),  # s: seen in the first window already
    ("l", "kl", 1, 1, 2, at(12, 40)),  # l: declared lost by the first window
    ("u", "ku", 1, 1, 3, at(12, 5)),  # u: no outbox row, past the grace
    ("p", "kp", 1, 1, 4, at(12, 55)),  # p: no outbox row yet, within the grace
    (None, "km", 1, 0, 9, at(12, 11)),  # no event id
    ("o1", "ko", 2, 2, 0, at(12, 1)),
    ("o2", "ko", 1, 2, 1, at(12, 1)),  # o2: a lower version after a higher one
    ("k", "kk", 1, 2, 2, at(12, 33)),  # k: its outbox row says unknown
    ("v4", "kv", 4, 2, 3, at(12, 24)),  # v4: version 5 of its key was read in the first window
    ("s2", "ks", 4, 2, 4, at(12, 26)),  # s2: a newer version of s's key than the first window read
]
OUTBOX = [  # event_id, status, created_at: rows created in [T1 - 2g, T2)
    ("e", "acked", at(11, 45)),  # before this window's due range; applied in the first window
    ("a", "acked", at(12, 5)),
    ("d", "acked", at(12, 19)),
    ("x", "acked", at(12, 30)),  # never published
    ("f", "unknown", at(12, 31)),  # never published, and never acked
    ("k", "unknown", at(12, 32)),
    ("o1", "acked", at(12, 0)),
    ("o2", "acked", at(12, 0)),
    ("n", "acked", at(12, 55)),  # within the grace, not seen yet
    ("c1", "acked", at(12, 52)),  # the outbox row of a record the first window left pending
    ("v4", "acked", at(12, 20)),
    ("s2", "acked", at(12, 25)),
]
SINK = [  # event_id, key, version, applied_at: rows applied in [T1, T2)
    ("a", "ka", 1, at(12, 15)),
    ("d", "kd", 1, at(12, 21)),
    ("d", "kd", 1, at(12, 22)),  # applied twice
    ("l", "kl", 1, at(12, 45)),
    ("u", "ku", 1, at(12, 6)),
    ("o1", "ko", 2, at(12, 2)),
    ("o2", "ko", 1, at(12, 3)),  # version 1 over version 2
    ("k", "kk", 1, at(12, 34)),
    ("z", "kz", 1, at(12, 36)),  # never in the topic
    ("r2", "kr", 1, at(12, 37)),  # declared lost from the sink by the first window
    ("w", "kw", 4, at(12, 38)),  # version 4 after version 5 was applied in the first window
    ("v4", "kv", 4, at(12, 25)),
    ("s2", "ks", 4, at(12, 27)),
]


@pytest.fixture(scope="module")
def window(spark):
    df = spark.createDataFrame
    return AuditWindow(
        end=T2,
        start=T1,
        grace=GRACE,
        isolation="read_committed",
        records=df(
            RECORDS, "event_id string, key string, seq bigint, partition int, offset bigint, record_at timestamp"
        ),
        outbox=df(OUTBOX, "event_id string, status string, created_at timestamp"),
        prior=df(
            [(i, "topic") for i in ("s", "c1", "c2", "q", "r2", "w")] + [("e", "sink")],
            "event_id string, side string",
        ),
        open_losses=df(
            [
                ("l", OUTBOX_TOPIC, T1, at(11, 30)),
                ("r2", TOPIC_SINK, T1, at(11, 51)),
                ("r2", OUTBOX_SINK, T1, at(11, 40)),
            ],
            "event_id string, stage string, lost_in_window timestamp, occurred_at timestamp",
        ),
        carried=df(
            [("c1", at(11, 55), 1, [0], [7]), ("c2", at(11, 56), 1, [0], [8])],
            "event_id string, first_at timestamp, copies int, partitions array<int>, offsets array<bigint>",
        ),
        sink=df(SINK, "event_id string, key string, version bigint, applied_at timestamp"),
        # The first window read up to version 3 of ks, and s's copy here reads version 1: a copy
        # after the first is not out of order. It read version 5 of kv.
        key_versions=df(
            [("sink", "kw", 5), ("topic", "ks", 3), ("topic", "kv", 5)], "side string, key string, max_version bigint"
        ),
        topic_due_for_sink=df([("q", at(11, 52))], "event_id string, first_at timestamp"),
    )


@pytest.fixture(scope="module")
def found(window):
    return windows.discrepancies(window).collect()


def test_every_planted_kind_is_found_in_its_stage_and_nothing_else(found):
    got = {}
    for r in found:
        got.setdefault((r["stage"], r["kind"]), {})[r["event_id"]] = r["copies"]
    # one of every kind the catalog says a window reports, in each stage it reports it in
    assert set(got) == set(catalog.window_columns().values())
    malformed = got.pop((OUTBOX_TOPIC, "malformed"))
    assert len(malformed) == 1
    assert got == {
        (OUTBOX_TOPIC, "duplicate"): {"d": 2, "s": 1},
        (OUTBOX_TOPIC, "late"): {"l": 1},
        (OUTBOX_TOPIC, "lost_acked"): {"x": 0},
        (OUTBOX_TOPIC, "lost_unacked"): {"f": 0},
        (OUTBOX_TOPIC, "unknown_landed"): {"k": 1},
        (OUTBOX_TOPIC, "unexpected"): {"u": 1, "c2": 1},
        (OUTBOX_TOPIC, "out_of_order"): {"o2": 1, "v4": 1},
        (TOPIC_SINK, "duplicate"): {"d": 2},
        (TOPIC_SINK, "stale_overwrite"): {"o2": 1, "w": 1},
        (TOPIC_SINK, "lost"): {"q": 0},
        (TOPIC_SINK, "unexpected"): {"z": 1},
        (TOPIC_SINK, "late"): {"r2": 1},
        (OUTBOX_SINK, "lost"): {"x": 0},
        (OUTBOX_SINK, "late"): {"r2": 1},
    }


def test_late_copies_carry_their_delay_and_the_window_of_the_loss(found):
    late = {(r["stage"], r["event_id"]): (r["delay_ms"], r["lost_in_window"]) for r in found if r["kind"] == "late"}
    minutes = 60_000
    assert {k: v[0] for k, v in late.items()} == {
        (OUTBOX_TOPIC, "l"): 70 * minutes,  # outbox row 11:30, record 12:40
        (TOPIC_SINK, "r2"): 46 * minutes,  # record 11:51, applied 12:37
        (OUTBOX_SINK, "r2"): 57 * minutes,  # outbox row 11:40, applied 12:37
    }
    assert {v[1].replace(tzinfo=UTC) for v in late.values()} == {T1}


def test_what_the_window_leaves_for_the_next(window):
    assert [r["event_id"] for r in window.pending().collect()] == ["p"]
    seen = {(r["side"], r["event_id"]): r["copies"] for r in window.sightings().collect()}
    assert {e for s, e in seen if s == "topic"} == {"a", "d", "s", "l", "u", "p", "o1", "o2", "k", "v4", "s2"}
    assert {e for s, e in seen if s == "sink"} == {"a", "d", "l", "u", "o1", "o2", "k", "z", "r2", "w", "v4", "s2"}
    assert seen[("topic", "d")] == seen[("sink", "d")] == 2


def test_the_window_totals(window):
    assert window.totals() == {
        "records_read": len(RECORDS),
        "outbox_due": 9,  # a, d, x, f, k, o1, o2, v4, s2 were created in [11:50, 12:50)
        "delivered": 7,
        "duplicate_copies": 2,  # d's second copy, and s's copy
        "pending_outbox": 1,  # n
        "pending_records": 1,  # p
        "beyond_horizon": 0,  # no horizon
        "sink_rows": len(SINK),
    }


def test_the_first_window_reads_everything_before_its_end(spark):
    """No earlier window: every outbox row past the grace is due, and nothing was seen before."""
    df = spark.createDataFrame
    empty_ids = df([], "event_id string, side string")
    w = AuditWindow(
        end=T1,
        start=None,
        grace=GRACE,
        isolation="read_committed",
        records=df(
            [("a", "k", 1, 0, 0, at(11, 0))],
            "event_id string, key string, seq bigint, partition int, offset bigint, record_at timestamp",
        ),
        outbox=df(
            [("a", "acked", at(10, 0)), ("b", "acked", at(3, 0))],
            "event_id string, status string, created_at timestamp",
        ),
        prior=empty_ids,
        open_losses=df([], "event_id string, stage string, lost_in_window timestamp, occurred_at timestamp"),
        carried=df([], "event_id string, first_at timestamp, copies int, partitions array<int>, offsets array<bigint>"),
    )
    got = {(r["kind"], r["event_id"]) for r in windows.discrepancies(w).collect()}
    assert got == {("lost_acked", "b")}
    assert w.totals()["outbox_due"] == 2


def test_a_record_older_than_the_horizon_with_no_outbox_row_is_counted_not_reported(spark):
    """With a one-hour horizon, the window ending at 13:00 remembers sightings back to 12:00. A
    record stamped 11:00 with no outbox row may be a copy of an event seen and forgotten: it is
    beyond the horizon, neither unexpected nor pending. A copy of an event seen within the horizon
    is still a duplicate, and a new record past the grace with no outbox row still unexpected."""
    df = spark.createDataFrame
    w = AuditWindow(
        end=T2,
        start=T1,
        grace=GRACE,
        isolation="read_committed",
        records=df(
            [
                ("old", "k1", 1, 0, 0, at(11, 0)),
                ("s", "k2", 1, 0, 1, at(12, 10)),
                ("u", "k3", 1, 0, 2, at(12, 35)),
                ("a", "k4", 1, 0, 3, at(12, 40)),
            ],
            "event_id string, key string, seq bigint, partition int, offset bigint, record_at timestamp",
        ),
        outbox=df([("a", "acked", at(12, 39))], "event_id string, status string, created_at timestamp"),
        prior=df([("s", "topic")], "event_id string, side string"),
        open_losses=df([], "event_id string, stage string, lost_in_window timestamp, occurred_at timestamp"),
        carried=df([], "event_id string, first_at timestamp, copies int, partitions array<int>, offsets array<bigint>"),
        horizon=timedelta(hours=1),
    )
    got = {(r["kind"], r["event_id"]) for r in windows.discrepancies(w).collect()}
    assert got == {("duplicate", "s"), ("unexpected", "u")}
    assert w.totals()["beyond_horizon"] == 1
    assert [r["event_id"] for r in w.pending().collect()] == []
