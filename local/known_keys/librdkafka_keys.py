"""librdkafka's own property table, from the library confluent-kafka bundles
(`rd_kafka_conf_properties_show`, CONFIGURATION.md's source): {"producer": [...], "consumer": [...]}
by each property's C/P column, global and topic properties both (a topic property set on the client
is its default topic's)."""

from __future__ import annotations

import ctypes
import os
import re
import tempfile
from pathlib import Path

import confluent_kafka

from delivery_semantics.clients.librdkafka_conf import library


def _library() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        raise OSError("librdkafka does not load: neither confluent-kafka's copy nor the system's")
    return lib


def table_text() -> str:
    libc = ctypes.CDLL("libc.so.6")
    libc.fdopen.restype = ctypes.c_void_p
    fd, path = tempfile.mkstemp()
    try:
        stream = libc.fdopen(os.dup(fd), b"w")
        _library().rd_kafka_conf_properties_show(ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        return Path(path).read_text()
    finally:
        os.close(fd)
        os.unlink(path)


def keys() -> dict[str, list[str]]:
    out: dict[str, set[str]] = {"producer": set(), "consumer": set()}
    for line in table_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 3 or cells[1] not in ("C", "P", "*") or not cells[0] or cells[0].startswith("-"):
            continue
        for family, mark in (("producer", "P"), ("consumer", "C")):
            if cells[1] in (mark, "*"):
                out[family].add(cells[0])
    return {family: sorted(names) for family, names in out.items()}


def aliases() -> dict[str, str]:
    """Each alias the table names ("Alias for `request.required.acks`"), to the property it sets."""
    out = {}
    for line in table_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 6 and (found := re.search(r"Alias for `([^`]+)`", cells[5])):
            out[cells[0]] = found[1]
    return dict(sorted(out.items()))


def version() -> str:
    return confluent_kafka.libversion()[0]
