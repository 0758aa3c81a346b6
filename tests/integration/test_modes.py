"""A team's producer as a mode file, run by its own DAG with `airflow dags test`: the settings
checked by the client, the runs recorded with them, the verdict naming the setting that breaks the
declared promise."""

from __future__ import annotations

import json
import os

import jsonschema
from conftest import REPO, airflow_xcom, assert_judged, run, semantics, through_spark_connect

from delivery_semantics.reporting import results_file
from delivery_semantics.reporting.report import query

# acks=1 declared as no acked loss: the contradiction is a finding, not a refusal, and the isolated
# leader's fault makes it bite.
ACKS_ONE = """
description: a team's Java producer that believes acks=1 loses nothing it acked
client: java
settings:
  acks: 1
  enable.idempotence: false
  retries: 2147483647
  linger.ms: 5
promise: no_acked_loss
schedule: "@daily"
scenarios: [isolated_leader]
load:
  messages: 15000
  producers: 1
"""


def test_mode_file_dag_runs_its_scenario_and_its_verdict_names_the_setting(tmp_path):
    (tmp_path / "team_acks_one.yaml").write_text(ACKS_ONE)
    env = {**os.environ, "SEMANTICS_MODES_DIR": str(tmp_path), **through_spark_connect()}
    conf = {"producer_settings": {"linger.ms": 10}}
    res = run(
        ["airflow", "dags", "test", "semantics_mode_team_acks_one", "-c", json.dumps(conf)], timeout=1200, env=env
    )
    out = res.stdout + res.stderr
    (REPO / "artifacts" / "dags-test-mode-file.log").write_text(out)
    # The check task fails: the promise is broken, and says by which setting.
    assert res.returncode != 0 and "task_id=check" in out, out[-3000:]
    assert "the promise is broken under isolated_leader" in out and "by acks=1" in out, out[-3000:]
    [r] = query(
        """SELECT v.* FROM v_run_results v JOIN runs USING (run_id)
           WHERE runs.airflow_run_id LIKE 'semantics_mode_team_acks_one/%%' ORDER BY v.created_at DESC LIMIT 1"""
    )
    assert (r["mode"], r["client"], r["scenario"], r["isolation"]) == (
        "team_acks_one",
        "java",
        "isolated_leader",
        "read_uncommitted",
    )
    assert r["settings"] == {"linger.ms": "10"}, "the form's override is recorded with the run"
    assert (r["producer_config"]["acks"], r["producer_config"]["linger.ms"]) == ("1", "10")
    assert [f["setting"] for f in r["findings"]] == ["acks=1"]
    assert r["lost_acked"] > 0, "writes acked by the isolated leader alone die with it"
    assert (r["verdict"], r["broken_by"], r["broken_settings"]) == ("broken", "lost_acked", "acks=1")
    assert r["inconsistent_offsets"] > 0
    # The check task pushed the results file's document before it failed.
    doc = airflow_xcom("semantics_mode_team_acks_one", "check", "results")
    jsonschema.validate(doc, results_file.schema())
    assert (doc["verdict"], doc["exit_code"]) == ("broken", 1)
    [judged] = [x for x in doc["results"] if x["verdict"] == "broken"]
    assert (judged["subject"], judged["broken_by"]) == (
        {"kind": "run", "name": r["run_id"], "judged_as": "team_acks_one"},
        ["lost_acked"],
    )
    assert judged["counts"]["lost_acked"] == r["lost_acked"]


