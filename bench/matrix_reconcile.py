"""The matrix's reconciliation alone, again: every run of one semantics_matrix DAG run reconciled
by one checker application, as the DAG's reconcile task does, with the runs one at a time or side
by side. Each measurement rewrites the same results (a rerun reads the recorded offsets).

    bench/run matrix_reconcile [--dag-run RUN_ID] [--parallel-runs 1,2] [--sample 3]

--sample K takes every K-th run only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reconcile import timed_submit

from delivery_semantics.entry import spark_submit as checker
from delivery_semantics.reporting import report


def matrix_runs(dag_run: str | None) -> tuple[str, list[str]]:
    """The DAG run's id and what its reconcile task reconciled: its mode x scenario runs and its
    consumer runs, in the order they were made."""
    if dag_run is None:
        dag_run = report.query(
            "SELECT split_part(airflow_run_id, '/', 2) AS d FROM runs WHERE airflow_run_id LIKE 'semantics_matrix/%%' "
            "ORDER BY created_at DESC LIMIT 1"
        )[0]["d"]
    pattern = f"semantics_matrix/{dag_run}/%"
    ids = [
        r["id"]
        for r in report.query(
            "SELECT run_id AS id, created_at FROM runs WHERE airflow_run_id LIKE %s "
            "UNION ALL SELECT consumer_run_id, created_at FROM consumer_runs WHERE airflow_run_id LIKE %s "
            "ORDER BY created_at",
            (pattern, pattern),
        )
    ]
    return dag_run, ids


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dag-run", help="the Airflow run id (default: the newest semantics_matrix run)")
    ap.add_argument("--parallel-runs", default="1,2", help="comma-separated: runs reconciled side by side")
    ap.add_argument("--sample", type=int, default=1, help="every K-th run only")
    args = ap.parse_args(argv)
    dag_run, ids = matrix_runs(args.dag_run)
    ids = ids[:: args.sample]
    if not ids:
        print(f"matrix_reconcile: no runs for {dag_run}", file=sys.stderr)
        return 2
    print(f"semantics_matrix {dag_run}: {len(ids)} runs in one application\n")
    print("| runs side by side | seconds | Spark JVM peak MB | summaries |\n|---|---|---|---|")
    verdicts = {}
    for n in (int(x) for x in args.parallel_runs.split(",")):
        run_args = checker.reconcile_args(ids)
        if n > 1:
            run_args += ["--parallel-runs", str(n)]
        r = timed_submit(checker.command(run_args))
        verdicts[n] = sorted(r["summary"])
        print(f"| {n} | {r['seconds']:.1f} | {r.get('jvm_mb', '-')} | {len(r['summary'])} |", flush=True)
    first = next(iter(verdicts.values()))
    same = all(v == first for v in verdicts.values())
    print(f"\nevery summary the same whatever the runs side by side: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
