"""Counts, the one map of what a run counted, keyed by the catalog's kinds: its three constructors
on planted rows, and the one verdict on it against the verdicts the code before it gave.

data/verdicts_before_counts.json was written by the code at d02ce47 (before Counts), from
`git worktree add /tmp/old d02ce47`: `planted` is every subject's verdict, kinds broken and
expectation on planted rows (each count alone at 3, none, all), as a summary row for each mode x
scenario and strategy x scenario pair, as an audit window row for each mode and strategy (and each
strategy as a sink's), and as pipeline totals for each pipeline x scenario pair; `recorded` is the
rows the checker wrote on this machine's stack on 2026-12-02 and 03 (runs of make demo, the
integration suite and prove), with the verdicts it stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from delivery_semantics import catalog, modes
from delivery_semantics.audit import audits
from delivery_semantics.catalog import OUTBOX_SINK, OUTBOX_TOPIC, TOPIC_SINK, Counts
from delivery_semantics.errors import CatalogError

BEFORE = json.loads((Path(__file__).parent / "data" / "verdicts_before_counts.json").read_text())
PLANTED, RECORDED = BEFORE["planted"], BEFORE["recorded"]


def _patterns(columns: list[str]):
    yield {c: 0 for c in columns}
    for c in columns:
        yield {**{d: 0 for d in columns}, c: 3}
    yield {c: 3 for c in columns}


# --------------------------------------------------------------------------- the constructors


def test_a_summary_row_is_the_outbox_topic_stage_each_column_its_kind_and_null_stays_unchecked():
    row = {
        "duplicate_events": 1,
        "lost_acked": 2,
        "lost_unacked": 4,
        "coordinator_aborted": 3,
        "aborted_visible": 5,
        "torn_events": None,
        "duplicate_copies": 99,  # a total, not a kind's count
        "ledger_events": 1000,
    }
    counts = Counts.from_summary(row)
    assert counts == Counts(
        {
            (OUTBOX_TOPIC, "duplicate"): 1,
            (OUTBOX_TOPIC, "lost_acked"): 2,
            (OUTBOX_TOPIC, "lost_unacked"): 4,
            (OUTBOX_TOPIC, "coordinator_aborted"): 3,
            (OUTBOX_TOPIC, "aborted_visible"): 5,
            (OUTBOX_TOPIC, "torn_transaction"): None,
        }
    )
    assert counts.get("torn_transaction") is None and counts.of("torn_transaction") == 0
    assert counts.get("inconsistent_offset") is None, "a column the row lacks is not counted"
    # the losses are the loss kinds as a group; coordinator_aborted is within lost_unacked, not added
    assert counts.losses() == 6 and counts.observe("lost") == 6
    assert counts.losses(TOPIC_SINK) == 0 and counts.observe("lost", TOPIC_SINK) is None
    assert Counts.from_summary({}) == Counts({}) and Counts({}).losses() == 0


def test_a_window_row_counts_each_kind_at_each_stage_through_its_windows():
    row = {col: n for n, col in enumerate(catalog.window_columns(), start=1)}
    counts = Counts.from_window({**row, "records_read": 10_000})
    for col, (stage, kind) in catalog.window_columns().items():
        assert counts.get(kind, stage) == row[col], col
    assert counts.of("duplicate", OUTBOX_TOPIC) == row["duplicate_events"]
    assert counts.of("duplicate", TOPIC_SINK) == row["sink_duplicates"]
    assert counts.losses(OUTBOX_TOPIC) == row["lost_acked"] + row["lost_unacked"]
    assert counts.losses(TOPIC_SINK) == row["sink_lost"] and counts.losses(OUTBOX_SINK) == row["end_to_end_lost"]
    assert counts.get("aborted_visible") is None, "a window does not count aborted copies"


def test_pipeline_totals_read_the_outbox_topic_loss_from_their_lost_column():
    row = {"duplicate_events": 2, "lost": 3, "late": 1, "sink_duplicates": 4, "sink_lost": 5, "end_to_end_lost": 6}
    counts = Counts.from_pipeline({**row, "records_read": 500, "transaction_markers": 7})
    assert counts.get("lost_acked") == 3 and counts.get("lost_unacked") is None
    assert counts.get("late") == 1
    assert counts.losses() == 3 and counts.losses(TOPIC_SINK) == 5 and counts.losses(OUTBOX_SINK) == 6
    assert counts.of("duplicate") == 2 and counts.of("duplicate", TOPIC_SINK) == 4


def test_a_name_no_kind_has_is_an_error_not_a_zero():
    counts = Counts.from_summary({"lost_acked": 2})
    for wrong in ("lost_acks", "duplicate_events", "sink_lost"):
        with pytest.raises(CatalogError):
            counts.of(wrong)
    with pytest.raises(CatalogError):
        counts.of("lost_acked", "topic")
    with pytest.raises(CatalogError):
        Counts({(OUTBOX_TOPIC, "lost_acks"): 1})


# --------------------------------------------------------------------------- the one verdict


def test_every_summary_rows_verdict_and_expectation_is_what_the_code_before_counts_gave():
    columns = PLANTED["columns"]["summary"]
    assert columns == list(catalog.summary_columns())
    for name, scenario, before in PLANTED["summary"]:
        isolation = modes.judged(name).isolation
        for row, (verdict, broken, meets) in zip(_patterns(columns), before, strict=True):
            counts = Counts.from_summary(row)
            assert list(modes.verdict(name, scenario, isolation, counts)) == [verdict, broken], (name, scenario, row)
            assert catalog.meets_expectation(name, scenario, counts) == meets, (name, scenario, row)


def test_every_window_rows_verdicts_are_what_the_code_before_counts_gave_a_sinks_loss_named_lost():
    columns = PLANTED["columns"]["window"]
    assert columns == list(catalog.window_columns())
    for name, sink, before in PLANTED["window"]:
        isolation = modes.judged(name).isolation
        for row, old in zip(_patterns(columns), before, strict=True):
            counts = Counts.from_window(row)
            assert list(modes.verdict(name, audits.AUDIT_SCENARIO, isolation, counts)) == old[:2], (name, row)
            if sink:
                strategy = catalog.get_strategy(sink)
                verdict, broken = modes.verdict(sink, audits.AUDIT_SCENARIO, strategy.isolation, counts, TOPIC_SINK)
                # Before, the sink's loss was passed to the verdict as lost_acked: it is the
                # topic-to-sink stage's own kind now.
                assert [verdict, ["lost_acked" if k == "lost" else k for k in broken]] == old[2:], (sink, row)


def test_every_pipeline_runs_verdicts_and_expectation_are_what_the_code_before_counts_gave():
    columns = PLANTED["columns"]["pipeline"]
    sink = catalog.get_strategy(catalog.PIPELINE_SINK_STRATEGY)
    for name, scenario, before in PLANTED["pipeline"]:
        pipeline = catalog.get_pipeline(name)
        for row, (verdict, broken, meets, sink_verdict) in zip(_patterns(columns), before, strict=True):
            counts = Counts.from_pipeline(row)
            assert list(modes.verdict(name, scenario, pipeline.isolation, counts)) == [verdict, broken], (name, row)
            assert catalog.meets_expectation(name, scenario, counts) == meets, (name, scenario, row)
            sinks = {modes.verdict(sink.name, scenario, sink.isolation, counts, s)[0] for s in catalog.SINK_STAGES}
            assert ("broken" if "broken" in sinks else "kept") == sink_verdict, (name, row)


def test_the_rows_the_checker_recorded_are_judged_again_as_they_were():
    assert len(RECORDED["summary"]) >= 90 and len(RECORDED["pipeline"]) >= 5
    seen = set()
    for r in RECORDED["summary"]:
        counts = Counts.from_summary(r)
        verdict, broken = modes.verdict(r["judged_as"], r["scenario"], r["isolation"], counts)
        assert (verdict, ",".join(broken) or None) == (r["verdict"], r.get("broken_by")), r
        assert catalog.meets_expectation(r["judged_as"], r["scenario"], counts) == r.get("meets_expectation"), r
        seen.add(verdict)
    assert seen == {"kept", "broken", "n/a"}
    for r in RECORDED["pipeline"]:
        counts = Counts.from_pipeline(r)
        verdict, broken = modes.verdict(
            r["pipeline"], r["scenario"], catalog.get_pipeline(r["pipeline"]).isolation, counts
        )
        assert (verdict, ",".join(broken) or None) == (r["verdict"], r.get("broken_by")), r
        assert catalog.meets_expectation(r["pipeline"], r["scenario"], counts) == r.get("meets_expectation"), r


# --------------------------------------------------------------------------- the definition a run keeps


def test_a_definition_is_kept_as_json_and_read_back_whole_with_the_same_digest():
    for name, scenario in [
        *catalog.valid_pairs(),
        ("process_then_commit", "consumer_crash"),
        *catalog.pipeline_pairs(),
    ]:
        defined = modes.definition(name, scenario)
        again = catalog.Definition.from_json(json.loads(json.dumps(defined.to_json())))
        assert again == defined and again.digest == defined.digest, (name, scenario)
        assert defined.expected == catalog.expectation(name, scenario)
        assert list(defined.in_force) == modes.judged(name).promise.in_force(scenario)
    assert modes.definition("no_such_mode", "none") is None
    assert modes.verdict("no_such_mode", "none", catalog.READ_COMMITTED, Counts({})) == ("n/a", [])


def test_the_digest_changes_with_what_the_run_is_judged_against_and_nothing_else():
    base = modes.definition("at_least_once", "leader_kill")
    assert base.digest == modes.definition("at_least_once", "leader_kill").digest
    assert modes.definition("at_least_once", "leader_kill", "java").digest != base.digest, "the client's settings"
    assert modes.definition("at_least_once", "lost_ack").digest != base.digest, "the scenario's guarantees in force"
    assert modes.definition("at_least_once_all", "leader_kill").digest != base.digest


def test_a_kept_definition_judges_as_it_was_made_and_a_damaged_one_is_refused():
    doc = modes.definition("transactional", "txn_abort").to_json()
    # the run's own definition, not the catalog's: a guarantee it did not keep in force breaks nothing
    lifted = catalog.Definition.from_json({**doc, "in_force": ["no_acked_loss"]})
    duplicated = Counts.from_summary({"duplicate_events": 4, "aborted_visible": 2})
    assert lifted.verdict(catalog.READ_COMMITTED, duplicated) == ("kept", [])
    assert catalog.Definition.from_json(doc).verdict(catalog.READ_COMMITTED, duplicated) == (
        "broken",
        ["duplicate", "aborted_visible"],
    )
    assert lifted.verdict(catalog.READ_UNCOMMITTED, duplicated) == ("n/a", [])
    for damaged in (
        {k: v for k, v in doc.items() if k != "in_force"},
        {**doc, "in_force": ["no_such_guarantee"]},
        {**doc, "isolation": "snapshot"},
        {**doc, "extra": 1},
        {**doc, "expected": None},
    ):
        with pytest.raises(CatalogError):
            catalog.Definition.from_json(damaged)
