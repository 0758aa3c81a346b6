"""A continuous audit's window, classified: one function per kind and stage, over DataFrames, as
checker/anomalies.py does for a whole topic. The outbox_topic kinds apply the rules a batch
applies (checker/rules.py) to one frame of the window's events, with what the earlier windows
left (`EARLIER`): a batch is the window with nothing before it and everything due. Reading the
window and that state, and writing this window's rows, are in checker/incremental.py.

A window ends at `end` and follows the window that ended at `start` (None for the first, which
reads everything before its end). With `grace` g:
- outbox_topic: an outbox row created in [start - g, end - g) is due. Due and never seen in the
  topic, in this window or an earlier one: lost. A record with no outbox row whose timestamp is
  past end - g: unexpected; within the grace: pending, carried to the next window. A record of an
  event an earlier window declared lost: late (the loss stays, resolved by this row). An event id
  read twice in the window, or read in an earlier window: duplicate. Per key, a first copy whose
  seq is below one read before it, in the window or an earlier one: out_of_order.
- topic_sink: a record first seen at [start - g, end - g) and never applied: lost. Applied twice,
  in the window or across windows: duplicate. Applied after a newer version of its key: stale.
  Applied and never in the topic: unexpected.
- outbox_sink: an acked outbox row created in [start - 2g, end - 2g) never applied: lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checker import anomalies, rules
from delivery_semantics.catalog import OUTBOX_SINK, OUTBOX_TOPIC, TOPIC_SINK

# The columns of `AuditWindow.events` the shared rules read.
EARLIER = rules.Earlier(read="read_before", lost="lost_before", carried="carried", due="due", past_grace="past_grace")
# The sink's applies, by what the earlier windows' sightings say.
SINK_EARLIER = rules.Earlier(read="seen_before")

DISCREPANCY_COLUMNS = (
    "stage",
    "kind",
    "event_id",
    "copies",
    "partitions",
    "offsets",
    "occurred_at",
    "delay_ms",
    "lost_in_window",
)


@dataclass
class AuditWindow:
    end: datetime
    start: datetime | None
    grace: timedelta
    isolation: str
    records: DataFrame  # event_id, key, seq, partition, offset, record_at (the topic's timestamp)
    outbox: DataFrame  # event_id, status, created_at: rows created in [start - 2g, end)
    prior: DataFrame  # event_id, side: the looked-up ids seen in an earlier window
    open_losses: DataFrame  # event_id, stage, lost_in_window, occurred_at: losses unresolved at start
    carried: DataFrame  # event_id, first_at, copies, partitions, offsets: the previous window's pending records
    # side, key, max_version: per key this window reads, the highest seq the topic showed and the
    # newest version the sink applied before start
    key_versions: DataFrame | None = None
    sink: DataFrame | None = None  # event_id, key, version, applied_at: rows applied in [start, end)
    topic_due_for_sink: DataFrame | None = None  # event_id, first_at: first seen earlier, at [start - g, end - g)
    # How long the earlier windows' sightings are kept (None: for ever). A record with no outbox row
    # whose timestamp is older than that cannot be judged: its first copy may have been seen and
    # forgotten. It is counted as beyond_horizon, and not reported.
    horizon: timedelta | None = None

    # ------------------------------------------------------------------ time ranges

    def _since(self, shift: int) -> datetime | None:
        return self.start - shift * self.grace if self.start else None

    def _within(self, column: str, shift: int) -> Column:
        """column in [start - shift*g, end - shift*g); unbounded below in the first window."""
        c = F.col(column) < F.lit(self.end - shift * self.grace)
        since = self._since(shift)
        return c if since is None else c & (F.col(column) >= F.lit(since))

    def _past_grace(self, column: str | Column) -> Column:
        return (F.col(column) if isinstance(column, str) else column) < F.lit(self.end - self.grace)

    # ------------------------------------------------------------------ shared frames

    @cached_property
    def copies(self) -> DataFrame:
        """Per event id read in this window: copies, where, and the first copy."""
        first = F.min(F.struct("record_at", "partition", "offset", "key", "seq"))
        return (
            self.records.where(F.col("event_id").isNotNull())
            .groupBy("event_id")
            .agg(
                F.count(F.lit(1)).cast("int").alias("copies"),
                F.array_sort(F.collect_set("partition")).alias("partitions"),
                F.slice(F.array_sort(F.collect_list("offset")), 1, anomalies.MAX_OFFSETS).alias("offsets"),
                first.alias("first"),
            )
            .select(
                "event_id",
                "copies",
                "partitions",
                "offsets",
                F.col("first.record_at").alias("first_at"),
                F.col("first.partition").alias("partition"),
                F.col("first.offset").alias("offset"),
                F.col("first.key").alias("key"),
                F.col("first.seq").alias("version"),
            )
            .cache()
        )

    def _prior(self, side: str) -> DataFrame:
        return self.prior.where(F.col("side") == side).select("event_id").distinct()

    @cached_property
    def seen_in_topic(self) -> DataFrame:
        """Event ids seen in the topic up to this window's end."""
        return self._prior("topic").unionByName(self.copies.select("event_id")).distinct().cache()

    @cached_property
    def matchable_outbox(self) -> DataFrame:
        """Per event id, the outbox row a record of this window can match (created in
        [start - g, end), acked if any row of it is), and whether it is due here."""
        since = self._since(1)
        rows = self.outbox if since is None else self.outbox.where(F.col("created_at") >= F.lit(since))
        return (
            rows.groupBy("event_id")
            .agg(
                F.min("created_at").alias("created_at"),
                F.when(F.max(F.col("status") == "acked"), F.lit("acked")).otherwise(F.min("status")).alias("status"),
            )
            .withColumn("due", self._within("created_at", 1))
            .cache()
        )

    @property
    def due(self) -> DataFrame:
        return self.matchable_outbox.where(F.col("due"))

    @cached_property
    def events(self) -> DataFrame:
        """Per event the outbox_topic stage judges here (read in this window, due here, or carried
        from the window before): its copies read here, its outbox row, and what the earlier windows
        knew of it, as the columns `EARLIER` names; the shared rules (checker/rules.py) classify it."""
        losses = (
            self.open_losses.where(F.col("stage") == OUTBOX_TOPIC)
            .select("event_id", "lost_in_window", "occurred_at")
            .withColumn("lost_before", F.lit(True))
        )
        carried = self.carried.select(
            "event_id",
            F.lit(True).alias("carried"),
            F.col("first_at").alias("carried_first_at"),
            F.col("copies").alias("carried_copies"),
            F.col("partitions").alias("carried_partitions"),
            F.col("offsets").alias("carried_offsets"),
        )
        return (
            self.copies.join(self.matchable_outbox, "event_id", "full_outer")
            .join(carried, "event_id", "full_outer")
            .join(self._prior("topic").withColumn("read_before", F.lit(True)), "event_id", "left")
            .join(losses, "event_id", "left")
            .withColumn("past_grace", self._past_grace(F.coalesce("carried_first_at", "first_at")))
            .cache()
        )

    @cached_property
    def records_classified(self) -> DataFrame:
        """The events read in this window."""
        return self.events.where(rules.in_topic()).withColumn("seen_before", F.coalesce("read_before", F.lit(False)))

    def _past_horizon(self) -> Column:
        if self.horizon is None or self.start is None:  # the first window forgot nothing
            return F.lit(False)
        first_at = F.coalesce("carried_first_at", "first_at")
        return F.coalesce(first_at < F.lit(self.end - self.horizon), F.lit(False))

    def _unmatched(self, rule) -> DataFrame:
        """Records with no outbox row that `rule` picks: this window's new ones and the carried
        ones, which keep their first sighting. Those beyond the horizon are left out."""
        carried = F.coalesce("carried", F.lit(False))
        return self.events.where(rule(EARLIER) & ~self._past_horizon()).select(
            "event_id",
            *(
                F.when(carried, F.col(f"carried_{c}")).otherwise(F.col(c)).alias(c)
                for c in ("first_at", "copies", "partitions", "offsets")
            ),
        )

    @cached_property
    def applies(self) -> DataFrame:
        return (
            self.sink.groupBy("event_id")
            .agg(
                F.count(F.lit(1)).cast("int").alias("copies"),
                F.min(F.struct("applied_at", "key", "version")).alias("first"),
            )
            .cache()
        )

    @cached_property
    def seen_in_sink(self) -> DataFrame:
        return self._prior("sink").unionByName(self.applies.select("event_id")).distinct().cache()

    # ------------------------------------------------------------------ outbox_topic

    def duplicate(self) -> DataFrame:
        return rules.rows(self.events.where(rules.duplicate(EARLIER)), "duplicate", OUTBOX_TOPIC)

    def late(self) -> DataFrame:
        return _late(self.events.where(rules.late(EARLIER)), OUTBOX_TOPIC, "first_at")

    def lost(self) -> DataFrame:
        kind = F.when(F.col("status") == "acked", "lost_acked").otherwise("lost_unacked")
        lost = rules.lost_acked(EARLIER) | rules.lost_unacked(EARLIER)
        return rules.rows(
            self.events.where(lost).select("event_id", "status", F.col("created_at").alias("occurred_at")),
            kind,
            OUTBOX_TOPIC,
        )

    def unknown_landed(self) -> DataFrame:
        return rules.rows(self.events.where(rules.unknown_landed(EARLIER)), "unknown_landed", OUTBOX_TOPIC)

    def unexpected(self) -> DataFrame:
        return rules.rows(
            self._unmatched(rules.unexpected).withColumn("occurred_at", F.col("first_at")), "unexpected", OUTBOX_TOPIC
        )

    def out_of_order(self) -> DataFrame:
        return rules.rows(anomalies.out_of_order(self._observation), "out_of_order", OUTBOX_TOPIC)

    def malformed(self) -> DataFrame:
        return rules.rows(anomalies.malformed(self._observation), "malformed", OUTBOX_TOPIC)

    @property
    def _observation(self) -> anomalies.Observation:
        return anomalies.Observation(
            self.records,
            None,
            self.isolation,
            read_earlier=self._prior("topic"),
            seq_earlier=self._versions("topic"),
        )

    def _versions(self, side: str) -> DataFrame | None:
        """key, max_version: the highest version per key the earlier windows saw on `side`."""
        if self.key_versions is None:
            return None
        return self.key_versions.where(F.col("side") == side).select("key", "max_version")

    # ------------------------------------------------------------------ topic_sink and outbox_sink

    def sink_duplicate(self) -> DataFrame | None:
        if self.sink is None:
            return None
        seen = self._prior("sink").withColumn("seen_before", F.lit(True))
        return rules.rows(
            self.applies.join(seen, "event_id", "left").where(rules.duplicate(SINK_EARLIER)), "duplicate", TOPIC_SINK
        )

    def stale_overwrite(self) -> DataFrame | None:
        """Applied after a newer version of its key had been, in this window or an earlier one."""
        if self.sink is None:
            return None
        applied = self.sink.where(F.col("key").isNotNull() & F.col("version").isNotNull())
        earlier = self._versions("sink")
        if earlier is not None:
            applied = applied.join(earlier, "key", "left")
        stale = (
            rules.stale(
                applied,
                F.col("version"),
                ("applied_at", "version"),
                F.col("max_version") if earlier is not None else None,
            )
            .groupBy("event_id")
            .agg(F.count(F.lit(1)).cast("int").alias("copies"), F.min("applied_at").alias("occurred_at"))
        )
        return rules.rows(stale, "stale_overwrite", TOPIC_SINK)

    def sink_lost(self) -> DataFrame | None:
        if self.sink is None:
            return None
        new = self.records_classified.where(~F.col("seen_before") & self._within("first_at", 1)).select(
            "event_id", "first_at"
        )
        due = self.topic_due_for_sink.select("event_id", "first_at").unionByName(new)
        return rules.rows(
            due.join(self.seen_in_sink, "event_id", "left_anti").withColumn("occurred_at", F.col("first_at")),
            "lost",
            TOPIC_SINK,
        )

    def sink_unexpected(self) -> DataFrame | None:
        if self.sink is None:
            return None
        return rules.rows(
            self.applies.join(self.seen_in_topic, "event_id", "left_anti").withColumn(
                "occurred_at", F.col("first.applied_at")
            ),
            "unexpected",
            TOPIC_SINK,
        )

    def sink_late(self) -> DataFrame | None:
        if self.sink is None:
            return None
        applied = self.applies.withColumn("first_at", F.col("first.applied_at"))
        late = [
            _late(
                applied.join(
                    self.open_losses.where(F.col("stage") == stage).select("event_id", "lost_in_window", "occurred_at"),
                    "event_id",
                ),
                stage,
                "first_at",
            )
            for stage in (TOPIC_SINK, OUTBOX_SINK)
        ]
        return late[0].unionByName(late[1])

    def end_to_end_lost(self) -> DataFrame | None:
        if self.sink is None:
            return None
        due = self.outbox.where((F.col("status") == "acked") & self._within("created_at", 2))
        return rules.rows(
            due.join(self.seen_in_sink, "event_id", "left_anti").withColumn("occurred_at", F.col("created_at")),
            "lost",
            OUTBOX_SINK,
        )

    # ------------------------------------------------------------------ what the window leaves

    def pending(self) -> DataFrame:
        """Records within the grace with no outbox row: the next window's `carried`."""
        return self._unmatched(rules.pending)

    def sightings(self) -> DataFrame:
        """This window's rows of the seen-id index."""
        created = F.coalesce("created_at", "occurred_at")
        topic = self.records_classified.select(
            F.lit("topic").alias("side"),
            "event_id",
            "copies",
            "first_at",
            "partition",
            "offset",
            "key",
            "version",
            created.alias("created_at"),
        )
        if self.sink is None:
            return topic
        sink = self.applies.select(
            F.lit("sink").alias("side"),
            "event_id",
            "copies",
            F.col("first.applied_at").alias("first_at"),
            F.lit(None).cast("int").alias("partition"),
            F.lit(None).cast("bigint").alias("offset"),
            F.col("first.key").alias("key"),
            F.col("first.version").alias("version"),
            F.lit(None).cast("timestamp").alias("created_at"),
        )
        return topic.unionByName(sink)

    def totals(self) -> dict:
        """The window's counts that are not discrepancies, in one job (one row collected)."""
        seen = self.seen_in_topic
        counted = {
            "records_read": self.records,
            "outbox_due": self.due,
            "delivered": self.events.where(F.coalesce("due", F.lit(False)) & rules.read_ever(EARLIER)),
            "pending_outbox": self.outbox.where(~self._past_grace("created_at")).join(seen, "event_id", "left_anti"),
            "pending_records": self.pending(),
            "beyond_horizon": self.events.where(rules.unmatched(EARLIER) & self._past_horizon()),
            **({"sink_rows": self.sink} if self.sink is not None else {}),
        }
        extra = F.when(F.col("seen_before"), F.col("copies")).when(F.col("copies") > 1, F.col("copies") - 1)
        parts = [df.select(F.lit(name).alias("total"), F.lit(1).alias("n")) for name, df in counted.items()]
        parts.append(self.records_classified.select(F.lit("duplicate_copies").alias("total"), extra.alias("n")))
        rows = parts[0]
        for more in parts[1:]:
            rows = rows.unionByName(more)
        got = {r["total"]: int(r["n"] or 0) for r in rows.groupBy("total").agg(F.sum("n").alias("n")).collect()}
        return {
            name: got.get(name, 0)
            for name in (
                "records_read",
                "outbox_due",
                "delivered",
                "duplicate_copies",
                "pending_outbox",
                "pending_records",
                "beyond_horizon",
            )
        } | {"sink_rows": got.get("sink_rows", 0) if self.sink is not None else None}


KINDS = (
    AuditWindow.duplicate,
    AuditWindow.late,
    AuditWindow.lost,
    AuditWindow.unknown_landed,
    AuditWindow.unexpected,
    AuditWindow.out_of_order,
    AuditWindow.malformed,
    AuditWindow.sink_duplicate,
    AuditWindow.stale_overwrite,
    AuditWindow.sink_lost,
    AuditWindow.sink_unexpected,
    AuditWindow.sink_late,
    AuditWindow.end_to_end_lost,
)


def discrepancies(w: AuditWindow) -> DataFrame:
    """Every kind's rows for one window, in one frame."""
    found = [rows for rows in (kind(w) for kind in KINDS) if rows is not None]
    rows = found[0]
    for more in found[1:]:
        rows = rows.unionByName(more)
    return rows


def _late(df: DataFrame, stage: str, at: str) -> DataFrame:
    """Copies of events an earlier window declared lost, with the delay since the loss's origin."""
    delay = (F.unix_millis(F.col(at)) - F.unix_millis(F.col("occurred_at"))).alias("delay_ms")
    return rules.rows(df.select("*", delay), "late", stage)
