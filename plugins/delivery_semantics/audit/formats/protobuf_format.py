"""Protobuf in Confluent's wire format (a zero byte, a 4-byte schema id, the message indexes, the
message), decoded by Python's protobuf runtime in an Arrow UDF (spark-protobuf is not published at
Spark's version). A record whose id, indexes or bytes the schemas cannot take gives none of its
fields, and is malformed."""

from __future__ import annotations

from collections.abc import Callable

from delivery_semantics.audit.formats.base import Decoder, decoded_column


def decode(df, side: str, paths: list[str], schemas: dict):
    """Protobuf in Confluent's wire format, decoded by Python's protobuf runtime in an Arrow UDF
    (spark-protobuf is not on Maven Central at Spark's version). Bytes that do not parse give none."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    names = [decoded_column(side, p) for p in paths]
    fields = protobuf_decoder({i: (ws.descriptor, ws.file) for i, ws in schemas.items()}, paths)

    def decode(values):
        return pd.DataFrame([fields(v) for v in values], columns=names)

    # Real types, not this module's postponed annotations: Spark picks the UDF's kind from them.
    decode.__annotations__ = {"values": pd.Series, "return": pd.DataFrame}
    returns = ", ".join(f"{n} string" for n in names)
    return (
        df.withColumn("__protobuf", pandas_udf(decode, returns)(F.col(side)))
        .select("*", *[F.col(f"__protobuf.{n}").alias(n) for n in names])
        .drop("__protobuf")
    )


def protobuf_decoder(wire: dict[int, tuple[bytes, str]], paths: list[str]) -> Callable[[bytes | None], list]:
    """A function of one record's bytes to its fields' text (all none when it does not decode):
    the schema id, the message indexes (zigzag varints; a single 0 for the first message), then the
    message of that index in the schema of that id (`wire`: id -> descriptor set, file name).
    Everything it uses is defined in it (its varint reader too, as records/wire.py's `unzigzag`),
    so Spark ships it by value to executors that do not have this package."""
    classes: dict = {}

    def zigzag(raw, at):
        shift = value = 0
        while True:
            if at >= len(raw) or shift > 63:
                raise ValueError("truncated varint")
            b = raw[at]
            at += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (value >> 1) ^ -(value & 1), at

    def message_class(sid, indexes):
        if (sid, indexes) not in classes:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

            descriptor, file_name = wire[sid]
            pool = descriptor_pool.DescriptorPool()
            for f in descriptor_pb2.FileDescriptorSet.FromString(descriptor).file:
                pool.Add(f)
            # Each index is checked: Python's negative indexing would take -1 as the last message, and
            # a record the schema cannot have would count as a delivery.
            candidates = list(pool.FindFileByName(file_name).message_types_by_name.values())
            for i in indexes:
                if not 0 <= i < len(candidates):
                    raise IndexError(f"message index {i} of {len(candidates)}")
                desc = candidates[i]
                candidates = list(desc.nested_types)
            classes[sid, indexes] = message_factory.GetMessageClass(desc)
        return classes[sid, indexes]

    def leaf_text(msg, path):
        from google.protobuf import text_format

        value = msg
        for part in [] if path == "$" else path.split("."):
            if not hasattr(value, "DESCRIPTOR") or part not in value.DESCRIPTOR.fields_by_name:
                return None  # another schema version's field
            value = getattr(value, part)
        if hasattr(value, "DESCRIPTOR"):
            if value.DESCRIPTOR.full_name == "google.protobuf.Timestamp":
                return str(value.ToMilliseconds())
            return text_format.MessageToString(value, as_one_line=True)
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def fields(raw):
        none = [None] * len(paths)
        if raw is None or len(raw) < 6 or raw[0] != 0:
            return none
        sid = int.from_bytes(raw[1:5], "big")
        if sid not in wire:
            return none
        try:
            count, at = zigzag(raw, 5)
            if not 0 <= count <= 32:
                return none
            indexes = [0] if count == 0 else []
            for _ in range(count):
                i, at = zigzag(raw, at)
                indexes.append(i)
            msg = message_class(sid, tuple(indexes)).FromString(bytes(raw[at:]))
        except Exception:  # DecodeError, a bad index, a truncated varint: the record is malformed
            return none
        return [leaf_text(msg, p) for p in paths]

    return fields


DECODER = Decoder(
    "protobuf",
    "Protobuf in Confluent's wire format, by schema id",
    value_specs=("field",),
    schemas="protobuf",
    decode=decode,
)
