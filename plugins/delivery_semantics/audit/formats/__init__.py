"""The record formats an audit reads, one Decoder each (formats/base.py), by the name an audit
file's `record.format` or `record.key_format` gives. A new format is its module and one line here."""

from __future__ import annotations

from delivery_semantics.audit.formats import avro_format, json_format, protobuf_format, string_format
from delivery_semantics.audit.formats.base import Decoder, FieldError, decoded_column

FORMATS: dict[str, Decoder] = {
    d.name: d for d in (json_format.DECODER, avro_format.DECODER, protobuf_format.DECODER, string_format.DECODER)
}
KEY_FORMATS = {name: d for name, d in FORMATS.items() if d.key_specs}

__all__ = ["FORMATS", "KEY_FORMATS", "Decoder", "FieldError", "decoded_column"]
