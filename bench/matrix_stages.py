"""The end-to-end matrix split by stage: one semantics_matrix DAG run (the newest, or --dag-run),
read back from Airflow's metadata database and the ledger.

    MESSAGES=100000 make demo && bench/run matrix_stages

Stages:
- load: each run_pair task (for a consumer strategy: its fresh input run and the consumer run),
  split into the producers' (or consumers') active time and the rest: topic creation, the
  cluster health gates before and after the fault, and the fault's own waits;
- reconcile: each Spark reconciliation (SparkSubmitOperator task), JVM start included;
- report, and Airflow's own time between tasks (the DAG run's wall time minus all task time).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import sqlalchemy as sa

from delivery_semantics.reporting import report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dag-run", help="the Airflow run id (default: the newest semantics_matrix run)")
    args = ap.parse_args(argv)
    engine = sa.create_engine(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    with engine.connect() as c:
        run = c.execute(
            sa.text(
                "SELECT run_id, start_date, end_date, state FROM dag_run WHERE dag_id = 'semantics_matrix' "
                + ("AND run_id = :r " if args.dag_run else "")
                + "ORDER BY start_date DESC LIMIT 1"
            ),
            {"r": args.dag_run},
        ).one()
        tis = c.execute(
            sa.text(
                "SELECT task_id, map_index, rendered_map_index, start_date, end_date FROM task_instance "
                "WHERE dag_id = 'semantics_matrix' AND run_id = :r"
            ),
            {"r": run.run_id},
        ).all()
    wall = (run.end_date - run.start_date).total_seconds()
    per_task = defaultdict(float)
    for t in tis:
        if t.start_date and t.end_date:
            per_task[t.task_id] += (t.end_date - t.start_date).total_seconds()
    pattern = f"semantics_matrix/{run.run_id}/%"
    producer = report.query(
        "SELECT count(*) AS runs, coalesce(sum(messages), 0) AS events, "
        "coalesce(sum(active_seconds), 0) AS active FROM runs WHERE airflow_run_id LIKE %s "
        "OR airflow_run_id LIKE %s",
        (pattern, f"input-of:{pattern}"),
    )[0]
    consumer = report.query(
        "SELECT count(*) AS runs, coalesce(sum(active_seconds), 0) AS active FROM consumer_runs "
        "WHERE airflow_run_id LIKE %s",
        (pattern,),
    )[0]
    load_s = per_task["run_pair"]
    active = float(producer["active"]) + float(consumer["active"])
    rows = [
        ("load: producers and consumers active", active),
        ("load: topic creation, health gates, fault waits", load_s - active),
        ("reconcile (Spark, SparkSubmitOperator)", per_task["reconcile"]),
        ("report", per_task["report"]),
        ("pairs (expansion)", per_task["pairs"]),
        ("Airflow between tasks", wall - sum(per_task.values())),
    ]
    print(
        f"semantics_matrix run {run.run_id} ({run.state}): {wall / 60:.1f} min wall, "
        f"{producer['runs']} producer runs ({producer['events']:,} events), {consumer['runs']} consumer runs"
    )
    print("\n| stage | seconds | share of wall time |\n|---|---|---|")
    for name, secs in rows:
        print(f"| {name} | {secs:,.0f} | {100 * secs / wall:.0f}% |")
    print(f"| **total** | {wall:,.0f} | 100% |")
    n = len([t for t in tis if t.task_id == "reconcile"])
    if n:
        print(f"\nper run: load {load_s / n:.0f} s, reconcile {per_task['reconcile'] / n:.0f} s ({n} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
