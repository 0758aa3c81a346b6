"""The record formats an audit reads, one Decoder each (formats/base.py), by the name an audit
file's `record.format` or `record.key_format` gives. A new format is its module and one line here."""

from __future__ import annotations

import importlib

from delivery_semantics.audit.formats.base import Decoder, FieldError, decoded_column

_MODULES = (  # each holds its DECODER
    "json_format",
    "avro_format",
    "protobuf_format",
    "string_format",
)
FORMATS: dict[str, Decoder] = {
    d.name: d for d in (importlib.import_module(f"{__name__}.{m}").DECODER for m in _MODULES)
}
KEY_FORMATS = {name: d for name, d in FORMATS.items() if d.key_specs}

__all__ = ["FORMATS", "KEY_FORMATS", "Decoder", "FieldError", "decoded_column"]