def test_bad_settings_and_clients_are_refused_with_one_line_and_nothing_written(tmp_path, kafka_conf):
    from confluent_kafka.admin import AdminClient

    (tmp_path / "team_typo.yaml").write_text("client: java\nsettings: {linger.msec: 5}\npromise: no_acked_loss\n")
    (tmp_path / "team_clash.yaml").write_text(
        "client: java\nsettings: {enable.idempotence: true, acks: 1}\npromise: no_acked_loss\n"
    )
    env = {**os.environ, "SEMANTICS_MODES_DIR": str(tmp_path)}
    [before] = query("SELECT count(*) AS n FROM runs")
    topics_before = set(AdminClient(kafka_conf).list_topics(timeout=10).topics)
    cases = [
        (
            ["--mode", "idempotent", "--client", "java", "--set", "no.such.setting=1"],
            "no.such.setting is not a setting a form or --set",
        ),
        (["--mode", "idempotent", "--client", "java", "--set", "acks=7"], "acks='7' must be one of 0, 1, all, -1"),
        (["--mode", "idempotent", "--client", "java", "--set", "value.serializer=x"], "value.serializer cannot be set"),
        (["--mode", "idempotent", "--set", "transactional.id=x"], "transactional.id cannot be set"),
        (["--mode", "idempotent", "--client", "kotlin"], "unknown client 'kotlin'"),
        (["--mode", "team_typo"], "settings.linger.msec: linger.msec is not a setting a mode file may give the java"),
        (["--mode", "team_clash"], "the Java client refused the producer settings: Must set acks to all"),
        (
            ["--mode", "team_clash", "--client", "librdkafka"],
            "declared for the java client; it cannot run on librdkafka",
        ),
    ]
    for args, message in cases:
        res = run(["python", "-m", "delivery_semantics.entry.cli", "load", "run", "--messages", "10", *args], env=env)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    [after] = query("SELECT count(*) AS n FROM runs")
    assert after == before, "nothing recorded"
    assert set(AdminClient(kafka_conf).list_topics(timeout=10).topics) == topics_before, "no topic made"


# A mode file judged, then edited and deleted: its runs keep the definition they were made with.
KEEPS_ACKS = """
description: a team's producer whose file is edited after its run
client: librdkafka
settings:
  acks: all
  enable.idempotence: false
promise: no_acked_loss
"""
EDITED = KEEPS_ACKS.replace("acks: all", "acks: 1").replace("promise: no_acked_loss", "promise: no_duplicates")


def test_a_run_is_judged_by_the_definition_it_recorded_after_its_mode_file_is_edited_and_deleted(tmp_path, monkeypatch):
    from delivery_semantics import catalog
    from delivery_semantics.workload import load

    monkeypatch.setenv("SEMANTICS_MODES_DIR", str(tmp_path))
    path = tmp_path / "team_edited.yaml"
    path.write_text(KEEPS_ACKS)
    run_id = load.start(load.LoadSpec(mode="team_edited", messages=300)).run_id

    def judged() -> dict:
        res = semantics("reconcile", "--run-id", run_id, "--no-dedup-copy")
        assert_judged(res)
        [row] = query(
            """SELECT v.isolation, v.verdict, v.broken_by, v.promise, v.expectation, v.meets_expectation,
                      v.definition_hash, h.definition_hash AS history_hash
               FROM v_run_results v JOIN v_run_history h USING (run_id) WHERE v.run_id = %s""",
            (run_id,),
        )
        return row

    first = judged()
    kept = catalog.PROMISES["no_acked_loss"].text
    assert (first["isolation"], first["verdict"], first["promise"]) == ("read_uncommitted", "kept", kept)
    assert first["definition_hash"] and first["history_hash"] == first["definition_hash"]
    [recorded] = query("SELECT definition, definition_hash FROM runs WHERE run_id = %s", (run_id,))
    defined = catalog.Definition.from_json(recorded["definition"])
    assert (defined.settings["acks"], defined.in_force, defined.digest) == (
        "all",
        ("no_acked_loss",),
        recorded["definition_hash"],
    )
    # Edited (acks=1, another promise), then deleted: reconciled again, the run is judged as before.
    path.write_text(EDITED)
    assert judged() == first
    path.unlink()
    assert judged() == first
    # A new run of the edited file records the new definition, under a new hash.
    path.write_text(EDITED)
    second = load.start(load.LoadSpec(mode="team_edited", messages=300)).run_id
    [new] = query(
        "SELECT r.definition, h.definition_hash FROM v_run_history h JOIN runs r USING (run_id) WHERE run_id = %s",
        (second,),
    )
    assert new["definition_hash"] != first["definition_hash"]
    assert (new["definition"]["settings"]["acks"], new["definition"]["in_force"]) == ("1", ["no_duplicates"])
