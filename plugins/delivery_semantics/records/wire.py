"""Confluent's wire format, as producers that use a schema registry write it: a zero byte, the
schema id in 4 bytes (big-endian), for Protobuf the index path of the message in its schema
(zigzag varints; a single 0 for the first message), then the payload."""

from __future__ import annotations

import io
import json


def frame(schema_id: int, payload: bytes, message_indexes: tuple[int, ...] | None = None) -> bytes:
    head = b"\x00" + schema_id.to_bytes(4, "big")
    if message_indexes is None:
        return head + payload
    if tuple(message_indexes) == (0,):
        return head + b"\x00" + payload
    return head + b"".join(zigzag(i) for i in (len(message_indexes), *message_indexes)) + payload


_ZIGZAG_SMALL = [bytes([i << 1]) for i in range(64)]  # 0..63: one byte


def zigzag(n: int) -> bytes:
    """A signed number as Avro's longs and the wire format's message indexes write it: zigzag,
    then a varint."""
    if 0 <= n < 64:
        return _ZIGZAG_SMALL[n]
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def unzigzag(b: bytes, at: int) -> tuple[int, int]:
    """The number zigzag wrote at `at`, and where the next field starts. IndexError when cut short."""
    shift = value = 0
    while True:
        byte = b[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


class AvroWriter:
    """Values of one Avro schema, framed with its id."""

    def __init__(self, schema_id: int, schema: dict | str):
        import fastavro

        self.schema_id = schema_id
        self.schema = fastavro.parse_schema(json.loads(schema) if isinstance(schema, str) else schema)

    def __call__(self, record: dict) -> bytes:
        import fastavro

        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.schema, record)
        return frame(self.schema_id, buf.getvalue())
