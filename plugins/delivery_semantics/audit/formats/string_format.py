"""UTF-8 text: a value read whole ({value: true}), or a key ({record_key: true}); no fields."""

from __future__ import annotations

from delivery_semantics.audit.formats.base import Decoder

DECODER = Decoder("string", "UTF-8 text, read whole", value_specs=("value",), key_specs=("record_key",))
