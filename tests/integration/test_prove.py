"""Predict, then prove, for real: `local/semantics prove` on a configuration that trips a rule of
each family a platform run exercises (a producer without idempotence, a topic with
min.insync.replicas=1 under acks=all, a consumer that auto-commits), its runs made and reconciled
by the checker, and each finding's observed count compared with its prediction."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run

from delivery_semantics.reporting import report

pytestmark = [pytest.mark.timeout(2400), pytest.mark.serial]


@pytest.mark.slow  # four runs under faults, two inputs and one Spark application: about six minutes
def test_a_rule_of_each_family_is_put_to_its_run_and_confirmed_by_what_the_checker_observed(healthy_cluster_after):
    res = run(
        [
            str(REPO / "local" / "semantics"),
            "prove",
            "--mode",
            "at_least_once_all",
            "--set",
            "topic.min.insync.replicas=1",
            "--set",
            "producer.enable.idempotence=false",
            "--set",
            "consumer.enable.auto.commit=true",
            "--messages",
            "6000",
            "--json",
        ],
        timeout=2400,
    )
    (REPO / "artifacts" / "prove.json").write_text(res.stdout)
    rows = {r["rule"]: r for r in map(json.loads, res.stdout.splitlines())}
    assert set(rows) == {
        "retries_without_idempotence",
        "in_flight_without_idempotence",
        "min_insync_one",
        "auto_commit",
        "commit_after_process_without_dedup",
        "auto_offset_reset_latest",
    }, res.stderr[-3000:]
    # Each planned finding read from its own run's summary, at the isolation its kind is read at.
    for name, r in rows.items():
        if name == "auto_offset_reset_latest":
            assert (r["run_id"], r["confirmed"]) == (None, None) and "no consumer strategy" in r["why"]
            continue
        [summary] = report.query(
            "SELECT * FROM reconcile_summary WHERE reconciliation_id = %s AND isolation = %s",
            (r["run_id"], r["isolation"]),
        )
        assert r["observed"] is not None, name
        assert r["confirmed"] == (r["observed"] > 0), name
        assert summary["reconciliation_id"] == r["run_id"]
    runs = {r["scenario"] for r in rows.values() if r["run_id"]}
    assert runs == {
        "lost_ack",
        "isolated_leader",
        "commit_before_process x consumer_crash",
        "process_then_commit x consumer_crash",
    }
    confirmed = {name for name, r in rows.items() if r["confirmed"]}
    assert {
        "retries_without_idempotence",
        "min_insync_one",
        "auto_commit",
        "commit_after_process_without_dedup",
    } <= confirmed, rows
    assert res.returncode == (1 if any(r["confirmed"] is False for r in rows.values()) else 0)
