"""Progress for a person watching a long command: run k of N with its mode (or strategy),
scenario and stage, the time elapsed and an ETA. On a terminal it is a live bar (tqdm); piped
into a file or another program, one line per run.

    python -m delivery_semantics.reporting.progress matrix --conf '{"messages": 15000}' --log var/logs/demo.log

runs `airflow dags test semantics_matrix` with that conf, its output to the log, and follows its
runs in the ledger while it goes: each run's line comes when its load has ended (the matrix loads
its runs one at a time, then reconciles them all in one Spark application), then one line when
the reconciliation has written every run's verdict; a connector pipeline's line comes when it has
been audited. Exits with the DAG run's exit status.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from delivery_semantics import catalog, clients, forms, matrix
from delivery_semantics.plumbing.db import query
from delivery_semantics.reporting.report import row_label


def clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}" if m < 60 else f"{m // 60}:{m % 60:02d}:{s:02d}"


class Progress:
    """Steps of known count: a bar on a terminal, a line a step otherwise."""

    def __init__(self, total: int, what: str, stream: TextIO = sys.stdout, work: float | None = None):
        """`work`: the steps' expected cost in all (seconds of a model, any unit), when steps differ;
        each step then says its own, and the ETA is the cost left at the pace so far, which starts
        at the model's own and moves to the pace observed as steps are done (PRIOR_WORK)."""
        self.total, self.what, self.stream, self.done = total, what, stream, 0
        self.work, self.work_done = work, 0.0
        self.started = time.monotonic()
        self.bar = None
        if stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=what, unit="run", file=stream, dynamic_ncols=True)

    def step(self, label: str, work: float = 1.0) -> str:
        self.done += 1
        self.work_done += work
        elapsed = time.monotonic() - self.started
        eta = self.eta(elapsed)
        line = f"{self.what} {self.done}/{self.total}: {label} | elapsed {clock(elapsed)}, eta {clock(eta)}"
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
        else:
            print(line, file=self.stream, flush=True)
        return line

    def eta(self, elapsed: float) -> float:
        if self.work is None:
            return elapsed / self.done * (self.total - self.done)
        pace = (elapsed + PRIOR_WORK) / (self.work_done + PRIOR_WORK)
        return pace * max(self.work - self.work_done, 0.0)

    def advance(self, work: float) -> None:
        """Work done that is not a step of its own (the reconciliation of every run at the end)."""
        self.work_done += work

    def note(self, text: str) -> None:
        text = f"{text} | elapsed {clock(time.monotonic() - self.started)}"
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# A matrix run's rows: its producer runs and its consumer runs (not their input runs, which are
# keyed `input-of:...`), made after the watch began.
_MATRIX_RUNS = """
    SELECT run_id, mode, client, scenario, status FROM runs
    WHERE airflow_run_id LIKE 'semantics_matrix/%%' AND created_at >= %(since)s
    UNION ALL
    SELECT consumer_run_id, strategy, NULL, scenario, status FROM consumer_runs
    WHERE airflow_run_id LIKE 'semantics_matrix/%%' AND created_at >= %(since)s"""
_PIPELINE_RUNS = """
    SELECT run_id, pipeline AS label, scenario, status FROM pipeline_runs
    WHERE airflow_run_id LIKE 'semantics_matrix/%%' AND created_at >= %(since)s"""


def _with_defaults(conf: dict) -> dict:
    """The matrix DAG's params for this conf: its form's defaults filled in."""
    return {**{name: spec.get("default") for name, spec in forms.matrix_form().items()}, **conf}


def matrix_sizes(conf: dict) -> tuple[int, int]:
    """How many runs the matrix DAG makes for this conf, its form's defaults filled in: producer
    and consumer runs, and pipeline runs."""
    params = _with_defaults(conf)
    return len(matrix.matrix_confs(params)), len(matrix.pipeline_confs(params))


def matrix_size(conf: dict) -> int:
    return sum(matrix_sizes(conf))


# What each kind of step of the matrix costs, in seconds on this machine (2 cores), measured on
# `make matrix` (100 runs, 2026-11-29, docs/BENCHMARKS.md): a paced run its load and its heal, by
# scenario (an isolated leader heals longest); a run with no fault or an unpaced one seconds; a
# consumer run under its crash 11 s; a pipeline run and its audit 86-121 s by scenario; the one
# reconciliation of every run at the end, 564 s for 84 runs of 15,000 events. The ETA scales them
# by the pace so far, so that whichever run comes first predicts the rest.
STEP_SECONDS = {"paced": catalog.LOAD_SECONDS + 4.0, "unpaced": 8.0, "consumer": 11.0, "pipeline": 105.0}
SCENARIO_SECONDS = {
    "none": 6.0,
    "txn_abort": 15.0,
    "leader_kill": 32.0,
    "coordinator_kill": 33.0,
    "lost_ack": 33.0,
    "producer_crash": 35.0,
    "rolling_restart": 35.0,
    "partitioned_leader": 37.0,
    "shrunk_isr_leader_kill": 38.0,
    "isolated_leader": 41.0,
}
PIPELINE_SECONDS = {
    "none": 87.0,
    "coordinator_kill": 92.0,
    "outbox_db_restart": 102.0,
    "sink_worker_kill": 102.0,
    "connect_rebalance": 108.0,
    "leader_kill": 109.0,
    "connect_worker_kill": 118.0,
    "rolling_restart": 119.0,
    "poison_records": 121.0,
}
RECONCILE_SECONDS = {"start": 40.0, "per_run": 5.6, "per_million_events": 40.0}
# The model's seconds the ETA's pace starts from: the first run's own pace (an isolated leader
# healing in 52 s or in 31 s) would otherwise set the whole ETA, 51% long after that 52 s run.
PRIOR_WORK = 120.0


