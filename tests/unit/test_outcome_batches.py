"""The producer's records, and the ledger's batch rows: clean outcomes as event-number ranges with
positions in n order, every other outcome a row of its own (sql/V015)."""

import gc

import pytest

from delivery_semantics.history.ledger import Outcome, Reports, _array
from delivery_semantics.history.ledger import outcome_batches as batches_of
from delivery_semantics.records import layouts
from delivery_semantics.records.layouts import record_fields, with_payload
from delivery_semantics.workload.client import few_collections
from delivery_semantics.workload.generator import Generator


def outcome_batches(outcomes: list[Outcome]):
    return batches_of(Reports("r", outcomes))


def acked(n: int, partition: int, offset: int, txn_no: int | None = None) -> Outcome:
    return Outcome(f"r-{n}", "acked", partition, offset, 100 + n, txn_no, n=n)


def test_reports_in_partition_order_become_ranges_with_positions_in_n_order():
    reports = [acked(n, n % 2, 1000 + n) for n in (1, 3, 5, 0, 2, 4, 8, 9)]  # 6 and 7 not reported
    [b], singles = outcome_batches(reports)
    assert singles == []
    assert (b.status, b.txn_no, b.n_lo, b.n_hi) == ("acked", None, [0, 8], [6, 10])
    assert b.offsets == [1000, 1001, 1002, 1003, 1004, 1005, 1008, 1009]
    assert b.partitions == [0, 1, 0, 1, 0, 1, 0, 1]
    assert b.latencies_us == [100, 101, 102, 103, 104, 105, 108, 109]


def test_failures_unknowns_and_aborts_each_get_a_row_of_their_own():
    failed = Outcome("r-2", "failed", None, None, 5, error="MSG_TIMED_OUT", n=2)
    unknown = Outcome("r-3", "unknown", None, None, 5, error="REQUEST_TIMED_OUT", n=3)
    aborted = Outcome("r-4", "aborted", 0, 7, 5, 9, n=4)
    batches, singles = outcome_batches([acked(0, 0, 0), failed, acked(1, 0, 1), unknown, aborted])
    assert [(b.n_lo, b.n_hi) for b in batches] == [([0], [2])]
    assert singles == [failed, unknown, aborted]


def test_one_batch_per_status_and_transaction():
    written = [Outcome(f"r-{n}", "written", 0, n, 1, 5, n=n) for n in range(3)]
    commit = [acked(n, 0, n, txn_no=5) for n in range(3)]
    sent = [Outcome(f"r-{n}", "sent", 1, None, 1, n=n) for n in (3, 4)]
    batches, singles = outcome_batches(written + commit + sent)
    assert [(b.status, b.txn_no, b.n_lo, b.n_hi) for b in batches] == [
        ("written", 5, [0], [3]),
        ("acked", 5, [0], [3]),
        ("sent", None, [3], [5]),
    ]
    assert batches[2].offsets == [None, None] and _array(batches[2].offsets) == "{NULL,NULL}"
    assert singles == []


def test_an_event_reported_twice_keeps_both_reports():
    twice = acked(1, 0, 11)
    batches, singles = outcome_batches([acked(0, 0, 10), acked(1, 0, 12), twice])
    assert (batches[0].n_lo, batches[0].n_hi, len(batches[0].offsets)) == ([0], [2], 2)
    assert len(singles) == 1 and singles[0] == Outcome("r-1", "acked", 0, 11, 101, n=1)


def test_array_literals_are_what_copy_reads():
    assert _array([3, None, 12]) == "{3,NULL,12}"
    assert _array([7]) == "{7}" and _array((1, 2)) == "{1,2}"


def test_an_outcome_without_an_event_number_is_a_row_of_its_own():
    hand_made = Outcome("r-7", "acked", 0, 3)
    assert outcome_batches([hand_made]) == ([], [hand_made])


def test_reports_give_every_outcome_back_one_by_one():
    outcomes = [acked(0, 0, 10), Outcome("r-1", "failed", None, None, 5, error="MSG_TIMED_OUT", n=1)]
    reports = Reports("r", outcomes)
    assert len(reports) == 2 and list(reports.outcomes()) == outcomes


