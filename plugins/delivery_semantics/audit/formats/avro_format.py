"""Avro in Confluent's wire format (a zero byte, a 4-byte schema id, the payload), value or key:
each record decoded with the writer schema of its own id (audit/schemas.py); one whose id has no
schema here, or whose bytes do not decode, gives none of its fields, and is malformed."""

from __future__ import annotations

from delivery_semantics.audit.formats.base import Decoder, decoded_column


def schema_id(side: str):
    """The schema id of Confluent's wire format (a zero byte, then the id in 4 bytes, big-endian),
    or none when the bytes are not framed so."""
    from pyspark.sql import functions as F

    raw = F.col(side)
    head = F.hex(F.substring(raw, 1, 5))
    return F.when((F.length(raw) >= 5) & head.startswith("00"), F.conv(F.substring(head, 3, 8), 16, 10).cast("bigint"))


def decode(df, side: str, paths: list[str], schemas: dict):
    """Each record decoded by Spark's from_avro with the writer schema of its own id, PERMISSIVE:
    bytes that do not decode give none. One struct per schema id, then each path taken from the
    one its record has; the struct is built once per record, not once per path."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    sid = schema_id(side)
    payload = F.substring(F.col(side), 6, 2_147_483_647)
    structs = {i: f"__avro_{side}_{i}" for i in schemas}
    df = df.select(
        "*",
        *[
            F.when(sid == F.lit(i), from_avro(payload, ws.text, {"mode": "PERMISSIVE"})).alias(structs[i])
            for i, ws in schemas.items()
        ],
    )
    columns = []
    for path in paths:
        out = None
        for i, ws in schemas.items():
            leaf = ws.leaf(path)
            if leaf is None:
                continue
            value = F.col(structs[i])
            for part in [] if path == "$" else path.split("."):
                value = value.getField(part)
            value = F.unix_millis(value).cast("string") if leaf == "timestamp" else value.cast("string")
            out = (out if out is not None else F).when(sid == F.lit(i), value)
        columns.append((out if out is not None else F.lit(None).cast("string")).alias(decoded_column(side, path)))
    return df.select("*", *columns).drop(*structs.values())


DECODER = Decoder(
    "avro",
    "Avro in Confluent's wire format, by schema id",
    value_specs=("field",),
    key_specs=("key_field",),
    schemas="avro",
    decode=decode,
)
