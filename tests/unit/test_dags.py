"""The DAG files parse with the connections patched, as the Astronomer template tests them, and
parsing loads nothing of the platform but its catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from delivery_semantics import catalog, forms

DAG_FILES = sorted((REPO / "dags").glob("*.py"))
CONNECTIONS = {
    "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "kafka:9092"}}),
    "AIRFLOW_CONN_LEDGER_DB": json.dumps(
        {
            "conn_type": "postgres",
            "host": "db",
            "port": 5432,
            "login": "u",
            "password": "not-a-secret",
            "schema": "semantics",
        }
    ),
    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    "AIRFLOW_CONN_TOXIPROXY_DEFAULT": json.dumps({"conn_type": "http", "host": "toxiproxy", "port": 8474}),
}


# Each raised out of discovery once, and its DAG file failed to import: every team's DAGs went with it.
AUDIT_BODY = (REPO / "audits" / "quickstart.yaml").read_text()
MODE_BODY = "client: librdkafka\nsettings: {acks: all}\npromise: no_acked_loss\n"
BAD_FILES = {
    "bad_binary_int": AUDIT_BODY + "seed: 0b_\n",
    "bad_date": AUDIT_BODY + "description: 2026-02-30\n",
    "bad_tagged_int": AUDIT_BODY + "description: !!int abc\n",
    "bad_huge_int": AUDIT_BODY + f"description: {'9' * 5000}\n",
    "bad_mixed_keys": AUDIT_BODY + "1: one\n",
    "bad_nul_path": AUDIT_BODY + 'window: {grace: 10m}\nsink: {store: delta, path: "a\\0b", '
    "columns: {event_id: e, key: k, version: v, applied_at: a}}\n",
    "bad_surrogate_query": AUDIT_BODY.replace(
        "  table: public.quickstart_outbox", '  allow_query: true\n  query: "SELECT \\ud800 AS id"'
    ),
    "bad_platform_connection": AUDIT_BODY.replace("outbox: outbox_db", "outbox: ledger_db"),
}


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow")
    audits_dir = tmp_path_factory.mktemp("audits")
    for name in ("orders.yaml", "orders_stream.yaml"):
        (audits_dir / name).write_text((REPO / "audits" / name).read_text())
    (audits_dir / "broken.yaml").write_text("topic: t\nmode: at_least_once\n")
    for name, text in BAD_FILES.items():
        (audits_dir / f"{name}.yaml").write_text(text)
    modes_dir = tmp_path_factory.mktemp("modes")
    (modes_dir / "orders_java.yaml").write_text((REPO / "modes" / "orders_java.yaml").read_text())
    (modes_dir / "typo.yaml").write_text("client: java\nsettings: {}\npromise: no_acked_loss\nscenario: [lost_ack]\n")
    for name, text in BAD_FILES.items():
        (modes_dir / f"{name}.yaml").write_text(text.replace(AUDIT_BODY, MODE_BODY))
    return {
        "SEMANTICS_AUDITS_DIR": str(audits_dir),
        "SEMANTICS_MODES_DIR": str(modes_dir),
        **os.environ,
        **CONNECTIONS,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "dags")]),
    }


def _in_fresh_python(code: str, env: dict) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.strip().splitlines()[-1]


_DAGBAG = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={folder!r})
print(json.dumps({{"errors": {{k: str(v)[:500] for k, v in bag.import_errors.items()}}, "dags": {{
    d.dag_id: {{"tags": sorted(d.tags), "schedule": str(d.schedule), "retries": (d.default_args or {{}}).get("retries", 0), "doc": d.doc_md or "",
               "params": {{k: d.params.get_param(k).schema for k in d.params}},
               "descriptions": [d.params.get_param(k).description for k in d.params],
               "defaults": {{k: d.params.get_param(k).value for k in d.params}},
               "dagrun_timeout": d.dagrun_timeout and d.dagrun_timeout.total_seconds(),
               "tasks": {{t.task_id: {{"execution_timeout": t.execution_timeout and t.execution_timeout.total_seconds(), "pool": t.pool, "pool_slots": t.pool_slots, "mapped": bool(getattr(t, "_is_mapped", False)),
                                      "downstream": sorted(t.downstream_task_ids)}} for t in d.tasks}}}}
    for d in bag.dags.values()}}}}))
"""


