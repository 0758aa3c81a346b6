"""Where a record holds the values the checker reads (event id, key, seq, publish time): one
function per kind of field spec, registered in FIELDS under the spec's key. A field spec is a
mapping with one of those keys (audit.schema.json's `field`), for example `{header: event-id}`,
`{json: $.order.id}` or `{value: true}`. A new kind of spec is its function and its line in FIELDS;
a new record format is its Decoder (delivery_semantics/audit/formats), which decodes the fields
that `field` and `key_field` read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delivery_semantics.audit.formats import FORMATS, FieldError, decoded_column
from delivery_semantics.records import layouts


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
    """A platform run's value layout (layouts.VALUE_FIELDS). A value with fewer fields than the
    layout's is malformed: every field of it is none. Spark splits once for all the fields of a
    record (common subexpressions)."""
    fields = len(layouts.VALUE_FIELDS)
    parts = F.split(F.col("value").cast("string"), layouts.SEPARATOR.decode(), fields)
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


@dataclass(frozen=True)
class RecordFormat:
    """How a topic's values and keys are written (an audit's `record.format` and `key_format`),
    and their writer schemas by id (audit/schemas.py). `decode` adds a text column for each field
    path the audit reads, by the format's own Decoder (audit/formats); a record that does not
    decode, or whose schema id has no schema here, has none of them, and is malformed."""

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
            df = FORMATS[kind].decoded(df, side, paths, self.schemas[side])
        return df
