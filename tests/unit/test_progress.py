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
    everything = len(catalog.valid_pairs()) * len(catalog.CLIENTS) + len(catalog.MATRIX_STRATEGIES)
    assert matrix_size({"messages": 100, "pipelines": []}) == everything == 84
    assert matrix_size({"messages": 100}) == 84 + 16, "and the pipeline block: every pipeline x scenario pair"
    assert matrix_size({"pipelines": ["debezium_outbox"], "pipeline_scenarios": ["none", "coordinator_kill"]}) == 85
    one = {"modes": ["idempotent"], "scenarios": ["none", "lost_ack"], "consumer_strategies": [], "pipelines": []}
    assert matrix_size(one) == 4, "each pair on each client"
    assert matrix_size({**one, "clients": ["java"]}) == 2


def test_a_reconciliation_steps_once_a_run_or_window_on_stderr(capsys):
    from delivery_semantics.entry.cli import _progress

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


def test_the_tour_shows_each_behaviour_once_and_names_only_valid_pairs():
    from delivery_semantics import matrix
    from delivery_semantics.reporting.progress import _with_defaults

    params = _with_defaults(catalog.TOUR)
    runs = matrix.matrix_confs(params)
    pairs = {(c.get("mode") or c["strategy"], c["scenario"], c.get("client")) for c in runs}
    assert {
        ("at_most_once", "leader_kill", "librdkafka"),
        ("at_least_once", "lost_ack", "librdkafka"),
        ("at_least_once", "lost_ack", "java"),
        ("at_least_once", "isolated_leader", "librdkafka"),
        ("at_least_once_all", "isolated_leader", "librdkafka"),
        ("idempotent", "producer_crash", "librdkafka"),
        ("transactional", "producer_crash", "librdkafka"),
        ("transactional", "txn_abort", "librdkafka"),
    } | {(s, "consumer_crash", None) for s in catalog.MATRIX_STRATEGIES} == pairs
    pipelines = {(c["pipeline"], c["scenario"]) for c in matrix.pipeline_confs(params)}
    assert pipelines == {("debezium_outbox", "connect_worker_kill"), ("debezium_outbox_eos", "connect_worker_kill")}
    assert matrix_size(catalog.TOUR) == 14


def test_a_pair_the_form_names_is_checked_whole():
    from delivery_semantics import matrix
    from delivery_semantics.reporting.progress import _with_defaults

    base = _with_defaults({})
    for bad, message in (
        ("idempotent lost_ack", "is not 'MODE x SCENARIO'"),
        ("idempotent x lost_ack on kotlin", "unknown client 'kotlin'"),
        ("at_most_once x txn_abort", "txn_abort needs the transactional mode"),
        ("nosuch x lost_ack", "nosuch"),
        ("idempotent x lost_ack\r\nbootstrap.servers=evil", "is not 'MODE x SCENARIO'"),
    ):
        try:
            matrix.matrix_confs({**base, "pairs": [bad]})
        except matrix.ConfError as e:
            assert message in str(e), (bad, str(e))
        else:
            raise AssertionError(f"{bad!r} was taken")
    try:
        matrix.pipeline_confs({**base, "pipeline_pairs": ["debezium_outbox x coordinator_kill"]})
    except matrix.ConfError as e:
        assert "coordinator_kill" in str(e)
    else:
        raise AssertionError("coordinator_kill needs exactly-once support")


def test_the_eta_weighs_each_step_by_its_kind():
    from delivery_semantics.reporting.progress import matrix_work

    steps, reconcile = matrix_work({"messages": 15000, **catalog.TOUR})
    p = Progress(len(steps), "matrix run", io.StringIO(), work=sum(steps) + reconcile)
    p.work_done = steps[0]  # the first paced run, at the model's own pace
    assert abs(p.eta(steps[0]) - (sum(steps[1:]) + reconcile)) < 1e-6
    # Pipelines cost about three paced runs: an unweighted ETA after one run would be far short.
    unweighted = steps[0] * (len(steps) - 1)
    assert p.eta(steps[0]) > unweighted * 1.2


def test_a_first_run_slower_than_its_model_moves_the_eta_by_its_share_not_its_ratio():
    """The matrix's first run, an isolated leader, healed in 52 s against its model's 41: alone it
    would have made the whole ETA a quarter long; starting from the model's pace, 7%."""
    from delivery_semantics.reporting.progress import reconcile_seconds, step_seconds

    first = step_seconds("isolated_leader", "librdkafka")
    assert first == 41.0
    work = 100 * first + reconcile_seconds(100, 15000)  # as if a matrix of such runs followed
    p = Progress(100, "matrix run", io.StringIO(), work=work)
    p.work_done = first
    slow = 52.0
    predicted = slow + p.eta(slow)
    assert 1.0 < predicted / work < 1.08, predicted / work
    assert slow / first > 1.25, "the first run's own pace: a quarter long"
