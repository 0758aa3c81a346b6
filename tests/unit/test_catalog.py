"""The catalog's verdicts and expectations for every mode x scenario pair and every consumer
strategy, against DESIGN.md §2 and §3 written out here independently."""

from __future__ import annotations

import pytest

from delivery_semantics import catalog, forms, modes

# DESIGN.md §2: the kinds that break each mode's promise, and the scenarios that lift a guarantee.
BREAKS = {
    "at_most_once": ["duplicate"],
    "at_least_once": ["lost_acked"],
    "at_least_once_all": ["lost_acked"],
    "idempotent": ["duplicate", "lost_acked"],
    "transactional": ["duplicate", "lost_acked", "aborted_visible", "torn_transaction"],
    "commit_before_process": ["duplicate"],
    "process_then_commit": ["lost_acked"],
    "process_then_commit_dedup": ["duplicate", "lost_acked", "stale_overwrite"],
    "transactional_copy": ["duplicate", "lost_acked", "aborted_visible"],
    "auto_commit": [],
    "start_at_latest": ["duplicate"],
    "slow_poll_loop": ["lost_acked"],
    "debezium_outbox": ["lost_acked"],
    "debezium_outbox_eos": ["duplicate", "lost_acked", "aborted_visible"],
    "debezium_outbox_tolerant": ["lost_acked"],
}
LIFTED = {
    ("at_least_once", "leader_kill"): "lost_acked",
    ("at_least_once", "isolated_leader"): "lost_acked",
    ("at_least_once", "partitioned_leader"): "lost_acked",
    ("idempotent", "producer_crash"): "duplicate",
}
# DESIGN.md §3 states nothing for these pairs: acks=1 under leader_kill, acks=0 under isolated_leader;
# nor does the issue on connector pipelines for acks=0 and acks=1 under a rolling restart.
SILENT = {
    ("at_least_once", "leader_kill"),
    ("at_most_once", "isolated_leader"),
    ("at_most_once", "rolling_restart"),
    ("at_least_once", "rolling_restart"),
}
ALL_BAD = catalog.Counts.from_summary(
    {
        "duplicate_events": 3,
        "lost_acked": 2,
        "lost_unacked": 1,
        "aborted_visible": 4,
        "stale_overwrites": 5,
        "torn_events": 6,
        "inconsistent_offsets": 7,
    }
)
NONE = catalog.Counts({})


def counted(name: str, by_observation: dict) -> catalog.Counts:
    """Counts of an expectation's observations, `lost` planted as an unacked loss."""
    renamed = {("lost_unacked" if k == "lost" else k): v for k, v in by_observation.items()}
    observations = {
        **catalog.observations(catalog.side_of(name)),
        "lost_unacked": (catalog.OUTBOX_TOPIC, "lost_unacked"),
    }
    return catalog.Counts({observations[k]: v for k, v in renamed.items()})


def all_subjects():
    pairs = catalog.valid_pairs()
    pairs += [(s, sc) for s in catalog.STRATEGIES for sc in catalog.CONSUMER_SCENARIOS]
    return pairs + catalog.pipeline_pairs()


def test_the_valid_pairs_are_the_25_of_design_md_the_network_partition_the_upgrade_and_the_shrunk_isr():
    pairs = catalog.valid_pairs()
    assert len(pairs) == 40
    assert [m for m, s in pairs if s == "shrunk_isr_leader_kill"] == [m for m in catalog.MODES if m != "at_most_once"]
    assert [m for m, s in pairs if s == "rolling_restart"] == list(catalog.MODES)
    assert [m for m, s in pairs if s == "coordinator_kill"] == ["transactional"]
    assert [m for m, s in pairs if s == "partitioned_leader"] == list(catalog.MODES)
    assert ("at_most_once", "lost_ack") not in pairs, "acks=0 never waits for an ack"
    assert [m for m, s in pairs if s == "txn_abort"] == ["transactional"]
    assert all(s != "consumer_crash" for _, s in pairs)


@pytest.mark.parametrize(("name", "scenario"), all_subjects())
def test_verdict_breaks_exactly_the_guarantees_in_force(name, scenario):
    expected = [k for k in BREAKS[name] if LIFTED.get((name, scenario)) != k]
    isolation = modes.judged(name).isolation
    assert modes.verdict(name, scenario, isolation, ALL_BAD) == (("broken" if expected else "kept"), expected)
    assert modes.verdict(name, scenario, isolation, NONE) == ("kept", [])
    other = next(i for i in catalog.ISOLATIONS if i != isolation)
    assert modes.verdict(name, scenario, other, ALL_BAD) == ("n/a", [])


