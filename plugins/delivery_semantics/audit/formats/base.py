"""What a record format is to an audit: a Decoder that owns its facts (the field specs that read a
value or a key written so, the type of writer schemas it is read with) and its decode in the Spark
application, which adds a text column per field path and gives a record it cannot decode none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class FieldError(ValueError):
    pass


def decoded_column(side: str, path: str) -> str:
    """The column a decode puts a value's (or key's) field in, as text."""
    return f"__{side}__{path.replace('.', '__').replace('$', 'whole')}"


@dataclass(frozen=True)
class Decoder:
    name: str
    description: str
    value_specs: tuple[str, ...]  # the field specs that read a value written so: json, field, value
    key_specs: tuple[str, ...] = ()  # those that read a key written so; none: not a key format
    schemas: str | None = None  # the writer schemas' type, by id (audit/schemas.py): avro or protobuf
    # (df, side, paths, writer schemas by id) -> df with decoded_column(side, path) for each path.
    # None: the format has no fields (its value or key is read whole).
    decode: Callable | None = None

    def decoded(self, df, side: str, paths: list[str], schemas: dict):
        if self.decode is None:
            raise FieldError(f"a {self.name} {side} has no fields: read it whole")
        return self.decode(df, side, paths, schemas)
