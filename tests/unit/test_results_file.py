"""The results file (docs/OPERATIONS.md): the document of a batch audit, a continuous audit's window,
a platform run and a pipeline run, each valid against the package's JSON Schema, and the exit code
its judgement gives: 0 kept, 1 a promise broken (the sink's included) or a --fail-on kind seen."""

from __future__ import annotations

import json

import jsonschema
import pytest

from delivery_semantics import catalog
from delivery_semantics.entry import cli
from delivery_semantics.reporting import results_file

TOTALS = {
    "records_read": 1000,
    "ledger_events": 1000,
    "ledger_acked": 998,
    "distinct_events": 999,
    "delivered_once": 998,
}


def _summary(**over) -> dict:
    counts = {k.summary: 0 for k in catalog.KINDS.values() if k.summary} | {"torn_transactions": None}
    return {
        "reconciliation_id": "audit:quickstart:manual__1",
        "isolation": "read_uncommitted",
        "topic": "quickstart.orders",
        "judged_as": "at_least_once",
        "scenario": "audit",
        **TOTALS,
        "duplicate_copies": 0,
        **counts,
        "loss_rate": 0.0,
        "duplicate_rate": 0.0,
        "promise": "no acked loss",
        "verdict": "kept",
        "broken_by": None,
        "expectation": None,
        "meets_expectation": None,
        "end_offsets": '{"0": 340}',
        "audit": "quickstart",
    } | over


def _window(**over) -> dict:
    return {
        "audit": "orders_stream",
        "window_end": "2026-12-02T06:00:00+00:00",
        "window_start": "2026-12-02T05:00:00+00:00",
        "grace_seconds": 600,
        "dedup_horizon_seconds": 86400,
        "reconciliation_id": "audit:orders_stream:2026-12-02T06:00:00+00:00",
        "topic": "orders",
        "mode": "at_least_once",
        "isolation": "read_uncommitted",
        "outbox_due": 30,
        **dict.fromkeys(catalog.window_columns(), 0),
        "promise": "no acked loss",
        "verdict": "kept",
        "broken_by": None,
        "sink_table": "public.orders_sink",
        "sink_strategy": "upsert",
        "sink_promise": "no loss, no stale overwrite",
        "sink_verdict": "kept",
        "sink_broken_by": None,
    } | over


def _pipeline_row(**over) -> dict:
    return {
        "run_id": "p20261202t060000_1a2b3c",
        "pipeline": "debezium_outbox",
        "scenario": "connect_worker_kill",
        "topic": "p20261202t060000_1a2b3c",
        "records_read": 3010,
        "duplicate_events": 10,
        "duplicate_copies": 20,
        "lost": 0,
        "late": 0,
        "sink_rows": 3000,
        "sink_duplicates": 0,
        "sink_lost": 0,
        "end_to_end_lost": 0,
        "transaction_markers": 0,
        "latency_p50_ms": 40,
        "promise": "no acked loss",
        "verdict": "kept",
        "broken_by": None,
        "expectation": "duplicates possible",
        "meets_expectation": True,
        "sink_verdict": "kept",
    } | over


def _doc(summaries, fail_on=()):
    results = [
        results_file.result(s, results_file.subject_of(s) if "pipeline" not in s else "pipeline") for s in summaries
    ]
    doc = results_file.document("audit run", results, fail_on)
    jsonschema.validate(json.loads(json.dumps(doc, default=str)), results_file.schema())
    return doc


@pytest.mark.parametrize(
    "summaries, subject",
    [
        ([_summary()], "audit"),
        ([_summary(audit=None, judged_as="idempotent", scenario="leader_kill", reconciliation_id="r1")], "run"),
        ([_window()], "window"),
        ([_pipeline_row()], "pipeline"),
    ],
)
def test_each_subjects_document_is_valid_and_kept_gives_0(summaries, subject):
    doc = _doc(summaries)
    assert (doc["verdict"], doc["exit_code"]) == ("kept", 0)
    [r] = doc["results"]
    assert r["subject"]["kind"] == subject
    assert r["rows"]["key"] and all(v is not None for v in r["rows"]["key"].values())
    assert "loss_rate" not in r["counts"] and "grace_seconds" not in r["counts"]


def test_a_broken_promise_gives_1_and_names_its_kinds():
    doc = _doc([_summary(lost_acked=1, verdict="broken", broken_by="lost_acked"), _summary(isolation="read_committed")])
    assert (doc["verdict"], doc["exit_code"]) == ("broken", 1)
    assert doc["results"][0]["broken_by"] == ["lost_acked"] and doc["results"][0]["counts"]["lost_acked"] == 1
    assert doc["results"][0]["counts"]["torn_transactions"] is None, "a kind the observation cannot show is null"


def test_a_sinks_broken_promise_breaks_the_window():
    doc = _doc([_window(sink_lost=2, sink_verdict="broken", sink_broken_by="lost")])
    assert (doc["verdict"], doc["exit_code"]) == ("broken", 1)
    assert doc["results"][0]["sink"]["broken_by"] == ["lost"]