@pytest.mark.parametrize(("name", "scenario"), all_subjects())
def test_expectation_holds_for_its_own_counts_and_fails_for_each_flip(name, scenario):
    exp = catalog.expectation(name, scenario)
    if (name, scenario) in SILENT:
        assert exp == {} and catalog.meets_expectation(name, scenario, ALL_BAD) is None
        return
    assert exp, f"DESIGN.md §3 says what {name} x {scenario} shows"
    planted = {k: (1 if v == ">0" else 0) for k, v in exp.items()}
    assert catalog.meets_expectation(name, scenario, counted(name, planted)) is True
    for k, v in exp.items():
        flipped = {**planted, k: 0 if v == ">0" else 7}
        assert catalog.meets_expectation(name, scenario, counted(name, flipped)) is False, k


def test_design_md_section_3_in_the_catalog():
    assert catalog.expectation_text("at_least_once", "lost_ack") == "duplicate_events > 0, lost_acked = 0"
    assert catalog.expectation_text("at_most_once", "leader_kill") == "lost > 0, duplicate_events = 0"
    assert catalog.expectation("at_least_once", "isolated_leader") == {"lost_acked": ">0", "inconsistent_offsets": ">0"}
    assert catalog.expectation("transactional", "txn_abort")["aborted_visible"] == "=0"
    assert catalog.expectation_text("at_most_once", "partitioned_leader") == "lost > 0, duplicate_events = 0"
    assert catalog.expectation("at_least_once", "partitioned_leader") == {
        "lost_acked": ">0",
        "inconsistent_offsets": ">0",
    }
    assert catalog.expectation_text("idempotent", "partitioned_leader") == "lost_acked = 0, duplicate_events = 0"
    assert catalog.expectation("process_then_commit", "consumer_crash") == {"duplicate_events": ">0", "lost": "=0"}
    assert catalog.expectation_text("idempotent", "no_such_scenario") == "-"
    assert catalog.meets_expectation("nobody", "none", NONE) is None


def test_isolation_and_promise_come_from_one_place():
    assert {m: catalog.MODES[m].isolation for m in catalog.MODES} == {
        "at_most_once": "read_uncommitted",
        "at_least_once": "read_uncommitted",
        "at_least_once_all": "read_uncommitted",
        "idempotent": "read_uncommitted",
        "transactional": "read_committed",
    }
    assert {s.isolation for s in catalog.STRATEGIES.values()} == {"read_committed"}
    rows = {name: (side, iso, text) for name, side, iso, text in modes.judged_rows()}
    assert rows["transactional"] == ("producer", "read_committed", catalog.MODES["transactional"].promise.text)
    assert rows["transactional_copy"][0] == "consumer"
    assert set(rows) == {*modes.all_modes(), *catalog.STRATEGIES, *catalog.PIPELINES}, "mode files are judged too"
    assert rows["debezium_outbox_eos"] == (
        "pipeline",
        "read_committed",
        catalog.PIPELINE_PROMISES["connector_exactly_once"].text,
    )


@pytest.mark.parametrize(
    ("mode", "scenario", "message"),
    [
        ("at_most_once", "lost_ack", "never waits for one"),
        ("idempotent", "txn_abort", "needs the transactional mode"),
        ("exactly_once", "none", "unknown mode 'exactly_once'"),
        ("idempotent", "meteor", "unknown scenario 'meteor'"),
        ("idempotent", "consumer_crash", "consumer-side scenario"),
        ("idempotent", "connect_worker_kill", "connector-pipeline scenario"),
        ("at_least_once_all", "coordinator_kill", "needs the transactional mode"),
    ],
)
def test_pairs_that_cannot_work_are_refused(mode, scenario, message):
    with pytest.raises(catalog.CatalogError, match=message):
        modes.check_pair(mode, scenario)


@pytest.mark.parametrize(
    ("pipeline", "scenario", "message"),
    [
        ("debezium_outbox", "coordinator_kill", "needs a transactional source"),
        ("debezium_outbox", "lost_ack", "producer-side scenario that connector pipelines do not run"),
        ("debezium_outbox_eos", "consumer_crash", "consumer-side scenario"),
        ("debezium_outbox", "poison_records", "its task fails at the first one"),
        ("debezium_outbox_tolerant", "connect_worker_kill", "runs only under poison_records"),
        ("debezium", "none", "unknown pipeline 'debezium'"),
        ("debezium_outbox", "meteor", "unknown scenario 'meteor'"),
    ],
)
def test_pipeline_pairs_that_cannot_work_are_refused(pipeline, scenario, message):
    with pytest.raises(catalog.CatalogError, match=message):
        catalog.check_pipeline_pair(pipeline, scenario)


