"""JSON values: a field by path ({json: $.order.id}, or {field: order.id}), or the whole value."""

from __future__ import annotations

from delivery_semantics.audit.formats.base import Decoder, decoded_column


def decode(df, side: str, paths: list[str], schemas: dict):
    from pyspark.sql import functions as F

    text = F.col(side).cast("string")
    return df.select(
        "*", *[F.get_json_object(text, "$" if p == "$" else f"$.{p}").alias(decoded_column(side, p)) for p in paths]
    )


DECODER = Decoder("json", "a JSON value (the default)", value_specs=("json", "field", "value"), decode=decode)
