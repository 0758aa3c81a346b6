"""The rule of each anomaly kind that both checkers judge, written once: a batch (a platform run, a
consumer run, a batch audit) and a continuous audit's window apply the same rule to their rows of
events, so they cannot disagree on what a duplicate, a loss or an unexpected record is.

A rule is a condition on one event's row:
- `copies`: the copies read (in the window), NULL where none was;
- `status`: its ledger or outbox row's status, NULL where it has none;
- what a window knows of the event besides (`Earlier`).

A batch is the window with nothing before it and everything due: `BATCH`, every field None. Then
each rule reduces to the batch's (for example a duplicate is `copies > 1`).

Two things besides are written once here: the stale overwrite, a rule over a key's applies in
order rather than over one event's row; and `rows`, the one shape of a kind's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

# A status that is not acked, where the event may still have been written: failed, unknown,
# never acknowledged, aborted or written in a transaction that never committed.
NOT_ACKED = ("failed", "unknown", "pending", "aborted", "written")


@dataclass(frozen=True)
class Earlier:
    """The boolean columns of a window's rows, by name; None takes the batch's answer."""

    read: str | None = None  # read in an earlier window (batch: never)
    lost: str | None = None  # an earlier window declared it lost, unresolved (batch: never)
    carried: str | None = None  # read earlier within the grace, still without a ledger row (batch: never)
    due: str | None = None  # its ledger row falls due here (batch: always)
    past_grace: str | None = None  # first read past the grace (batch: always)

    def __call__(self, name: str) -> Column:
        column = getattr(self, name)
        if column is None:
            return F.lit(name in ("due", "past_grace"))
        return F.coalesce(F.col(column), F.lit(False))


BATCH = Earlier()


def in_topic() -> Column:
    return F.col("copies").isNotNull()


def in_ledger() -> Column:
    return F.col("status").isNotNull()


def read_ever(e: Earlier) -> Column:
    return in_topic() | e("read")


def duplicate(e: Earlier = BATCH) -> Column:
    """More than one copy, or a copy of an event read before [Jepsen: duplicate]."""
    return in_topic() & ((F.col("copies") > 1) | e("read"))


def lost_acked(e: Earlier = BATCH) -> Column:
    """Due, acked, never read [Jepsen: lost-write]."""
    return e("due") & ~read_ever(e) & (F.col("status") == "acked")


def lost_unacked(e: Earlier = BATCH) -> Column:
    """Due, never acked and never read: expected of a failed send, a loss all the same."""
    return e("due") & ~read_ever(e) & in_ledger() & (F.col("status") != "acked")


def unknown_landed(e: Earlier = BATCH) -> Column:
    """Due, not acked, yet read: possibly persisted, and it was [Jepsen: indeterminate]."""
    return e("due") & read_ever(e) & F.col("status").isin(*NOT_ACKED)


def unmatched(e: Earlier = BATCH) -> Column:
    """Read with no ledger row: first read here, or carried from the window before."""
    first_here = in_topic() & ~e("read") & ~e("lost")
    return (first_here | e("carried")) & ~in_ledger()


def unexpected(e: Earlier = BATCH) -> Column:
    """Read with no ledger row, past the grace [Jepsen: unexpected]."""
    return unmatched(e) & e("past_grace")


def pending(e: Earlier) -> Column:
    """Read with no ledger row yet, within the grace: carried to the next window."""
    return unmatched(e) & ~e("past_grace")


def late(e: Earlier) -> Column:
    """Read after an earlier window declared it lost (the loss stays, resolved by this copy)."""
    return in_topic() & e("lost")


def stale(
    applied: DataFrame, version: Column, order: tuple[str, ...], newest_earlier: Column | None = None
) -> DataFrame:
    """The applies of a key that came after a newer version of it had been applied: before them in
    `order`, or in an earlier window (`newest_earlier`, the newest version it applied; NULL where
    none) [stale overwrite]. `applied`: the applies with a key and a version, in any order."""
    before = Window.partitionBy("key").orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
    newest = F.max(version).over(before)
    if newest_earlier is not None:
        newest = F.greatest(newest, newest_earlier)  # NULLs skipped
    return applied.withColumn("newest_before", newest).where(version < F.col("newest_before"))


def rows(df: DataFrame, kind: str | Column, stage: str | None = None) -> DataFrame:
    """A kind's rows in the shape of a discrepancy: `event_id`, its kind, the copies read and where
    (the columns `copies`, `partitions` and `offsets` of `df`; none where it has none). A window's
    rows (`stage` given) also say where in the pipeline, when it happened (`occurred_at`), the delay
    of a late copy (`delay_ms`) and the window that declared the loss it resolves (`lost_in_window`)."""
    cols = set(df.columns)

    def have(name: str, default: Column) -> Column:
        return F.col(name) if name in cols else default

    no_ints, no_longs = F.array().cast("array<int>"), F.array().cast("array<bigint>")
    found = [
        F.coalesce(have("copies", F.lit(0)).cast("int"), F.lit(0)).alias("copies"),
        F.coalesce(have("partitions", no_ints).cast("array<int>"), no_ints).alias("partitions"),
        F.coalesce(have("offsets", no_longs).cast("array<bigint>"), no_longs).alias("offsets"),
    ]
    kind_column = (F.lit(kind) if isinstance(kind, str) else kind).alias("kind")
    if stage is None:
        return df.select("event_id", kind_column, *found)
    return df.select(
        F.lit(stage).alias("stage"),
        kind_column,
        "event_id",
        *found,
        have("occurred_at", F.lit(None)).cast("timestamp").alias("occurred_at"),
        have("delay_ms", F.lit(None)).cast("bigint").alias("delay_ms"),
        have("lost_in_window", F.lit(None)).cast("timestamp").alias("lost_in_window"),
    )