def test_every_dag_parses_with_tags_retries_docs_and_the_catalogs_forms(airflow_env):
    out = json.loads(_in_fresh_python(_DAGBAG.format(folder=str(REPO / "dags")), airflow_env))
    assert out["errors"] == {}
    dags = out["dags"]
    assert set(dags) == {
        "smoke",
        "semantics_single_run",
        "semantics_consumer_run",
        "semantics_matrix",
        "semantics_reconcile",
        "semantics_prove",
        *(f"semantics_load_{m}" for m in catalog.MODES),
        "audit_orders",
        "audit_orders_stream",
        "audit_broken",
        "semantics_mode_orders_java",
        "semantics_mode_typo",
        *(f"audit_{name}" for name in BAD_FILES),
        *(f"semantics_mode_{name}" for name in BAD_FILES),
    }
    # Each bad file is its own DAG saying why, one line; the good files' DAGs and the forms stay.
    for name in BAD_FILES:
        for dag_id in (f"audit_{name}", f"semantics_mode_{name}"):
            assert "invalid" in dags[dag_id]["tags"], dag_id
            error = dags[dag_id]["doc"].split("does not validate:** ", 1)[1]
            assert f"{name}.yaml: " in error and "\n" not in error and "Traceback" not in error, dag_id
    assert "ledger_db is one of the platform's own connections" in dags["audit_bad_platform_connection"]["doc"]
    # Every task has a timeout, and every DAG run.
    for dag_id, d in dags.items():
        assert d["dagrun_timeout"], dag_id
        for task_id, t in d["tasks"].items():
            assert t["execution_timeout"], (dag_id, task_id)
    for dag_id, d in dags.items():
        assert d["tags"] and d["retries"] >= 1 and len(d["doc"]) > 40, dag_id
    assert dags["audit_orders"]["schedule"] == "@hourly" and "invalid" not in dags["audit_orders"]["tags"]
    # A file that fails the schema still gets a DAG: it shows the error instead of hiding it.
    assert "invalid" in dags["audit_broken"]["tags"]
    assert "broken.yaml: (top level): 'connections' is a required property" in dags["audit_broken"]["doc"]
    for dag_id, d in dags.items():
        assert all(d["descriptions"]), dag_id
    # A mode file is a DAG of its own, offered beside the presets; a bad one shows its error.
    mode_dag = dags["semantics_mode_orders_java"]
    assert mode_dag["schedule"] == "@daily" and "java" in mode_dag["tags"]
    assert mode_dag["defaults"]["messages"] == 10000 and "producer_settings" in mode_dag["params"]
    assert mode_dag["tasks"]["run_scenario"]["mapped"] and "check" in mode_dag["tasks"]["reconcile"]["downstream"]
    assert "invalid" in dags["semantics_mode_typo"]["tags"]
    assert "typo.yaml: (top level): unknown field 'scenario'" in dags["semantics_mode_typo"]["doc"]
    single = dags["semantics_single_run"]["params"]
    assert single["mode"]["enum"] == [*catalog.MODES, "orders_java"]
    assert single["client"]["enum"] == [None, *catalog.CLIENTS] and single["producer_settings"]["type"] == "object"
    assert dags["semantics_matrix"]["defaults"]["clients"] == list(catalog.CLIENTS)
    assert single["messages"]["minimum"] == 1 and single["messages"]["maximum"] == catalog.LIMITS["messages"][1]
    assert dags["semantics_consumer_run"]["params"]["strategy"]["enum"] == list(catalog.STRATEGIES)
    assert dags["semantics_matrix"]["params"]["consumer_strategies"]["items"]["enum"] == list(catalog.STRATEGIES)
    assert single["producers"]["maximum"] == catalog.LIMITS["producers"][1]
    # Predict, then prove: a mode or a pipeline, settings matched whole, a run-making task alone
    # on the cluster, the checker skipped when every run was already judged.
    proof = dags["semantics_prove"]
    assert proof["params"]["subject"]["enum"] == [*catalog.MODES, "orders_java", *catalog.PIPELINES]
    assert proof["params"]["settings"]["items"]["pattern"] == forms.PROVE_SETTING_PATTERN
    assert proof["tasks"]["make_runs"]["pool_slots"] == catalog.CLUSTER_POOL_SLOTS
    assert proof["tasks"]["anything_new"]["downstream"] == ["checker_args"]
    assert proof["tasks"]["reconcile"]["downstream"] == ["judge"]
    # A load's producers are mapped tasks, one pool slot each; a task that runs a whole run takes
    # every slot, so runs never share the cluster.
    for dag_id in ("semantics_single_run", *(f"semantics_load_{m}" for m in catalog.MODES)):
        tasks = dags[dag_id]["tasks"]
        assert {k: v for k, v in tasks["produce"].items() if k != "execution_timeout"} == {
            "pool": catalog.CLUSTER_POOL,
            "pool_slots": 1,
            "mapped": True,
            "downstream": ["finish_run"],
        }, dag_id
        assert "produce" in tasks["start_run"]["downstream"], dag_id
    for dag_id, task_id in (
        ("semantics_matrix", "run_pair"),
        ("semantics_matrix", "run_pipeline"),
        ("semantics_consumer_run", "run_load"),
    ):
        assert dags[dag_id]["tasks"][task_id]["pool_slots"] == catalog.CLUSTER_POOL_SLOTS, dag_id
    assert dags["semantics_load_at_most_once"]["params"]["scenario"]["enum"] == [
        "none",
        "leader_kill",
        "rolling_restart",
        "isolated_leader",
        "partitioned_leader",
        "producer_crash",
    ]


