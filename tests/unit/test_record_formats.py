"""Record formats, decoded by the checker's own code in local Spark: each planted case (two schema
versions, an unknown schema id, truncated bytes, bytes not in the wire format) gives exactly the
fields expected, and a record that does not decode gives none, never an error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from delivery_semantics.audit import audits, schemas
from delivery_semantics.records.wire import AvroWriter, frame

# The schema files the example audits use (audits/schemas/), copied beside each test's audit file.
HERE = Path(__file__).resolve().parents[2] / "audits" / "schemas"
T0 = 1_764_000_000_000  # epoch millis


def audit_file(tmp_path: Path, record: dict) -> audits.Audit:
    shutil.copytree(HERE, tmp_path / "schemas")
    spec = {
        "topic": "orders",
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db"},
        "record": record,
        "outbox": {"table": "outbox", "columns": {"event_id": "id"}},
    }
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump(spec))
    return audits.load(tmp_path / "orders.yaml")


def decoded(spark, audit: audits.Audit, rows: list[tuple[bytes | None, bytes | None]]) -> list[dict]:
    from checker import formats

    fmt = formats.RecordFormat.of(audit.record, schemas.load(audit))
    specs = [audit.record.get(k) for k in ("event_id", "key", "seq", "publish_at")]
    df = spark.createDataFrame(rows, "key binary, value binary")
    out = fmt.decode(df, specs).select(
        formats.field(specs[0], "string").alias("event_id"),
        formats.field(specs[1], "string").alias("key") if specs[1] else formats.F.lit(None).alias("key"),
        formats.field(specs[2], "bigint").alias("seq") if specs[2] else formats.F.lit(None).alias("seq"),
        formats.field(specs[3], "millis").alias("publish_at") if specs[3] else formats.F.lit(None).alias("publish_at"),
    )
    return [r.asDict() for r in out.collect()]


AVRO_RECORD = {
    "format": "avro",
    "schemas": {"1": "schemas/order_event-v1.avsc", "2": "schemas/order_event-v2.avsc"},
    "key_format": "avro",
    "key_schemas": {"7": "schemas/order_key.avsc"},
    "event_id": {"field": "order.id"},
    "key": {"key_field": "customer"},
    "seq": {"field": "version"},
    "publish_at": {"field": "created_at"},
}


def test_avro_records_decode_with_the_schema_of_their_own_id(spark, tmp_path):
    from datetime import UTC, datetime

    audit = audit_file(tmp_path, AVRO_RECORD)
    v1 = AvroWriter(1, (HERE / "order_event-v1.avsc").read_text())
    v2 = AvroWriter(2, (HERE / "order_event-v2.avsc").read_text())
    key = AvroWriter(7, (HERE / "order_key.avsc").read_text())
    good_v1 = v1({"order": {"id": "o-1"}, "version": 3, "created_at": T0})
    rows = [
        (key({"customer": "c-1"}), good_v1),
        (
            key({"customer": "c-2"}),
            v2({"order": {"id": "o-2", "total_cents": 5}, "note": "x", "version": 4, "created_at": T0 + 1}),
        ),
        (key({"customer": "c-3"}), frame(99, good_v1[5:])),  # a schema id with no schema
        (key({"customer": "c-4"}), good_v1[:8]),  # truncated
        (key({"customer": "c-5"}), json.dumps({"order": {"id": "o-5"}}).encode()),  # not the wire format
        (None, None),  # a tombstone
    ]
    got = decoded(spark, audit, rows)
    assert [r["event_id"] for r in got] == ["o-1", "o-2", None, None, None, None]
    assert [r["key"] for r in got] == ["c-1", "c-2", "c-3", "c-4", "c-5", None]
    assert [r["seq"] for r in got[:2]] == [3, 4]
    assert [r["publish_at"] for r in got[:2]] == [
        datetime.fromtimestamp(T0 / 1000, UTC).replace(tzinfo=None),
        datetime.fromtimestamp((T0 + 1) / 1000, UTC).replace(tzinfo=None),
    ]


def test_protobuf_records_decode_by_schema_id_and_message_index(spark, tmp_path):
    record = {
        "format": "protobuf",
        "schemas": {"3": "schemas/order_event.proto"},
        "event_id": {"field": "order.id"},
        "seq": {"field": "version"},
        "publish_at": {"field": "created_at"},
    }
    audit = audit_file(tmp_path, record)
    (ws,) = schemas.load(audit)["value"].values()
    note, event = schemas.message_classes(ws)
    msg = event(version=9)
    msg.order.id = "o-1"
    msg.created_at.FromMilliseconds(T0)
    payload = msg.SerializeToString()
    rows = [
        (b"c-1", frame(3, payload, (1,))),
        (b"c-2", frame(3, note(note="o-2").SerializeToString(), (0,))),  # another message: no order.id
        (b"c-3", frame(4, payload, (1,))),  # unknown schema id
        (b"c-4", frame(3, payload, (1,))[:-4]),  # truncated
        (b"c-5", frame(3, payload, (5,))),  # no such message index
    ]
    got = decoded(spark, audit, rows)
    assert [r["event_id"] for r in got] == ["o-1", None, None, None, None]
    assert got[0]["seq"] == 9
    assert int(got[0]["publish_at"].timestamp() * 1000) == T0


def test_json_field_paths_and_string_values(spark, tmp_path):
    audit = audit_file(tmp_path, {"event_id": {"field": "order.id"}, "seq": {"field": "version"}})
    got = decoded(spark, audit, [(b"k", b'{"order": {"id": "o-1"}, "version": 2}'), (b"k", b"not json")])
    assert [(r["event_id"], r["seq"]) for r in got] == [("o-1", 2), (None, None)]
    audit = audit_file(tmp_path / "s", {"format": "string", "event_id": {"value": True}})
    assert [r["event_id"] for r in decoded(spark, audit, [(b"k", b"order-17")])] == ["order-17"]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"format": "xml", "event_id": {"field": "id"}}, "record.format: 'xml' is not one of"),
        (
            {"key_format": "json", "event_id": {"field": "id"}},
            "record.key_format: 'json' is not one of avro, string",
        ),
        (
            {"format": "avro", "event_id": {"json": "$.id"}},
            "record.event_id: {json: ...} does not read a avro value; use {field: ...}",
        ),
        (
            {"format": "string", "event_id": {"field": "id"}},
            "record.event_id: {field: ...} does not read a string value; use {value: ...}",
        ),
        (
            {"event_id": {"field": "id"}, "key": {"key_field": "id"}},
            "record.key: {key_field: ...} does not read a string key",
        ),
        ({"key_format": "avro", "event_id": {"field": "id"}, "key": {"record_key": True}}, "does not read a avro key"),
        ({"event_id": {"field": "id"}, "schemas": {"1": "a.avsc"}}, "record.schemas: a json value has no schemas"),
        ({"event_id": {"field": "order..id"}}, "record.event_id"),
    ],
)
def test_a_record_section_that_cannot_be_read_is_refused(tmp_path, record, message):
    with pytest.raises(audits.AuditError) as e:
        audit_file(tmp_path, record)
    assert message in str(e.value)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"schemas": {"1": "schemas/missing.avsc"}}, "record.schemas.1: schemas/missing.avsc: no such file"),
        (
            {"schemas": {"1": "schemas/order_event.proto"}},
            "record.schemas.1: schemas/order_event.proto: not an Avro schema",
        ),
        ({"event_id": {"field": "order.number"}}, "record.field: 'order.number' is in none of the value's schemas"),
        ({"key_schemas": None}, "record.key_schemas: a avro key needs its writer schemas by id"),
    ],
)
def test_schema_files_are_checked_before_anything_runs(tmp_path, edit, message):
    record = {k: v for k, v in {**AVRO_RECORD, **edit}.items() if v is not None}
    audit = audit_file(tmp_path, record)
    with pytest.raises(audits.AuditError) as e:
        schemas.load(audit)
    assert message in str(e.value)


def test_a_proto_file_that_does_not_compile_is_one_line(tmp_path):
    audit = audit_file(
        tmp_path, {"format": "protobuf", "schemas": {"1": "schemas/bad.proto"}, "event_id": {"field": "id"}}
    )
    (tmp_path / "schemas" / "bad.proto").write_text('syntax = "proto3";\nmessage A { strin id = 1; }\n')
    with pytest.raises(audits.AuditError) as e:
        schemas.load(audit)
    assert "record.schemas.1: bad.proto: not a .proto schema:" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("layout", ["value", "headers"])
def test_the_platform_reader_over_empty_ranges_reads_nothing_in_the_checkers_columns(spark, layout):
    """What the copy reads again of partitions the kinds saw nothing of: no task, no broker."""
    from checker import sources

    run = {"run_id": "r1", "topic": "t", "mode": "idempotent", "scenario": "none", "messages": 0}
    src = sources.platform_source({**run, "record_layout": layout}, sources.Kafka({}, {}))
    df = sources.read_topic(spark, src, "read_committed", {0: 5, 1: 7}, {0: 5, 1: 7})
    assert df.collect() == []
    assert df.dtypes == [
        ("event_id", "string"),
        ("key", "string"),
        ("seq", "bigint"),
        ("publish_at", "timestamp"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("value", "binary"),
        ("record_at", "timestamp"),
        ("n", "bigint"),
        ("id_rest", "string"),
    ]


def test_avro_decoding_never_crashes_and_never_invents_an_id(spark, tmp_path):
    """Every truncation of a good record, the good record itself, and random bytes behind each
    schema id (and none): each row decodes to the planted id, to nothing, or, for random bytes
    that happen to be valid Avro, to an id whose bytes are in the record; no row fails the job."""
    import random

    audit = audit_file(tmp_path, AVRO_RECORD)
    v1 = AvroWriter(1, (HERE / "order_event-v1.avsc").read_text())
    good = v1({"order": {"id": "planted-id"}, "version": 3, "created_at": T0})
    rng = random.Random(55)
    noise = [
        frame(rng.choice([1, 2, 9]), bytes(rng.randrange(256) for _ in range(rng.randrange(0, 30)))) for _ in range(200)
    ]
    rows = [(None, good[:cut]) for cut in range(len(good) + 1)] + [(None, raw) for raw in noise]
    got = decoded(spark, audit, rows)
    assert len(got) == len(rows)
    for (_, raw), r in zip(rows, got, strict=True):
        if raw == good:
            assert r["event_id"] == "planted-id"
        elif r["event_id"] is not None:  # bytes that happen to be a valid record: its string, as carried
            # (bytes that are not UTF-8 reach Python as U+FFFD: each run between them is in the record)
            assert all(piece.encode() in raw for piece in r["event_id"].split("\ufffd")), (raw, r["event_id"])
            assert r["event_id"] != "planted-id"
    assert all(r["event_id"] is None for r in got[: len(good) - 1][:6]), "a record cut in its header is malformed"


def test_the_java_writer_and_reader_name_the_layouts_one_definition():
    """records/layouts.py defines the layouts; the Java producer writes and the platform reader
    reads them (their behaviour is held to it by test_java_client and test_platform_reader on the
    real brokers): here, that their text names the same fields, order and separator."""
    from delivery_semantics.records import layouts

    repo = Path(__file__).resolve().parents[2]
    reader = (repo / "spark_apps" / "java" / "PlatformTopicSource.java").read_text()
    names = ", ".join(f'"{h}"' for h in layouts.HEADERS[:3])
    assert f"HEADER_NAMES = {{{names}}}" in reader
    sep = layouts.SEPARATOR.decode()
    assert f'split("{sep}", {len(layouts.VALUE_FIELDS)})' in reader
    producer = (repo / "clients" / "java" / "SemanticsProducer.java").read_text()
    assert f'(runIdDash + n + "{sep}" + (n / keys) + "{sep}" + publishAt + "{sep}")' in producer
    assert layouts.VALUE_FIELDS[:3] == ("event_id", "seq", "publish_at")
