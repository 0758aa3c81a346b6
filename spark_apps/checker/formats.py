"""Where a record holds the values the checker reads (event id, key, seq, publish time): one
function per kind of field spec, registered in FIELDS under the spec's key. A field spec is a
mapping with one of those keys (audit.schema.json's `field`), for example `{header: event-id}`,
`{json: $.order.id}` or `{value: true}`. A new record format (a decoded Avro value, say) is its
function and its line in FIELDS, and its spec in the audit schema.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delivery_semantics.workload import generator


class FieldError(ValueError):
    pass


def header(spec: dict) -> Column:
    """The first header of that name (a literal: a header name is never parsed as SQL). By
    position, not with a lambda, which Spark would evaluate per record outside generated code."""
    name = F.lit(spec["header"])
    at = F.array_position(F.col("headers.key"), name)
    raw = F.when(at > 0, F.col("headers")[(at - 1).cast("int")]["value"].cast("string"))
    if "at" in spec:
        # The expected position first: no array of the header keys built per record.
        expected = [F.try_element_at(F.col("headers"), F.lit(i + 1)) for i in range(spec["at"] + 1)]
        first_there = expected[-1]["key"] == name
        for before in expected[:-1]:
            first_there = first_there & (before["key"] != name)
        raw = F.when(F.coalesce(first_there, F.lit(False)), expected[-1]["value"].cast("string")).otherwise(raw)
    return raw


def json_path(spec: dict) -> Column:
    """A JSON value's field, by path (`$` is the whole value)."""
    return F.get_json_object(F.col("value").cast("string"), spec["json"])


def value_field(spec: dict) -> Column:
    """A platform run's value layout (generator.VALUE_FIELDS). A value with fewer fields than the
    layout's is malformed: every field of it is none. Spark splits once for all the fields of a
    record (common subexpressions)."""
    fields = len(generator.VALUE_FIELDS)
    parts = F.split(F.col("value").cast("string"), generator.SEPARATOR.decode(), fields)
    return F.when(F.size(parts) == fields, parts[int(spec["value_field"])])


def record_key(spec: dict) -> Column:
    return F.col("key").cast("string")


def whole_value(spec: dict) -> Column:
    """The value as UTF-8 text, as Kafka's VerifiableProducer writes its ids."""
    return F.col("value").cast("string")


def decoded_value(spec: dict) -> Column:
    """A field of the decoded value, by path (RecordFormat.decode made the column)."""
    return F.col(decoded_column("value", spec["field"]))


def decoded_key(spec: dict) -> Column:
    return F.col(decoded_column("key", spec["key_field"]))


FIELDS: dict[str, Callable[[dict], Column]] = {
    "header": header,
    "field": decoded_value,
    "key_field": decoded_key,
    "json": json_path,
    "value_field": value_field,
    "record_key": record_key,
    "value": whole_value,
}


def field(spec: dict | None, dtype: str) -> Column | None:
    """The field a spec names, as `dtype`: string, bigint, or millis (a time in epoch
    milliseconds); `{timestamp: true}` is the record's own timestamp."""
    if not spec:
        return None
    if spec.get("timestamp"):
        return F.col("timestamp")
    kind = next((k for k in FIELDS if k in spec and spec[k] is not False), None)
    if kind is None:
        raise FieldError(f"unknown field spec {spec}")
    raw = FIELDS[kind](spec)
    if dtype == "string":
        return raw
    if dtype == "bigint":
        return raw.try_cast("bigint")
    if dtype == "millis":
        return F.timestamp_millis(raw.try_cast("bigint"))
    raise ValueError(dtype)


# --------------------------------------------------------------------------- decoded records


def decoded_column(side: str, path: str) -> str:
    """The column RecordFormat.decode puts a value's (or key's) field in, as text."""
    return f"__{side}__{path.replace('.', '__').replace('$', 'whole')}"


@dataclass(frozen=True)
class RecordFormat:
    """How a topic's values and keys are written (an audit's `record.format` and `key_format`),
    and their writer schemas by id (audit/schemas.py). `decode` adds a text column for each field
    path the audit reads; a record that does not decode, or whose schema id has no schema here,
    has none of them, and is malformed."""

    value: str = "json"
    key: str = "string"
    schemas: dict = dataclass_field(default_factory=lambda: {"value": {}, "key": {}}, repr=False)

    @classmethod
    def of(cls, record: dict, schemas: dict | None = None) -> RecordFormat:
        return cls(
            record.get("format", "json"), record.get("key_format", "string"), schemas or {"value": {}, "key": {}}
        )

    def decode(self, df: DataFrame, specs: list[dict | None]) -> DataFrame:
        wanted = {"value": [], "key": []}
        for spec in specs:
            for side, spec_key in (("value", "field"), ("key", "key_field")):
                if spec and spec_key in spec and spec[spec_key] not in wanted[side]:
                    wanted[side].append(spec[spec_key])
        for side, paths in wanted.items():
            if not paths:
                continue
            kind = self.value if side == "value" else self.key
            if kind == "json":  # the value only: a key is text or Avro
                paths_json = [(p, {"json": "$" if p == "$" else f"$.{p}"}) for p in paths]
                df = df.select("*", *[json_path(j).alias(decoded_column(side, p)) for p, j in paths_json])
            elif kind == "avro":
                df = _avro_decoded(df, side, paths, self.schemas[side])
            elif kind == "protobuf":
                df = _protobuf_decoded(df, side, paths, self.schemas[side])
            else:
                raise FieldError(f"a {kind} {side} has no fields: read it whole")
        return df


def schema_id(side: str) -> Column:
    """The schema id of Confluent's wire format (a zero byte, then the id in 4 bytes, big-endian),
    or none when the bytes are not framed so."""
    raw = F.col(side)
    head = F.hex(F.substring(raw, 1, 5))
    return F.when((F.length(raw) >= 5) & head.startswith("00"), F.conv(F.substring(head, 3, 8), 16, 10).cast("bigint"))


def _avro_decoded(df: DataFrame, side: str, paths: list[str], schemas: dict) -> DataFrame:
    """Each record decoded by Spark's from_avro with the writer schema of its own id, PERMISSIVE:
    bytes that do not decode give none. One struct per schema id, then each path taken from the
    one its record has; the struct is built once per record, not once per path."""
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


def _protobuf_decoded(df: DataFrame, side: str, paths: list[str], schemas: dict) -> DataFrame:
    """Protobuf in Confluent's wire format, decoded by Python's protobuf runtime in an Arrow UDF
    (spark-protobuf is not on Maven Central at Spark's version). Bytes that do not parse give none."""
    import pandas as pd
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
    Everything it uses is defined in it (its varint reader too, as workload/wire.py's `unzigzag`),
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