def step_seconds(scenario: str, client: str | None = None, consumer: bool = False, pipeline: bool = False) -> float:
    if pipeline:
        return PIPELINE_SECONDS.get(scenario, STEP_SECONDS["pipeline"])
    if consumer:
        return STEP_SECONDS["consumer"]
    paced = catalog.SCENARIOS[scenario].paced if scenario in catalog.SCENARIOS else False
    seconds = SCENARIO_SECONDS.get(scenario, STEP_SECONDS["paced"] if paced else STEP_SECONDS["unpaced"])
    return seconds + (clients.spec(client).start_seconds if client else 0.0)


def reconcile_seconds(runs: int, messages: int) -> float:
    r = RECONCILE_SECONDS
    return r["start"] + runs * (r["per_run"] + r["per_million_events"] * messages / 1e6)


def matrix_work(conf: dict) -> tuple[list[float], float]:
    """Each run's expected seconds, in the DAG's order, and the reconciliation's."""
    params = _with_defaults(conf)
    confs = matrix.matrix_confs(params)
    runs = [step_seconds(c["scenario"], c.get("client"), consumer="strategy" in c) for c in confs]
    runs += [step_seconds(c["scenario"], pipeline=True) for c in matrix.pipeline_confs(params)]
    return runs, reconcile_seconds(len(confs), int(params["messages"]))


def follow_matrix(
    proc: subprocess.Popen,
    total: int,
    since: datetime,
    progress: Progress,
    poll: float = 2.0,
    pipelines: int = 0,
    reconcile_work: float = 0.0,
) -> None:
    """Reports each run of the matrix as its load ends, then the reconciliation, until `proc`
    exits; and each pipeline run once audited (`pipelines` of the `total`)."""
    loaded: set[str] = set()
    audited: set[str] = set()
    stage = "load"
    while True:
        running = proc.poll() is None
        for r in sorted(query(_MATRIX_RUNS, {"since": since}), key=lambda r: r["run_id"]):
            if r["run_id"] not in loaded and r["status"] in ("completed", "failed"):
                loaded.add(r["run_id"])
                work = step_seconds(r["scenario"], r["client"], consumer=r["client"] is None)
                progress.step(f"{row_label(r)} x {r['scenario']} loaded ({r['status']})", work)
        if pipelines:
            for r in sorted(query(_PIPELINE_RUNS, {"since": since}), key=lambda r: r["run_id"]):
                if r["run_id"] not in audited and r["status"] in ("reconciled", "failed"):
                    audited.add(r["run_id"])
                    work = step_seconds(r["scenario"], pipeline=True)
                    progress.step(f"pipeline {r['label']} x {r['scenario']} {r['status']}", work)
        if stage == "load" and loaded and len(loaded) >= total - pipelines:
            stage = "reconcile"
            progress.note(f"reconciling {len(loaded)} runs in one Spark application")
        if stage == "reconcile":
            judged = query(
                "SELECT count(DISTINCT reconciliation_id) AS n FROM reconcile_summary WHERE reconciliation_id = ANY(%s)",
                (sorted(loaded),),
            )[0]["n"]
            if judged >= len(loaded):
                stage = "reported"
                progress.advance(reconcile_work)
                progress.note(f"reconciled {judged} runs")
        if not running:
            return
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("matrix", help="airflow dags test semantics_matrix, followed run by run")
    m.add_argument("--conf", default="{}", help="the DAG run's conf (JSON), as the matrix form takes it")
    m.add_argument("--log", required=True, help="where the DAG run's own output goes")
    args = ap.parse_args(argv)
    try:
        conf = json.loads(args.conf)
        runs, pipelines = matrix_sizes(conf)
        total = runs + pipelines
        steps, reconcile_work = matrix_work(conf)
    except (ValueError, matrix.ConfError) as e:
        print(f"progress: bad matrix conf: {e}", file=sys.stderr)
        return 2
    since = datetime.now(UTC)
    progress = Progress(total, "matrix run", work=sum(steps) + reconcile_work)
    with open(args.log, "w") as log:
        proc = subprocess.Popen(
            ["airflow", "dags", "test", "semantics_matrix", "-c", json.dumps(conf)],  # noqa: S607 (the venv's airflow, first on the PATH the stack sets)
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            follow_matrix(proc, total, since, progress, pipelines=pipelines, reconcile_work=reconcile_work)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            progress.close()
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
