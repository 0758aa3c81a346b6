"""Composes the checker: read, classify each isolation level with the anomaly functions, judge,
write. The topic is read once when no transactional producer wrote it (both isolation levels see
the same records), twice otherwise."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker import anomalies, cache, dedup_copy, results
from checker.dedup_copy import DedupCopy
from checker.sources import (
    Jdbc,
    Source,
    committed_transactions,
    fixed_offsets,
    parallelism,
    read_by_platform_reader,
    read_ledger,
    read_polls,
    read_sink,
    read_topic,
)
from delivery_semantics.audit.stores import Store
from delivery_semantics.catalog import READ_COMMITTED, READ_UNCOMMITTED

NO_COPY = DedupCopy("off")


def reconcile(
    spark: SparkSession, jdbc: Jdbc, src: Source, outbox: Store | None = None, copy: DedupCopy = NO_COPY
) -> list[dict]:
    """`jdbc` is the platform's database, which receives the results; `outbox` the store an
    audit's outbox is read from; `copy` where the deduplicated copy goes (checker/dedup_copy.py)."""
    single_read = src.transactional is False and not src.sink
    copy_wanted = src.judged_by_reader and copy.wanted
    reread = copy_wanted and not src.sink and read_by_platform_reader(src)
    if copy_wanted:
        dedup_copy.prepare(spark, copy)
    ledger = read_ledger(jdbc, src, outbox)
    if not src.ledger_wrote_topic:
        ledger = anomalies.without_positions(ledger)  # positions in another topic
    if isinstance(ledger, DataFrame):
        ledger = cache.keep(ledger)
    if src.sink:
        start, end, recorded_before = {}, src.sink.end_offsets, True
        reads = {READ_COMMITTED: cache.keep(read_sink(jdbc, src))}
    else:
        start, end, recorded_before = fixed_offsets(spark, jdbc, src)
        # What is cached is what the kinds read: the id's text is rebuilt from ID_KEY for the rows
        # reported, and the payload only goes to the deduplicated copy. At 10M events the
        # payloads alone outgrow the cache and spill to disk. The timestamps too only go to the copy.
        # The platform reader reads the records again for the copy in less time than caching
        # their payloads costs (docs/BENCHMARKS.md).
        dropped = {"event_id"} if copy_wanted and not reread else {"event_id", "value", "publish_at", "record_at"}
        reads = {
            iso: cache.keep(read_topic(spark, src, iso, start, end).drop(*dropped))
            for iso in ((READ_UNCOMMITTED,) if single_read else src.isolations)
        }
        reads.setdefault(READ_COMMITTED, reads[READ_UNCOMMITTED])
    # A topic read twice: read_committed's records are checked against read_uncommitted's.
    second_read = reads.get(READ_UNCOMMITTED)
    if second_read is reads[READ_COMMITTED]:
        second_read = None
    # What read_committed sees of each event, for read_uncommitted's aborted copies; a topic read
    # once has none to tell apart.
    committed_copies = (
        None
        if single_read
        else reads[READ_COMMITTED]
        .where(F.col("n").isNotNull())
        .groupBy(*anomalies.ID_KEY)
        .agg(F.count(F.lit(1)).cast("int").alias("copies"))
    )
    # Committed transactions are checked whole where the ledger knows their events.
    transactions = cache.keep(committed_transactions(jdbc, src.ledger.run_id)) if src.knows_transactions else None
    # A consumer run's polls are checked against the topic it polled, as it read it.
    polls, polled_topic = read_polls(spark, jdbc, src) if src.polled else (None, None)
    if polled_topic is not None:
        # What the poll kinds read.
        polled_topic = cache.keep(polled_topic.select("partition", "offset", *anomalies.ID_KEY))
    summaries, all_disc, classified = [], None, {}
    for iso in sorted(src.isolations, reverse=True):  # read_uncommitted first
        if single_read and iso == READ_COMMITTED:
            # No transaction in the topic: the same records and the same classification.
            disc_u, counts, obs = classified[READ_UNCOMMITTED]
            disc = disc_u.withColumn("isolation", F.lit(iso))
        else:
            obs = anomalies.Observation(
                reads[iso],
                ledger,
                iso,
                committed_copies if iso == READ_UNCOMMITTED else None,
                sink=bool(src.sink),
                id_prefix=src.id_prefix,
                transactions=transactions if iso == READ_COMMITTED else None,
                polls=polls if iso == READ_COMMITTED else None,
                polled_topic=polled_topic,
                other_read=second_read if iso == READ_COMMITTED else None,
            )
            # The union of the kinds has a partition per branch and shuffle partition, most of them
            # empty: one JDBC connection each on write. A few suffice for what is left.
            disc = cache.keep(anomalies.discrepancies(obs, src.reconciliation_id).coalesce(parallelism(spark)))
            counts = results.counts(disc, anomalies.totals(obs), obs)
        classified[iso] = (disc, counts, obs)
        summaries.append(results.summary(src, iso, counts, end))
        all_disc = disc if all_disc is None else all_disc.unionByName(disc)

    # The consumer-side remedy: one row per event id, the first copy by offset, read as the
    # mode's readers read. A consumer run's records are copies of its input run's, which has
    # these rows already.
    dedup = None
    if copy_wanted:
        defined = src.definition
        _, counts, obs = classified[defined.isolation if defined else READ_COMMITTED]
        if reread:
            # The records the cached read saw, to the last of each partition: with read_committed
            # a transaction open then and ended since shows no more of itself the second time.
            # A partition it saw nothing of is read over an empty range: no task.
            seen = reads[obs.isolation].groupBy("partition").agg(F.max("offset").alias("last")).collect()
            last = {r["partition"]: r["last"] + 1 for r in seen}
            again = read_topic(spark, src, obs.isolation, start, {p: last.get(p, start[p]) for p in end})
            # The id's text as read, rather than rebuilt from ID_KEY: the same text, and no id parsed.
            dedup = obs.first_copies(("event_id", *anomalies.FIRST_COPY), records=again)
        else:
            dedup = obs.first_copies().withColumn("event_id", obs.event_id())
        dedup = dedup.select("event_id", F.lit(src.reconciliation_id).alias("reconciliation_id"), *anomalies.FIRST_COPY)
    results.write_results(spark, jdbc, src, summaries, all_disc, dedup, copy, start, end, recorded_before)
    return summaries