_IMPORT_ONE = """
import json, runpy, sys
runpy.run_path({path!r})
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
def test_parsing_a_dag_file_loads_only_the_catalog_of_the_platform(dag_file, airflow_env):
    loaded = set(json.loads(_in_fresh_python(_IMPORT_ONE.format(path=str(dag_file)), airflow_env)))
    platform = {m for m in loaded if m == "delivery_semantics" or m.startswith("delivery_semantics.")}
    # The audit subpackage's __init__ holds its error only; an audit file is checked against the
    # record formats' facts (their decoders import Spark only when they decode). The mode files are
    # read (modes: presets beside files) by the DAG files that offer modes; the forms name the settings the clients' allowlists take
    # (clients/: each client's facts, without its library).
    formats = {"", ".base", ".avro_format", ".json_format", ".protobuf_format", ".string_format"}
    allowed = {
        "delivery_semantics",
        # The DAG factory the DAG files call: Airflow's pieces and the catalog at its top.
        "delivery_semantics.entry",
        "delivery_semantics.entry.dag_factory",
        "delivery_semantics.catalog",
        "delivery_semantics.forms",
        "delivery_semantics.client_settings",
        "delivery_semantics.errors",
        *(f"delivery_semantics.clients{m}" for m in ("", ".base", ".librdkafka", ".java")),
        "delivery_semantics.audit",
        "delivery_semantics.audit.audits",
        *(f"delivery_semantics.audit.formats{m}" for m in formats),
        "delivery_semantics.mode_files",
        "delivery_semantics.modes",
        "delivery_semantics.files",
        "delivery_semantics.budgets",
        "delivery_semantics.teams",
        "delivery_semantics.locations",  # where the files are: the settings, the package's own
        # A file with free SQL is checked by the SQL stores' parser, and a lakehouse path against the
        # data roots (the platform's lakehouse): neither imports a client library.
        *(f"delivery_semantics.audit.stores{m}" for m in ("", ".base", ".sql")),
        *(f"delivery_semantics.plumbing{m}" for m in ("", ".endpoints", ".spark")),
    }
    assert platform <= allowed
    assert ("delivery_semantics.audit.audits" in platform) == (dag_file.name == "semantics_audits.py")
    assert not {m for m in loaded if m.split(".")[0] in ("confluent_kafka", "psycopg2", "pyspark", "checker")}


_FUTURE_WINDOW = """
import json
from datetime import UTC, datetime, timedelta
from airflow.dag_processing.dagbag import DagBag
from delivery_semantics.audit.audits import AuditError
bag = DagBag(dag_folder={folder!r})
preflight = bag.dags["audit_orders_stream"].get_task("preflight")
try:
    preflight.python_callable(run_id="manual__x", data_interval_end=datetime.now(UTC) + timedelta(hours=1), dag_run=None)
    print(json.dumps("accepted"))
except AuditError as e:
    print(json.dumps(str(e)))
"""


def test_a_continuous_audits_dag_refuses_a_window_that_ends_in_the_future(airflow_env):
    """A run triggered with a data interval ending after now fails its first task, before Spark
    starts or anything is recorded (the CLI's refusal is in test_inputs.py)."""
    said = json.loads(_in_fresh_python(_FUTURE_WINDOW.format(folder=str(REPO / "dags")), airflow_env))
    assert "is in the future" in said and "a window never ends after now" in said


def test_a_teams_dag_file_of_a_few_lines_makes_its_audits_dags_and_none_of_the_platforms(airflow_env, tmp_path):
    """The DAG factory as a team calls it: its own DAG folder holds its audit files and a DAG file of
    a few lines; Airflow finds that folder's audit DAGs, and no platform DAG comes along."""
    team = tmp_path / "team_dags"
    (team / "audits").mkdir(parents=True)
    (team / "audits" / "payments.yaml").write_text((REPO / "audits" / "quickstart.yaml").read_text())
    (team / "audits" / "typo.yaml").write_text("topic: t\nmode: at_least_once\n")
    (team / "payments_audits.py").write_text(
        '"""Airflow DAGs of the payments team\'s audits."""\n'
        "from pathlib import Path\n\n"
        "from delivery_semantics.entry.dag_factory import audit_dags\n\n"
        'globals().update(audit_dags(Path(__file__).parent / "audits"))\n'
    )
    (team / ".airflowignore").write_text("audits/\n")
    out = json.loads(_in_fresh_python(_DAGBAG.format(folder=str(team)), airflow_env))
    assert out["errors"] == {}
    assert set(out["dags"]) == {"audit_payments", "audit_typo"}
    assert "invalid" in out["dags"]["audit_typo"]["tags"] and "invalid" not in out["dags"]["audit_payments"]["tags"]