def test_the_producers_records_are_the_generators_events():
    """The per-record path (wire) builds the same bytes as the Event the ledger and checker derive,
    every reader finds the event's fields in them, and a report finds its event number."""
    gen = Generator("r20261124t000000_abcdef", keys=7, payload_bytes=50, seed=3)
    [records] = gen.batches(40, 45, 10)
    assert [n for n, _ in records] == [40, 41, 42, 43, 44]
    for n, at in records:
        e = gen.event(n, at)
        record = gen.wire(n, at)
        assert record == {"value": e.value(), "key": e.key.encode()}
        assert record_fields(record["value"], None) == (e.event_id, e.seq, at)
        assert record["value"].endswith(b" " + e.payload) and gen.n_of(record["value"]) == n
    assert record_fields(b"no fields here", []) == (None, None, None)
    # Runs recorded before the value layout carry their fields in headers.
    old = [("event_id", b"r-3"), ("seq", b"1"), ("publish_at", b"99"), ("run_id", b"r")]
    assert record_fields(b"payload with spaces in it", old) == ("r-3", 1, 99)
    assert record_fields(b"x", [("event_id", None)]) == (None, None, None)


def test_a_copy_transforms_the_payload_and_keeps_the_event_fields():
    value = Generator("r20261124t000000_abcdef", 2, 20, 0).wire(9, 1000)["value"]
    copied = with_payload(value, bytes.upper)
    assert record_fields(copied, None) == record_fields(value, None)
    assert copied.split(b" ")[-1] == value.split(b" ")[-1].upper() != value.split(b" ")[-1]


def test_each_producer_of_a_run_writes_keys_of_its_own():
    """Two producers never write one key, so each key has one writer and an order to keep."""
    first, second = (Generator("r20261124t000000_abcdef", 4, 0, 0, key_base=base) for base in (0, 4))
    assert {first.event(n, 0).key for n in range(100)} == {"k0", "k1", "k2", "k3"}
    assert {second.event(n, 0).key for n in range(100, 200)} == {"k4", "k5", "k6", "k7"}
    assert (second.wire(101, 0)["key"], second.event(101, 0).seq) == (b"k5", 25)
    with pytest.raises(ValueError, match="key base"):
        Generator("r20261124t000000_abcdef", 4, 0, 0, key_base=-1)


def test_a_committed_transaction_is_acked_by_reference_to_its_written_row():
    reports = Reports("r")
    reports.commit(5, [(n, 0, 10 + n, 7) for n in range(3)])
    batches, singles = batches_of(reports)
    assert (batches, singles) == ([], []), "the producer sends nothing: the ledger copies the written row"
    assert reports.committed == {5: [(0, 0, 10, 7), (1, 0, 11, 7), (2, 0, 12, 7)]}
    assert len(reports) == 3
    assert [(o.status, o.txn_no, o.offset) for o in reports.outcomes()] == [
        ("acked", 5, 10),
        ("acked", 5, 11),
        ("acked", 5, 12),
    ]
    twice = Reports("r")
    twice.commit(6, [(0, 0, 10, 7), (0, 1, 3, 7)])
    assert twice.committed == {} and len(batches_of(twice)[0]) == 1, "not one batch row: sent again, as before"


def test_a_load_collects_garbage_less_often_and_gives_the_process_back_its_settings_even_when_it_fails():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), few_collections():
        assert gc.get_threshold()[0] == 50_000 and gc.get_freeze_count() > 0
        raise RuntimeError("the load failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_the_avro_layout_is_what_fastavro_reads_with_the_platform_schema():
    import io
    import json

    import fastavro

    gen = Generator("r20261126t000000_abcdef", 4, 30, 7, key_base=8, layout=layouts.AVRO_LAYOUT)
    schema = fastavro.parse_schema(json.loads(layouts.AVRO_SCHEMA))
    for n, at in ((0, 1), (5, 1_795_684_594_000), (123_456, 2**40)):
        value = gen.wire(n, at)["value"]
        e = gen.event(n, at)
        assert value[:5] == b"\x00" + layouts.AVRO_SCHEMA_ID.to_bytes(4, "big")
        got = fastavro.schemaless_reader(io.BytesIO(value[5:]), schema)
        assert (got["event_id"], got["seq"], got["payload"]) == (e.event_id, e.seq, e.payload)
        assert int(got["publish_at"].timestamp() * 1000) == at
        assert gen.n_of(value) == n and record_fields(value, None) == (e.event_id, e.seq, at)
        copied = with_payload(value, bytes.upper)
        assert record_fields(copied, None) == record_fields(value, None) and copied.endswith(e.payload.upper())
    assert record_fields(gen.wire(1, 1)["value"][:-3], None) == (None, None, None), "truncated: no fields"