def test_a_kind_named_in_fail_on_fails_a_kept_promise():
    """at_least_once allows duplicates; a team that wants none says --fail-on duplicate."""
    kept = _summary(duplicate_events=3, duplicate_copies=6)
    assert _doc([kept])["exit_code"] == 0
    doc = _doc([kept], fail_on=["duplicate", "lost_acked"])
    assert (doc["verdict"], doc["exit_code"], doc["fail_on_seen"]) == ("kept", 1, ["duplicate"])
    assert _doc([_window(sink_duplicates=1)], fail_on=["duplicate"])["fail_on_seen"] == ["duplicate"]


def test_an_empty_run_is_na_and_exits_0():
    doc = _doc([])
    assert (doc["verdict"], doc["exit_code"], doc["results"]) == ("n/a", 0, [])


def test_the_file_is_written_whole(tmp_path):
    path = tmp_path / "results.json"
    doc = _doc([_summary()])
    results_file.write(path, doc)
    assert json.loads(path.read_text())["results"][0]["reconciliation_id"] == "audit:quickstart:manual__1"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"], "no partial file left beside it"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["audit", "run", "quickstart", "--fail-on", "dupes"], "audit: --fail-on 'dupes': not a kind; one of "),
        (["audit", "run", "quickstart", "--output", "/no/such/folder/r.json"], "audit: --output /no/such/folder"),
        (["reconcile", "--run-id", "r1", "--output", "/"], "reconcile: --output /: not a file"),
        (["pipeline", "run", "--pipeline", "debezium_outbox", "--fail-on", "x"], "pipeline: --fail-on 'x'"),
    ],
)
def test_a_bad_output_or_fail_on_is_refused_before_anything_runs(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err


class _Recorder:
    def __init__(self):
        self.gauges = []

    def gauge(self, name, value, tags=None):
        self.gauges.append((name, value, tags))


def test_a_windows_metrics_name_each_kind_each_guarantee_the_sink_and_the_delays():
    from delivery_semantics.reporting import metrics

    doc = _doc([_window(lost_acked=2, sink_duplicates=1, verdict="broken", broken_by="lost_acked")])
    stats = _Recorder()
    delays = {"outbox_topic_p50_ms": 120.0, "outbox_topic_p99_ms": 900.5, "outbox_sink_p99_ms": 2000.0}
    assert metrics.emit(doc, lambda r: delays, stats) == len(stats.gauges)
    got = {name: value for name, value, _ in stats.gauges}
    assert got["semantics.audit.orders_stream.lost_acked"] == 2
    assert got["semantics.audit.orders_stream.duplicate"] == 1, "the topic's and the sink's stages summed"
    assert got["semantics.audit.orders_stream.guarantee.no_acked_loss"] == 0
    assert got["semantics.audit.orders_stream.sink_kept"] == 1
    assert got["semantics.audit.orders_stream.delay.outbox_topic_p99_ms"] == 900.5
    assert "semantics.audit.orders_stream.delay.topic_sink_p50_ms" not in got, "no delay measured, no gauge"
    assert {tuple(sorted(t)) for _, _, t in stats.gauges} == {("audit", "isolation", "judged_as", "window_end")}
    # Every guarantee at_least_once keeps in force has its gauge; a kept audit's are all 1.
    kept = {n: v for n, v, _ in metrics.gauges(_doc([_summary()])["results"][0]) if ".guarantee." in n}
    assert kept and set(kept.values()) == {1}


def test_report_json_is_the_same_document_for_the_matrixs_runs(monkeypatch, capsys):
    """`report --json`: the matrix's rows (v_run_results' columns) and its pipelines as one document;
    it reports, so it exits 0 even with broken promises in it."""
    from delivery_semantics.reporting import report

    run_row = {
        "mode": "at_least_once_all",
        "client": "librdkafka",
        "scenario": "leader_kill",
        "run_id": "r20261202t060000_aaaaaa",
        "messages": 3000,
        **{c: 0 for c in catalog.summary_columns(in_matrix=True)},
        "duplicate_events": 4,
        "verdict": "kept",
        "broken_by": None,
        "broken_settings": None,
        "settings": {},
        "expectation": "duplicates possible",
        "meets_expectation": True,
    }
    broken = run_row | {
        "run_id": "r20261202t060000_bbbbbb",
        "lost_acked": 3,
        "verdict": "broken",
        "broken_by": "lost_acked",
    }
    monkeypatch.setattr(report, "matrix_rows", lambda run_ids=None: [run_row, broken])
    monkeypatch.setattr(report, "pipeline_rows", lambda run_ids=None, matrix_run=None: [_pipeline_row()])
    assert cli.main(["report", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, results_file.schema())
    assert (doc["command"], doc["verdict"], doc["exit_code"]) == ("report", "broken", 1)
    assert [(r["subject"]["kind"], r["subject"]["name"], r["verdict"]) for r in doc["results"]] == [
        ("run", "r20261202t060000_aaaaaa", "kept"),
        ("run", "r20261202t060000_bbbbbb", "broken"),
        ("pipeline", "p20261202t060000_1a2b3c", "kept"),
    ]
    assert doc["results"][0]["subject"]["judged_as"] == "at_least_once_all"
    assert doc["results"][0]["rows"]["key"] == {"run_id": "r20261202t060000_aaaaaa"}