def test_the_pipeline_block_is_every_pipeline_under_every_connector_fault():
    pairs = catalog.pipeline_pairs()
    assert len(pairs) == 16
    assert {s for _, s in pairs} == {
        "none",
        "leader_kill",
        "rolling_restart",
        "coordinator_kill",
        "connect_worker_kill",
        "sink_worker_kill",
        "connect_rebalance",
        "outbox_db_restart",
        "poison_records",
    }
    assert [p for p, s in pairs if s == "coordinator_kill"] == ["debezium_outbox_eos"]
    assert [(p, s) for p, s in pairs if "tolerant" in p or s == "poison_records"] == [
        ("debezium_outbox_tolerant", "poison_records")
    ]
    assert catalog.expectation("debezium_outbox", "connect_worker_kill") == {
        "duplicate_events": ">0",
        "lost_acked": "=0",
    }
    assert catalog.pipeline_pairs(["debezium_outbox_eos"], ["none"]) == [("debezium_outbox_eos", "none")]
    assert catalog.pipeline_pairs([], None) == []
    eos = catalog.PIPELINES["debezium_outbox_eos"]
    assert eos.worker_settings == {"exactly.once.source.support": "enabled"}
    assert eos.source_settings["exactly.once.support"] == "required"
    assert catalog.PIPELINES["debezium_outbox"].worker_settings == {"exactly.once.source.support": "disabled"}


def test_timelines_are_data_with_known_actions():
    from delivery_semantics.faults.nemesis import Nemesis

    for s in catalog.SCENARIOS.values():
        for step in s.timeline:
            assert callable(getattr(Nemesis, step.action)), (s.name, step.action)
            assert step.target in (
                "leader",
                "followers",
                "producer",
                "coordinator",
                "cluster",
                "source_worker",
                "sink_worker",
                "outbox_db",
                "topic",
            )
        times = [st.at for st in s.timeline if st.after_share is None]
        assert times == sorted(times), s.name
        assert max(times, default=0) < catalog.LOAD_SECONDS, "every step lands inside the paced load"
    assert catalog.SCENARIOS["producer_crash"].forks_load


def test_forms_take_their_bounds_from_the_limits():
    form = forms.single_run_form()
    assert form["mode"]["enum"] == list(modes.all_modes())
    assert (form["messages"]["minimum"], form["messages"]["maximum"]) == catalog.LIMITS["messages"]
    assert forms.scheduled_load_form("at_most_once")["scenario"]["enum"] == [
        "none",
        "leader_kill",
        "rolling_restart",
        "isolated_leader",
        "partitioned_leader",
        "producer_crash",
    ]
    assert forms.consumer_run_form()["scenario"]["enum"] == ["none", "consumer_crash"]
    assert "consumer_crash" not in forms.matrix_form()["scenarios"]["default"]


def test_the_forms_dedup_copy_field_names_the_checkers_store():
    field = forms.single_run_form()["dedup_copy"]
    assert (field["default"], field["enum"]) == ("lakehouse", ["lakehouse", "postgres", "off"])
    assert forms.matrix_form()["dedup_copy"] == field
    from delivery_semantics.entry import spark_submit

    copy = ["--dedup-copy", "lakehouse"]
    assert spark_submit.reconcile_args(["r1", "r2"]) == ["--run-id", "r1", "--run-id", "r2", *copy]
    assert spark_submit.reconcile_args(["r1"], "postgres") == ["--run-id", "r1", "--dedup-copy", "postgres"]
    # What the field held before it named a store: a DAG run triggered with the old conf.
    assert spark_submit.reconcile_args(["r1"], True) == ["--run-id", "r1", *copy]
    assert spark_submit.reconcile_args(["r1"], False) == ["--run-id", "r1", "--dedup-copy", "off"]
    with pytest.raises(ValueError, match="'s3' is not one of lakehouse, postgres, off"):
        spark_submit.reconcile_args(["r1"], "s3")
    side_by_side = ["--parallel-runs", str(spark_submit.RECONCILE_SIDE_BY_SIDE)]
    assert spark_submit.reconcile_args(["r1", "r2"], True, 100_000) == [
        "--run-id",
        "r1",
        "--run-id",
        "r2",
        *copy,
        *side_by_side,
    ]
    assert spark_submit.reconcile_args(["r1", "r2"], "off", 10_000_000) == [
        "--run-id",
        "r1",
        "--run-id",
        "r2",
        "--dedup-copy",
        "off",
    ], "large runs go one at a time"


