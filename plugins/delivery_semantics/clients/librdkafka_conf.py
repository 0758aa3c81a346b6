"""librdkafka's own parser of configuration values, through its C API: `rd_kafka_conf_set` on a
configuration object of its own (no client is made, nothing connects), then `rd_kafka_conf_get` for
the value as the library holds it. A value is taken or refused exactly as the client would take it.
Called only for the keys the rule catalog reads (clients/known_keys.py), none of which loads a
library or runs a command when set."""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import confluent_kafka


@cache
def library() -> ctypes.CDLL | None:
    """The librdkafka confluent-kafka runs on (the copy its wheel bundles, else the system's); None
    where neither loads, and values are then not checked."""
    bundled = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(bundled.glob("librdkafka*.so*"))
    try:
        lib = ctypes.CDLL(str(found[0]) if found else "librdkafka.so.1")
    except OSError:
        return None
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_conf_set.restype = ctypes.c_int
    lib.rd_kafka_conf_get.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_size_t),
    ]
    lib.rd_kafka_conf_get.restype = ctypes.c_int
    lib.rd_kafka_conf_destroy.argtypes = [ctypes.c_void_p]
    return lib


def parse(key: str, value: str) -> tuple[str | None, str | None]:
    """(the value as librdkafka holds it, None) or (None, librdkafka's own error)."""
    lib = library()
    if lib is None:
        return value, None
    conf = lib.rd_kafka_conf_new()
    err = ctypes.create_string_buffer(512)
    try:
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), err, len(err)) != 0:
            return None, err.value.decode(errors="replace")
        held = ctypes.create_string_buffer(512)
        size = ctypes.c_size_t(len(held))
        if lib.rd_kafka_conf_get(conf, key.encode(), held, ctypes.byref(size)) != 0:
            return value, None  # a topic-level property: taken, held by the default topic's conf
        return held.value.decode(errors="replace"), None
    finally:
        lib.rd_kafka_conf_destroy(conf)
