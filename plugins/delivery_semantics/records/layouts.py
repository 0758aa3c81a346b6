"""How a platform run's record carries its event: the layouts (the value's text fields, Avro in
Confluent's wire format, and the headers of runs recorded before V021), one definition that the
generator writes, and the consumers, the readback and the checker read. The Java producer
(clients/java/SemanticsProducer.java) and the checker's platform reader
(spark_apps/java/PlatformTopicSource.java) write and read the same; tests hold them to it."""

from __future__ import annotations

import json

from delivery_semantics.records.wire import unzigzag, zigzag

# How a record carries its event, per run (the ledger's `runs.record_layout`, sql/V021):
# - "value": the value is `<event_id> <seq> <publish_at ms> <payload>`, the key `k<j>`, no
#   headers. A record without headers lets the producer hand librdkafka a batch at a time
#   (`produce_batch` takes none), and the checker read the topic without the headers column.
# - "avro": the value is Avro in Confluent's wire format (AVRO_SCHEMA, id AVRO_SCHEMA_ID), the
#   record of the same four fields; the key `k<j>`, no headers. What teams with a schema registry
#   write: `--record-format avro`.
# - "headers": runs recorded before V021: the value is the payload, and the event id, seq,
#   publish time and run id are headers, in this order.
VALUE_LAYOUT = "value"
AVRO_LAYOUT = "avro"
HEADERS_LAYOUT = "headers"
# The record formats a run may ask for, and the layout each writes.
RECORD_FORMATS = {"text": VALUE_LAYOUT, "avro": AVRO_LAYOUT}
SEPARATOR = b" "  # never in an event id, a number or a payload (letters and digits)
VALUE_FIELDS = ("event_id", "seq", "publish_at", "payload")  # in this order, in the value

# The platform's event in Avro. The id is nominal: no registry runs here to number it (a topic a
# registry numbered is audited with the ids it gave, audits/orders_avro.yaml).
AVRO_SCHEMA_ID = 1
AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "SemanticsEvent",
        "namespace": "delivery_semantics",
        "fields": [
            {"name": "event_id", "type": "string"},
            {"name": "seq", "type": "long"},
            {"name": "publish_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "payload", "type": "bytes"},
        ],
    }
)
AVRO_HEAD = b"\x00" + AVRO_SCHEMA_ID.to_bytes(4, "big")


def avro_value(event_id: bytes, seq: int, publish_at_ms: int, payload: bytes) -> bytes:
    """The event in AVRO_SCHEMA's binary encoding, framed with its id: what fastavro writes, by hand
    (the producer's per-record path)."""
    return b"".join(
        (
            AVRO_HEAD,
            zigzag(len(event_id)),
            event_id,
            zigzag(seq),
            zigzag(publish_at_ms),
            zigzag(len(payload)),
            payload,
        )
    )


def avro_fields(value: bytes) -> tuple[bytes, int, int, bytes] | None:
    """(event_id, seq, publish_at ms, payload) of a value avro_value made, or None."""
    if len(value) < 6 or value[:5] != AVRO_HEAD:
        return None
    try:
        size, at = unzigzag(value, 5)
        eid, at = value[at : at + size], at + size
        seq, at = unzigzag(value, at)
        publish_at, at = unzigzag(value, at)
        size, at = unzigzag(value, at)
        payload = value[at : at + size]
    except IndexError:
        return None
    return (eid, seq, publish_at, payload) if len(payload) == size else None


H_EVENT_ID = "event_id"
H_SEQ = "seq"
H_PUBLISH_AT = "publish_at"
H_RUN_ID = "run_id"
HEADERS = (H_EVENT_ID, H_SEQ, H_PUBLISH_AT, H_RUN_ID)


def record_fields(value: bytes | None, headers: list | None) -> tuple[str | None, int | None, int | None]:
    """(event_id, seq, publish_at ms) of a record of any layout, None where it has none: a record
    with an event_id header is of the headers layout, one whose value starts with the wire
    format's zero byte of the Avro layout."""
    if value and value[0] == 0:
        fields = avro_fields(value)
        return (fields[0].decode(), fields[1], fields[2]) if fields else (None, None, None)
    h = dict(headers or [])
    if H_EVENT_ID in h:
        eid, seq, at = h[H_EVENT_ID], h.get(H_SEQ), h.get(H_PUBLISH_AT)
        return eid.decode() if eid else None, int(seq) if seq else None, int(at) if at else None
    parts = (value or b"").split(SEPARATOR, len(VALUE_FIELDS) - 1)
    if len(parts) != len(VALUE_FIELDS):
        return None, None, None
    eid, seq, at, _ = parts
    return eid.decode(), int(seq) if seq.isdigit() else None, int(at) if at.isdigit() else None


def with_payload(value: bytes, transform) -> bytes:
    """A value of the value or Avro layout with its payload transformed, its event fields kept."""
    if value and value[0] == 0:
        eid, seq, at, payload = avro_fields(value)
        return avro_value(eid, seq, at, transform(payload))
    *fields, payload = value.split(SEPARATOR, len(VALUE_FIELDS) - 1)
    return SEPARATOR.join([*fields, transform(payload)])
