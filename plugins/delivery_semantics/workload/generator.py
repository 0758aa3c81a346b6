"""What to send: the events of a run, derived deterministically from (run_id, seed, n), so any
event can be rebuilt for a resend from its ledger row alone."""

from __future__ import annotations

import json
import random
import secrets
import time
from collections.abc import Iterable, Iterator

from delivery_semantics.records.event import Event, event_id
from delivery_semantics.workload.wire import unzigzag, zigzag

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
_AVRO_HEAD = b"\x00" + AVRO_SCHEMA_ID.to_bytes(4, "big")


def avro_value(event_id: bytes, seq: int, publish_at_ms: int, payload: bytes) -> bytes:
    """The event in AVRO_SCHEMA's binary encoding, framed with its id: what fastavro writes, by hand
    (the producer's per-record path)."""
    return b"".join(
        (
            _AVRO_HEAD,
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
    if len(value) < 6 or value[:5] != _AVRO_HEAD:
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


_POOL_BYTES = 1 << 16


def new_run_id(prefix: str = "r") -> str:
    """Sortable and safe as part of an SQL identifier and a topic name; producer runs start with
    r, consumer runs with c."""
    return prefix + time.strftime("%Y%m%dt%H%M%S", time.gmtime()) + "_" + secrets.token_hex(3)


def slices(messages: int, producers: int) -> list[tuple[int, int]]:
    """[start, stop) of each producer's events: contiguous, as even as can be, covering all."""
    return [(messages * i // producers, messages * (i + 1) // producers) for i in range(producers)]


class Generator:
    """Event n of a run: its id, payload, key and sequence. A producer of a run with several writes
    keys of its own, `k<key_base + n % keys>` (key_base: the producer's number times keys): a key
    with one writer has an order for Kafka to keep, which out_of_order checks; two producers
    writing one key concurrently have none, and every event of the slower one would read as out
    of order."""

    def __init__(
        self, run_id: str, keys: int, payload_bytes: int, seed: int, key_base: int = 0, layout: str = VALUE_LAYOUT
    ):
        if keys <= 0:
            raise ValueError(f"keys must be > 0, got {keys}")
        if payload_bytes < 0:
            raise ValueError(f"payload bytes must be >= 0, got {payload_bytes}")
        if key_base < 0:
            raise ValueError(f"key base must be >= 0, got {key_base}")
        if layout not in RECORD_FORMATS.values():
            raise ValueError(f"a producer writes the layouts {', '.join(RECORD_FORMATS.values())}, not {layout!r}")
        self.layout = layout
        self.run_id, self.keys, self.key_base, self.payload_bytes = run_id, keys, key_base, payload_bytes
        rng = random.Random(seed)  # noqa: S311 (load generation, not cryptography)
        alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        pool_len = max(_POOL_BYTES, 2 * payload_bytes)
        self._pool = bytes(alphabet[rng.randrange(len(alphabet))] for _ in range(pool_len))
        self._span = pool_len - payload_bytes
        self._run_id_bytes = run_id.encode()
        self._n_at = len(self._run_id_bytes) + 1
        self._key_bytes = [f"k{key_base + i}".encode() for i in range(keys)]
        self._avro_payload_size = zigzag(payload_bytes)
        self._avro_at = (None, b"")  # a batch's publish time, encoded once

    @property
    def payload_pool(self) -> bytes:
        """What payload(n) slices: the Java client's runner gets it once and slices it the same way."""
        return self._pool

    def payload(self, n: int) -> bytes:
        start = (n * 7919) % (self._span + 1)
        return self._pool[start : start + self.payload_bytes]

    def records(self, ns: Iterable[int], publish_at_ms: int) -> list[tuple[int, int]]:
        """(n, publish_at_ms) of each event to send: what the producer client takes."""
        return [(n, publish_at_ms) for n in ns]

    def wire(self, n: int, publish_at_ms: int) -> dict[str, bytes]:
        """Event n as the record produce_batch takes, without building an Event: the producer's
        per-record path. `event(n).value()` gives the same value, and the Java client's runner
        (clients/java/SemanticsProducer.java, `send`) the same key and value: change them together."""
        if self.layout == AVRO_LAYOUT:
            if self._avro_at[0] != publish_at_ms:
                self._avro_at = (publish_at_ms, zigzag(publish_at_ms))
            digits = b"%d" % n
            # avro_value's bytes, with what a run or a batch shares encoded once
            value = b"%b%b%b-%b%b%b%b%b" % (
                _AVRO_HEAD,
                zigzag(self._n_at + len(digits)),
                self._run_id_bytes,
                digits,
                zigzag(n // self.keys),
                self._avro_at[1],
                self._avro_payload_size,
                self.payload(n),
            )
        else:
            value = b"%s-%d %d %d %s" % (self._run_id_bytes, n, n // self.keys, publish_at_ms, self.payload(n))
        return {"value": value, "key": self._key_bytes[n % self.keys]}

    def n_of(self, value: bytes) -> int:
        """The event number in a value this generator made: what its delivery report is for."""
        if self.layout == AVRO_LAYOUT:
            size, at = unzigzag(value, 5)
            return int(value[at + self._n_at : at + size])
        return int(value[self._n_at : value.index(SEPARATOR, self._n_at)])

    def event(self, n: int, publish_at_ms: int | None = None) -> Event:
        # The ledger's view `ledger_events` (sql/V020) derives the same id, key and seq from n and
        # key_base, and the checker's rebuilt ledger the same id: change them together.
        return Event(
            n,
            event_id(self.run_id, n),
            f"k{self.key_base + n % self.keys}",
            n // self.keys,
            publish_at_ms if publish_at_ms is not None else int(time.time() * 1000),
            self.payload(n),
        )

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[list[tuple[int, int]]]:
        """The records of new events n in [start, stop), stamped with publish_at when the batch is made."""
        for lo in range(start, stop, batch_size):
            yield self.records(range(lo, min(lo + batch_size, stop)), int(time.time() * 1000))
