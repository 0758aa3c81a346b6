"""One judged subject: a delivery mode (preset or mode file), a consumer strategy and a connector
pipeline behind catalog.Subject, each owning its side, isolation, promise, the scenarios it runs
under, its definition and how a run's counts are read; prove puts each side's findings to runs
through its own SubjectProof, with no branch on what the subject is."""

from __future__ import annotations

import ast
import json

import pytest
from conftest import REPO

from delivery_semantics import catalog, modes
from delivery_semantics.entry import prove

SUBJECTS: list[catalog.Subject] = [*catalog.MODES.values(), *catalog.STRATEGIES.values(), *catalog.PIPELINES.values()]


@pytest.mark.parametrize("subject", SUBJECTS, ids=lambda s: s.name)
def test_each_subject_owns_its_facts_and_is_what_judged_returns(subject):
    assert isinstance(subject, catalog.Subject)
    assert modes.judged(subject.name) is subject
    assert subject.side == catalog.side_of(subject.name)
    assert subject.isolation in catalog.ISOLATIONS and set(subject.rule_families) <= {
        "producer",
        "topic",
        "consumer",
        "connector",
    }
    defined = subject.definition("none")
    assert (defined.name, defined.side, defined.isolation, defined.promise) == (
        subject.name,
        subject.side,
        subject.isolation,
        subject.promise.text,
    )
    assert catalog.Definition.from_json(json.loads(json.dumps(defined.to_json()))).digest == defined.digest


def test_each_subject_runs_under_the_scenarios_its_sides_rules_allow():
    """The same pairs as the rules each side had: a mode's Scenario.incompatible, a pipeline's
    Scenario.incompatible_pipeline, a strategy's consumer scenarios; and a refused pair says why."""
    for s in catalog.SCENARIOS:
        for m in catalog.MODES.values():
            assert m.runs_under(s) == (catalog.SCENARIOS[s].incompatible(m) is None), (m.name, s)
        for p in catalog.PIPELINES.values():
            assert p.runs_under(s) == (catalog.SCENARIOS[s].incompatible_pipeline(p) is None), (p.name, s)
        for st in catalog.STRATEGIES.values():
            assert st.runs_under(s) == (s in catalog.CONSUMER_SCENARIOS), (st.name, s)
    assert sorted((m.name, s) for m in catalog.MODES.values() for s in catalog.SCENARIOS if m.runs_under(s)) == sorted(
        catalog.valid_pairs()
    )
    with pytest.raises(catalog.ScenarioError, match="needs the transactional mode"):
        catalog.MODES["idempotent"].check("txn_abort")
    with pytest.raises(catalog.ScenarioError, match="unknown consumer scenario 'leader_kill': choose one of none, "):
        catalog.STRATEGIES["process_then_commit"].check("leader_kill")
    with pytest.raises(catalog.ScenarioError, match="unknown scenario"):
        catalog.PIPELINES["debezium_outbox"].check("no_such")


def test_a_subjects_counts_are_read_from_its_own_row():
    """A mode's and a strategy's from a summary row (the outbox_topic stage); a pipeline's from its
    run's totals, where `lost` is the outbox-to-topic loss and the sink's losses are its own."""
    summary = {"lost_acked": 2, "lost_unacked": 1, "duplicate_events": 0}
    for s in (catalog.MODES["idempotent"], catalog.STRATEGIES["process_then_commit"]):
        c = s.counts(summary)
        assert (c.of("lost_acked"), c.losses(), c.of("duplicate")) == (2, 3, 0)
    totals = {"lost": 4, "duplicate_events": 1, "sink_lost": 5, "sink_duplicates": 0, "end_to_end_lost": 6}
    c = catalog.PIPELINES["debezium_outbox"].counts(totals)
    assert (c.of("lost_acked"), c.losses(catalog.TOPIC_SINK), c.losses(catalog.OUTBOX_SINK)) == (4, 5, 6)
    assert catalog.PIPELINES["debezium_outbox"].definition("connect_worker_kill").verdict(
        catalog.READ_UNCOMMITTED, c
    ) == ("broken", ["lost_acked"])


def test_a_mode_file_is_a_subject_with_its_clients_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("SEMANTICS_MODES_DIR", str(tmp_path))
    (tmp_path / "orders.yaml").write_text(
        json.dumps({"client": "java", "settings": {"acks": "1"}, "promise": "no_duplicates"})
    )
    subject = modes.judged("orders")
    assert subject.side == catalog.PRODUCER and subject.runs_under("leader_kill")
    assert subject.definition("leader_kill").settings == {"acks": "1"}


def test_prove_has_one_proof_per_side_it_takes_and_no_branch_on_the_subject():
    assert {prove.request("idempotent", []).proof, prove.request(None, [], pipeline="debezium_outbox").proof} == {
        prove.PROOFS[catalog.PRODUCER],
        prove.PROOFS[catalog.PIPELINE_SIDE],
    }
    tree = ast.parse((REPO / "plugins/delivery_semantics/entry/prove.py").read_text())
    compared = [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        and any(isinstance(x, ast.Constant) and x.value in ("mode", "pipeline") for x in [n.left, *n.comparators])
    ]
    assert compared == []
    assert not any(
        isinstance(n, ast.Attribute) and n.attr == "kind" and ast.unparse(n) == "req.kind" for n in ast.walk(tree)
    )
