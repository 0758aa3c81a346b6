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
    return head + b"".join(_zigzag(i) for i in (len(message_indexes), *message_indexes)) + payload


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


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
