"""The checker's cached DataFrames, released per reconciliation: one application reconciles
several runs side by side (threads), so one run's end must not drop another's cache, as
`spark.catalog.clearCache()` would. Each reconciliation runs in one thread, inside `scope()`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame

_local = threading.local()


def keep(df: DataFrame) -> DataFrame:
    """`df` cached until the end of this thread's scope (for the whole application outside one)."""
    frames = getattr(_local, "frames", None)
    if frames is not None:
        frames.append(df)
    return df.cache()


@contextmanager
def scope() -> Iterator[None]:
    outer, _local.frames = getattr(_local, "frames", None), []
    try:
        yield
    finally:
        for df in _local.frames:
            df.unpersist()
        _local.frames = outer