def test_transactions_grow_with_the_run_so_that_commits_keep_a_paced_runs_pace():
    assert catalog.default_txn_size(15_000) == 100, "the demo's runs keep 100-event transactions"
    assert catalog.default_txn_size(100_000) == 333
    pace = 100_000 / catalog.LOAD_SECONDS
    assert catalog.default_txn_size(100_000) == pytest.approx(pace / 10, abs=1), "100 ms of a paced run's pace"
    assert catalog.default_txn_size(10_000_000) <= catalog.LIMITS["txn_size"][1]


def test_a_form_left_without_a_transaction_size_gets_the_default():
    from airflow.sdk import Param

    spec = forms.single_run_form()["txn_size"]
    assert Param(**spec).resolve() is None
    assert Param(**spec).resolve(500) == 500
    with pytest.raises(Exception, match=r"minimum|less than"):
        Param(**spec).resolve(0)
    from delivery_semantics.entry import orchestration

    assert "txn_size" not in orchestration.validate_conf(
        {"mode": "transactional", "messages": 90_000, "txn_size": None}
    )


# DESIGN.md §4, written out: each kind with Jepsen's name where it has one.
JEPSEN = {
    "duplicate": "duplicate",
    "lost_acked": "lost-write",
    "unknown_landed": "indeterminate",
    "unexpected": "unexpected",
    "aborted_visible": "G1a",
    "torn_transaction": "KAFKA-17754",
    "inconsistent_offset": "inconsistent-offsets",
    "poll_skip": "poll-skip",
    "nonmonotonic_poll": "nonmonotonic-poll",
}


def test_the_kinds_catalog_names_every_kind_of_the_design_once_with_its_counts():
    kinds = catalog.KINDS
    assert {n: k.jepsen for n, k in kinds.items() if k.jepsen and n != "lost"} == JEPSEN
    summaries = [k.summary for k in kinds.values() if k.summary]
    assert len(summaries) == len(set(summaries))
    windows = catalog.window_columns()
    assert len(windows) == sum(len(k.windows) for k in kinds.values()), "one audit_windows column per stage and kind"
    # audits only: a window reports them, a whole-topic reconciliation does not
    assert {n for n, k in kinds.items() if not k.summary} == {"lost", "late"}
    assert catalog.LOSSES == ("lost_acked", "lost_unacked", "lost")
    # every guarantee is broken by a kind; an acked loss is lost_acked where the ledger or outbox
    # says acked, and `lost` at a sink's stages, where what the topic held was acked
    assert catalog.BROKEN_BY == {
        "no_duplicates": ("duplicate",),
        "no_acked_loss": ("lost_acked", "lost"),
        "no_aborted_visible": ("aborted_visible",),
        "no_stale_overwrite": ("stale_overwrite",),
        "atomic_transactions": ("torn_transaction",),
    }
    assert {stage for k in catalog.BROKEN_BY["no_acked_loss"] for stage in kinds[k].windows} == set(catalog.STAGES)


def test_the_checkers_kind_functions_are_the_catalogs_kinds():
    from checker import anomalies
    from delivery_semantics.reporting import report

    assert set(anomalies.KINDS) == {n for n, k in catalog.KINDS.items() if k.summary}
    assert {c for c in report.MATRIX_COLUMNS if c in catalog.summary_columns()} == set(
        catalog.summary_columns(in_matrix=True)
    )


@pytest.mark.parametrize(
    ("by_name", "message"),
    [
        ({"at_least_once": {"duplicates": ">0"}}, "expectation of at_least_once: duplicates >0: observe one of"),
        ({"at_least_once": {"lost": "many"}}, "expectation of at_least_once: lost many"),
        ({"at_least_one": {"lost": ">0"}}, "expectation of at_least_one: no mode, consumer strategy or pipeline"),
    ],
)
def test_an_expectation_naming_a_count_the_checker_does_not_report_fails_as_the_catalog_is_made(by_name, message):
    with pytest.raises(catalog.CatalogError, match=message):
        catalog._expect(**by_name)
