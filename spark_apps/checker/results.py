"""The checker's results: the counts and verdict per isolation level, and how they are written.
Spark writes the discrepancies and the deduplicated copy to staging tables; one database
transaction then merges them with the summary rows, so a rerun leaves every row as the first run
did."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker import dedup_copy
from checker.anomalies import Observation, OutcomeLedger
from checker.dedup_copy import DedupCopy
from checker.sources import Jdbc, Source
from delivery_semantics import catalog


def counts(disc: DataFrame, totals: dict, obs: Observation) -> dict:
    """The summary's counts from one isolation level's discrepancies (a few rows collected) and
    totals. A count that does not apply to the observation is None."""
    kinds = {
        r["kind"]: (r["events"], r["copies"])
        for r in disc.groupBy("kind").agg(F.count(F.lit(1)).alias("events"), F.sum("copies").alias("copies")).collect()
    }
    # The kinds this observation cannot show: their counts are NULL, not 0.
    unchecked = {
        "torn_transaction": obs.transactions is None,
        "inconsistent_offset": not obs.knows_positions,
        "poll_skip": obs.polls is None,
        "nonmonotonic_poll": obs.polls is None,
        "stale_overwrite": not obs.sink,
        "coordinator_aborted": not (isinstance(obs.ledger, OutcomeLedger) and obs.ledger.transactional),
    }
    counted = {
        k.summary: None if unchecked.get(k.name) else int(kinds.get(k.name, (0, 0))[1 if k.copies else 0] or 0)
        for k in catalog.KINDS.values()
        if k.summary
    }
    return {
        "records_read": int(totals["records_with_id"]) + counted["malformed"],
        "ledger_events": totals["ledger_events"],
        "ledger_acked": totals["ledger_acked"],
        "distinct_events": totals["distinct_events"],
        "delivered_once": totals["delivered_once"],
        "duplicate_copies": int(totals["duplicate_copies"]),
        **counted,
    }


def summary(src: Source, isolation: str, counts: dict, end: dict) -> dict:
    """One `reconcile_summary` row: the counts, rates, and the verdict and expectation of what the
    run is judged against (its recorded catalog.Definition)."""
    n = max(1, counts["ledger_events"])
    defined = src.definition
    counted = catalog.Counts.from_summary(counts)
    verdict, broken = defined.verdict(isolation, counted) if defined else ("n/a", [])
    return {
        "reconciliation_id": src.reconciliation_id,
        "isolation": isolation,
        "topic": src.topic,
        "judged_as": src.judged_as or None,
        "scenario": src.scenario,
        **counts,
        "loss_rate": counted.losses() / n,
        "duplicate_rate": counts["duplicate_copies"] / n,
        "promise": defined.promise if defined else None,
        "verdict": verdict,
        "broken_by": ",".join(broken) or None,
        "broken_settings": ", ".join(catalog.broken_settings(src.findings, broken)) or None,
        "expectation": defined.expectation_text if defined else None,
        "meets_expectation": defined.meets(counted) if defined else None,
        "end_offsets": json.dumps({str(p): o for p, o in sorted(end.items())}),
        "audit": src.audit,
    }


def write_results(
    spark: SparkSession,
    jdbc: Jdbc,
    src: Source,
    summaries: list[dict],
    disc: DataFrame,
    dedup: DataFrame | None,
    copy: DedupCopy,
    start: dict,
    end: dict,
    recorded_before: bool,
) -> None:
    token = jdbc.staging_token(src.reconciliation_id)
    stg_disc, stg_dedup = f"stg_discrepancies_{token}", f"stg_dedup_{token}"
    rid = src.reconciliation_id
    jdbc.write(disc, stg_disc)
    stmts: list[tuple[str, list]] = []
    try:
        if dedup is not None and copy.store == "lakehouse":
            version, rows = dedup_copy.write_lakehouse(spark, copy, dedup, rid)
            # Switching stores: the reconciliation's copy is where dedup_copies says, and only there.
            stmts.append(("DELETE FROM dedup_events WHERE reconciliation_id = ?", [rid]))
            stmts.append(_copy_recorded(rid, copy, version, rows))
        elif dedup is not None:
            jdbc.execute_in_transaction([(f"CREATE UNLOGGED TABLE {stg_dedup} (LIKE dedup_events)", [])])
            rows = dedup_copy.copy_into(
                dedup.select(*dedup_copy.COLUMNS), jdbc.url, jdbc.user, jdbc.password, stg_dedup
            )
            stmts.append(_copy_recorded(rid, copy, None, rows))
        if not recorded_before:
            for p in sorted(end):
                stmts.append(
                    (
                        'INSERT INTO reconcile_offsets (reconciliation_id, topic, "partition", start_offset, '
                        "end_offset) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        [rid, src.topic, p, start[p], end[p]],
                    )
                )
        stmts.append(("DELETE FROM reconcile_discrepancies WHERE reconciliation_id = ?", [rid]))
        stmts.append(
            (
                f"INSERT INTO reconcile_discrepancies (reconciliation_id, isolation, event_id, kind, copies, "
                f'"partitions", "offsets") SELECT reconciliation_id, isolation, event_id, kind, copies, '
                f'"partitions", "offsets" FROM {stg_disc}',
                [],
            )
        )
        for s in summaries:
            cols = list(s)
            marks = ", ".join("?::jsonb" if c == "end_offsets" else "?" for c in cols)
            stmts.append(
                (
                    f"INSERT INTO reconcile_summary ({', '.join(cols)}) VALUES ({marks}) "
                    f"ON CONFLICT (reconciliation_id, isolation) DO UPDATE SET "
                    + ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in ("reconciliation_id", "isolation")),
                    [s[c] for c in cols],
                )
            )
        if dedup is not None and copy.store == "postgres":
            # First copy by offset wins; a later version of an event replaces it only if it is newer.
            stmts.append(
                (
                    f"INSERT INTO dedup_events (event_id, reconciliation_id, key, seq, publish_at, "
                    f'"partition", "offset", value) SELECT event_id, reconciliation_id, key, seq, '
                    f'publish_at, "partition", "offset", value FROM {stg_dedup} ON CONFLICT (reconciliation_id, event_id) '
                    "DO UPDATE SET key = EXCLUDED.key, "
                    'seq = EXCLUDED.seq, publish_at = EXCLUDED.publish_at, "partition" = EXCLUDED."partition", '
                    '"offset" = EXCLUDED."offset", value = EXCLUDED.value '
                    "WHERE EXCLUDED.publish_at > dedup_events.publish_at",
                    [],
                )
            )
        stmts.append(("INSERT INTO reconcile_jobs (reconciliation_id, staged_as) VALUES (?, ?)", [rid, token]))
        jdbc.execute_in_transaction(stmts)
    finally:
        jdbc.execute_in_transaction(
            [(f"DROP TABLE IF EXISTS {stg_disc}", []), (f"DROP TABLE IF EXISTS {stg_dedup}", [])]
        )


def _copy_recorded(rid: str, copy: DedupCopy, version: int | None, rows: int) -> tuple[str, list]:
    return (
        "INSERT INTO dedup_copies (reconciliation_id, store, location, delta_version, row_count) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (reconciliation_id) DO UPDATE SET store = EXCLUDED.store, "
        "location = EXCLUDED.location, delta_version = EXCLUDED.delta_version, "
        "row_count = EXCLUDED.row_count, written_at = now()",
        [rid, copy.store, copy.location, version, rows],
    )
