"""Progress as a person sees it: one line a run when the output is piped, and the matrix's size
from the form's defaults."""

from __future__ import annotations

import io

from delivery_semantics import catalog
from delivery_semantics.reporting.progress import Progress, clock, matrix_size


def test_piped_progress_is_one_line_a_step_with_elapsed_and_eta():
    out = io.StringIO()
    p = Progress(3, "matrix run", out)
    p.step("at_least_once x none loaded (completed)")
    p.step("idempotent x lost_ack loaded (completed)")
    p.note("reconciling 2 runs")
    lines = out.getvalue().splitlines()
    assert [ln.split(" | ")[0] for ln in lines] == [
        "matrix run 1/3: at_least_once x none loaded (completed)",
        "matrix run 2/3: idempotent x lost_ack loaded (completed)",
        "reconciling 2 runs",
    ]
    assert all(", eta " in ln for ln in lines[:2]) and "elapsed" in lines[2]


def test_clock_reads_minutes_and_hours():
    assert (clock(5), clock(65), clock(3725)) == ("0:05", "1:05", "1:02:05")


def test_the_matrix_size_follows_the_form():
    everything = len(catalog.valid_pairs()) * len(catalog.CLIENTS) + len(catalog.STRATEGIES)
    assert matrix_size({"messages": 100, "pipelines": []}) == everything == 76
    assert matrix_size({"messages": 100}) == 76 + 13, "and the pipeline block: every pipeline x scenario pair"
    assert matrix_size({"pipelines": ["debezium_outbox"], "pipeline_scenarios": ["none", "coordinator_kill"]}) == 77
    one = {"modes": ["idempotent"], "scenarios": ["none", "lost_ack"], "consumer_strategies": [], "pipelines": []}
    assert matrix_size(one) == 4, "each pair on each client"
    assert matrix_size({**one, "clients": ["java"]}) == 2


def test_a_reconciliation_steps_once_a_run_or_window_on_stderr(capsys):
    from delivery_semantics.plumbing.cli import _progress

    with _progress(2, "reconciled run") as on_result:
        on_result({"reconciliation_id": "r1", "isolation": "read_committed", "verdict": "kept", "broken_by": None})
        on_result({"reconciliation_id": "r1", "isolation": "read_uncommitted", "verdict": "kept", "broken_by": None})
        on_result(
            {"reconciliation_id": "r2", "isolation": "read_uncommitted", "verdict": "broken", "broken_by": "lost_acked"}
        )
    out, err = capsys.readouterr()
    assert out == "", "stdout keeps the JSON summaries alone"
    assert [ln.split(" | ")[0] for ln in err.splitlines()] == [
        "spark-submit: 2 to reconcile",
        "reconciled run 1/2: r1: kept",
        "reconciled run 2/2: r2: broken (lost_acked)",
    ]
