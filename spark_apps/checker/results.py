"""The checker's results: the counts and verdict per isolation level, and how they are written.
Spark writes the discrepancies and the deduplicated copy to staging tables; one database
transaction then merges them with the summary rows, so a rerun leaves every row as the first run
did."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker.anomalies import Observation
from checker.sources import Jdbc, Source
from delivery_semantics import catalog


def counts(disc: DataFrame, totals: dict, obs: Observation) -> dict:
    """The summary's counts from one isolation level's discrepancies (a few rows collected) and
    totals. A count that does not apply to the observation is None."""
    kinds = {
        r["kind"]: (r["events"], r["copies"])
        for r in disc.groupBy("kind").agg(F.count(F.lit(1)).alias("events"), F.sum("copies").alias("copies")).collect()
    }
    malformed = kinds.get("malformed", (0, 0))[0]
    return {
        "records_read": int(totals["records_with_id"]) + malformed,
        "ledger_events": totals["ledger_events"],
        "ledger_acked": totals["ledger_acked"],
        "distinct_events": totals["distinct_events"],
        "delivered_once": totals["delivered_once"],
        "duplicate_events": kinds.get("duplicate", (0, 0))[0],
        "duplicate_copies": int(totals["duplicate_copies"]),
        "lost_acked": kinds.get("lost_acked", (0, 0))[0],
        "lost_unacked": kinds.get("lost_unacked", (0, 0))[0],
        "unknown_landed": kinds.get("unknown_landed", (0, 0))[0],
        "unexpected": kinds.get("unexpected", (0, 0))[0],
        "out_of_order": kinds.get("out_of_order", (0, 0))[0],
        "aborted_visible": int(kinds.get("aborted_visible", (0, 0))[1] or 0),
        "malformed": malformed,
        "torn_events": kinds.get("torn_transaction", (0, 0))[0] if obs.transactions is not None else None,
        "inconsistent_offsets": (kinds.get("inconsistent_offset", (0, 0))[0] if obs.knows_positions else None),
        "poll_skips": kinds.get("poll_skip", (0, 0))[0] if obs.polls is not None else None,
        "nonmonotonic_polls": kinds.get("nonmonotonic_poll", (0, 0))[0] if obs.polls is not None else None,
        "stale_overwrites": kinds.get("stale_overwrite", (0, 0))[0] if obs.sink else None,
    }


def summary(src: Source, isolation: str, counts: dict, end: dict) -> dict:
    """One `reconcile_summary` row: the counts, rates, and the verdict and expectation the catalog
    gives for the run's mode or strategy under its scenario."""
    n = max(1, counts["ledger_events"])
    name = src.mode or ""
    verdict, broken = catalog.verdict(name, src.scenario, isolation, counts)
    subject = catalog.judged(name)
    return {
        "reconciliation_id": src.reconciliation_id,
        "isolation": isolation,
        "topic": src.topic,
        "mode": src.mode or None,
        "scenario": src.scenario,
        **counts,
        "loss_rate": (counts["lost_acked"] + counts["lost_unacked"]) / n,
        "duplicate_rate": counts["duplicate_copies"] / n,
        "promise": subject.promise.text if subject else None,
        "verdict": verdict,
        "broken_by": ",".join(broken) or None,
        "expectation": catalog.expectation_text(name, src.scenario) if name else None,
        "meets_expectation": catalog.meets_expectation(name, src.scenario, counts) if name else None,
        "end_offsets": json.dumps({str(p): o for p, o in sorted(end.items())}),
        "audit": src.audit,
    }


def write_results(
    spark: SparkSession,
    jdbc: Jdbc,
    src: Source,
    summaries: list[dict],
    disc: DataFrame,
    dedup: DataFrame,
    start: dict,
    end: dict,
    recorded_before: bool,
) -> None:
    token = jdbc.staging_token(src.reconciliation_id)
    stg_disc, stg_dedup = f"stg_discrepancies_{token}", f"stg_dedup_{token}"
    rid = src.reconciliation_id
    jdbc.write(disc, stg_disc)
    if dedup is not None:
        jdbc.write(dedup, stg_dedup)
    try:
        stmts: list[tuple[str, list]] = []
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
        if dedup is not None:
            # First copy by offset wins; a later version of an event replaces it only if it is newer.
            stmts.append(
                (
                    f"INSERT INTO dedup_events (event_id, reconciliation_id, key, seq, publish_at, "
                    f'"partition", "offset", value) SELECT event_id, reconciliation_id, key, seq, '
                    f'publish_at, "partition", "offset", value FROM {stg_dedup} ON CONFLICT (event_id) '
                    "DO UPDATE SET reconciliation_id = EXCLUDED.reconciliation_id, key = EXCLUDED.key, "
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
