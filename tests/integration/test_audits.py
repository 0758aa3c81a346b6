"""Audits of a team's pipeline, for real: the `orders` topic on the SASL_SSL listener (SCRAM-SHA-512)
against an outbox in a second PostgreSQL database read by a read-only role, run by the DAG that
`dags/semantics_audits.py` generates from audits/orders.yaml. Planted anomalies of every kind an
outbox audit can show are found exactly; no secret shows in a log, in `ps`, or in a result table;
bad input is refused with one line and exit 2 before anything is written."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
import time
import uuid
import zipfile
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import installed
import jsonschema
import psycopg2
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from conftest import (
    REPO,
    airflow_query,
    airflow_xcom,
    assert_judged,
    recreate_topic,
    run,
    semantics,
    spark_cluster_apps,
    through_spark_connect,
)

import devstack
from delivery_semantics.audit import audits
from delivery_semantics.audit import preflight as audit_preflight
from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import (
    database,
    kafka_config,
    ledger_database,
)
from delivery_semantics.reporting import dedup, report, results_file
from delivery_semantics.workload import load

ORDERS = REPO / "audits" / "orders.yaml"
SECRETS = (
    "KAFKA_SCRAM_PASSWORD",
    "OUTBOX_READER_PASSWORD",
    "OUTBOX_OWNER_PASSWORD",
    "SEMANTICS_DB_PASSWORD",
    "CLIENT_KEY_PASSWORD",
)


def _outbox_owner():
    return psycopg2.connect(**database("outbox_app").psycopg2_kwargs())


def _discrepancies(rid: str) -> dict:
    out: dict = {}
    for r in report.query(
        "SELECT isolation, kind, event_id, copies FROM reconcile_discrepancies WHERE reconciliation_id = %s", (rid,)
    ):
        out.setdefault((r["isolation"], r["kind"]), {})[r["event_id"]] = r["copies"]
    return out


def _audit_rows() -> int:
    return report.query("SELECT count(*) AS n FROM reconcile_summary WHERE audit IS NOT NULL")[0]["n"]


def _command_lines() -> list[str]:
    # -ww: whole lines, whatever COLUMNS says (under pytest ps cut them at 80 characters)
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()


@contextmanager
def _watching(watch, result, join_timeout: float | None = None):
    """`watch(done)` on a thread while the block runs, which gets `result`; `done` is set after."""
    done = threading.Event()
    t = threading.Thread(target=watch, args=(done,), daemon=True)
    t.start()
    try:
        yield result
    finally:
        done.set()
        t.join(join_timeout)


@contextmanager
def watching_ps():
    """Every command line `ps -ef` shows while the block runs."""
    seen: set[str] = set()

    def watch(done: threading.Event) -> None:
        while not done.is_set():
            seen.update(_command_lines())
            time.sleep(0.3)

    with _watching(watch, seen) as result:
        yield result


def _assert_no_secret(texts: dict[str, str]) -> None:
    for name in SECRETS:
        value = devstack.secret(name)
        leaked = [where for where, text in texts.items() if value in text]
        assert not leaked, f"{name} appears in {leaked}"


# --------------------------------------------------------------------------- the planted pipeline


@pytest.fixture(scope="module")
def orders():
    """The `orders` topic and `public.outbox`, made afresh with one of every kind planted. Returns
    the expected discrepancies per isolation level."""
    audit = audits.load(ORDERS)
    conf = kafka_config(audit.kafka_conn_id)
    assert conf["security.protocol"] == "SASL_SSL"
    recreate_topic(conf, audit.topic)
    tag = uuid.uuid4().hex[:6]
    e = lambda name: f"{tag}-{name}"
    outbox = [(e(f"c{i:02d}"), f"agg-c{i}", 1, "SENT") for i in range(20)] + [
        (e("dup"), "agg-d", 1, "SENT"),
        (e("lost"), "agg-l", 1, "SENT"),
        (e("failed"), "agg-f", 1, "FAILED"),
        (e("pending"), "agg-p", 1, "PENDING"),
        (e("v1"), "agg-o", 1, "SENT"),
        (e("v2"), "agg-o", 2, "SENT"),
        (e("aborted"), "agg-a", 1, "SENT"),
    ]
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS public.outbox")
        cur.execute(
            "CREATE TABLE public.outbox (seq_no bigserial PRIMARY KEY, id text NOT NULL, aggregate_id text, "
            "version int, created_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL)"
        )
        cur.executemany("INSERT INTO public.outbox (id, aggregate_id, version, state) VALUES (%s, %s, %s, %s)", outbox)

    def send(p: Producer, event_id: str | None, key: str, version: int = 1) -> None:
        headers = [("event_id", event_id.encode())] if event_id else []
        p.produce(audit.topic, key=key, value=json.dumps({"version": version}).encode(), headers=headers)

    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in range(20):
        send(p, e(f"c{i:02d}"), f"agg-c{i}")
    send(p, e("dup"), "agg-d")
    send(p, e("dup"), "agg-d")
    send(p, e("pending"), "agg-p")
    send(p, e("unexpected"), "agg-u")
    send(p, e("v2"), "agg-o", 2)
    send(p, e("v1"), "agg-o", 1)  # a lower version after a higher one, same key
    send(p, None, "agg-m")  # no event id: malformed
    send(p, e("aborted"), "agg-a")
    assert p.flush(30) == 0
    tx = Producer({**conf, "transactional.id": f"audit-test-{tag}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    send(tx, e("aborted"), "agg-a")  # a second copy, in a transaction that aborts
    tx.flush(30)
    tx.abort_transaction(30)

    common = {
        "lost_acked": {e("lost"): 0},
        "lost_unacked": {e("failed"): 0},
        "unknown_landed": {e("pending"): 1},
        "unexpected": {e("unexpected"): 1},
        "out_of_order": {e("v1"): 1},
    }
    expected = {
        "read_committed": {**common, "duplicate": {e("dup"): 2}},
        "read_uncommitted": {
            **common,
            "duplicate": {e("dup"): 2, e("aborted"): 2},
            "aborted_visible": {e("aborted"): 1},
        },
    }
    return audit, expected


def test_the_outbox_role_is_read_only():
    with (
        psycopg2.connect(**database("outbox_db").psycopg2_kwargs()) as c,
        c.cursor() as cur,
        pytest.raises(psycopg2.errors.ReadOnlySqlTransaction),
    ):
        cur.execute("CREATE TABLE public.not_allowed (x int)")


def _run_audit_dag(
    audit: audits.Audit, expected: dict, team: installed.Install | None = None
) -> tuple[dict, str, dict[str, str]]:
    """`airflow dags test audit_<name>` (the checkout's Airflow, or a team's install), watched: its
    one new result row, after its discrepancies were found to be exactly the planted ones (and one
    malformed record per isolation level); its output; and every text a secret could leak into: the
    command lines `ps` showed while it ran, that output, every log of the stack and the tasks, and
    its result rows."""
    before = {r["reconciliation_id"] for r in report.query("SELECT reconciliation_id FROM v_audit_results")}
    with watching_ps() as commands:
        if team:
            res = team.airflow("dags", "test", audit.dag_id)
        else:
            res = run([str(REPO / ".venv" / "bin" / "airflow"), "dags", "test", audit.dag_id], timeout=900)
    out = res.stdout + res.stderr
    rows = [
        r
        for r in report.query("SELECT * FROM v_audit_results WHERE audit = %s", (audit.name,))
        if r["reconciliation_id"] not in before
    ]
    assert len(rows) == 1, out[-3000:]
    rid = rows[0]["reconciliation_id"]
    assert rid.startswith(f"audit:{audit.name}:manual__")
    got = _discrepancies(rid)
    for iso, kinds in expected.items():
        for kind, ids in kinds.items():
            assert got.pop((iso, kind)) == ids, (iso, kind)
        assert len(got.pop((iso, "malformed"))) == 1
    assert got == {}, f"unplanted discrepancies: {got}"
    assert any("spark" in c and "reconcile.py" in c for c in commands), "the Spark job was not seen running"
    if not team:  # the check task's XCom `results`: the results file's document, pushed before it failed
        doc = airflow_xcom(audit.dag_id, "check", "results")
        jsonschema.validate(doc, results_file.schema())
        assert [r["reconciliation_id"] for r in doc["results"]] == [rid]
        assert (doc["verdict"], doc["exit_code"]) == (rows[0]["verdict"], 0 if rows[0]["verdict"] == "kept" else 1)
    logs = {str(p): p.read_text(errors="replace") for p in devstack.LOGS.rglob("*") if p.is_file()}
    results = json.dumps(
        [
            report.query("SELECT * FROM reconcile_summary WHERE reconciliation_id = %s", (rid,)),
            report.query("SELECT * FROM reconcile_discrepancies WHERE reconciliation_id = %s", (rid,)),
        ],
        default=str,
    )
    return rows[0], out, {"ps -ef": "\n".join(commands), "dags test output": out, **logs, "result tables": results}


def _lists_the_teams_audit_alone(team: installed.Install) -> None:
    listed = team.airflow("dags", "list", "--local", "-o", "json", "--columns", "dag_id", timeout=300)
    assert listed.returncode == 0, listed.stderr[-3000:]
    [dags] = [json.loads(ln) for ln in listed.stdout.splitlines() if ln.startswith("[{")]
    assert [d["dag_id"] for d in dags] == ["audit_orders"], "the team's audit, none of the platform's DAGs"


def test_a_teams_installed_audit_with_no_jdk_finds_every_planted_anomaly_through_spark_connect(orders, tmp_path):
    """A team's install away from the repository (installed.py: the wheel on a path of its own, its
    own AIRFLOW_HOME, a DAG folder of its audit file and a DAG file of a few lines), on a worker with
    no JDK: Airflow lists the audit's DAG and none of the platform's, and `airflow dags test
    audit_orders` runs preflight, the checker through the stack's Spark Connect server (a Python
    process, no spark-submit) over SASL_SSL and a read-only outbox, then the check, which fails
    because the at_least_once promise (no acked loss) is broken. No secret anywhere: not on a command
    line while it ran, not in the DAG test's output, not in any log of the stack or the tasks, not in
    the result tables."""
    audit, expected = orders
    team = installed.install(
        tmp_path,
        {"orders.yaml": ORDERS.read_text()},
        spark_connection=os.environ["AIRFLOW_CONN_SPARK_CONNECT"],
        no_jdk=True,
    )
    assert subprocess.run(["which", "java"], env=team.env, capture_output=True).returncode != 0, "java is not found"
    _lists_the_teams_audit_alone(team)
    row, out, texts = _run_audit_dag(audit, expected, team)
    # The application is the installed package's, run by Python: no spark-submit, no JVM of its own.
    apps = [c.split() for c in texts["ps -ef"].splitlines() if "spark_apps/reconcile.py" in c]
    assert apps and not [a for a in apps if "SparkSubmit" in " ".join(a) or "spark-submit" in " ".join(a)], apps
    [app] = {a[a.index(next(x for x in a if x.endswith("reconcile.py")))] for a in apps}
    assert Path(app).is_relative_to(team.site) and app.endswith("/delivery_semantics/_shipped/spark_apps/reconcile.py")
    assert (row["outbox_events"], row["outbox_acked"], row["verdict"]) == (27, 25, "broken")
    assert "lost_acked" in row["broken_by"]
    assert "BrokenPromise" in out and "the at_least_once promise is broken by lost_acked" in out
    _assert_no_secret(texts)


@pytest.mark.slow  # a virtualenv of its own, Airflow installed in it (2 min); CI runs the same audit from the wheel above
def test_a_fresh_virtualenv_with_airflow_its_constraints_and_the_wheel_runs_the_teams_audit(orders, tmp_path):
    """docs/DEPLOY.md as a team follows it: a new virtualenv away from the repository, Airflow, its
    providers and PySpark installed there with a constraints file, then the wheel; the team's DAG
    folder; `airflow dags list` and `airflow dags test` on the stack's standalone cluster."""
    audit, expected = orders
    team = installed.install(
        tmp_path,
        {"orders.yaml": ORDERS.read_text()},
        spark_connection=os.environ["AIRFLOW_CONN_SPARK_STANDALONE"],
        fresh=True,
    )
    assert not str(team.bin).startswith(str(REPO))
    _lists_the_teams_audit_alone(team)
    providers = team.airflow("providers", "list", "-o", "json", timeout=300)
    assert '"delivery-semantics"' in providers.stdout, providers.stderr[-2000:]
    row, _, texts = _run_audit_dag(audit, expected, team)
    assert (row["outbox_events"], row["verdict"]) == (27, "broken")
    # The application and its Python files are the installed package's (the jars are the stack's).
    [submit, *_] = [c.split() for c in texts["ps -ef"].splitlines() if "SparkSubmit" in c and "reconcile.py" in c]
    assert Path(submit[-5]).is_relative_to(team.site), "the application from the fresh virtualenv"
    with zipfile.ZipFile(submit[submit.index("--py-files") + 1]) as py_files:
        assert "delivery_semantics/_shipped/sql/V002__ledger.sql" in py_files.namelist(), "zipped from the install"
    assert f"audit-{row['reconciliation_id']}" in spark_cluster_apps(), "run on the standalone cluster"
    _assert_no_secret(texts)


def test_an_audit_over_mutual_tls_finds_the_same_and_shows_no_key_or_keystore_password(orders):
    """audits/orders_mtls.yaml: the same topic and outbox over the mutual-TLS listener, through its
    DAG. Spark reads with a PKCS12 keystore made at submit time; neither the client key's password
    nor the keystore's shows on a command line, in a log or in a result row."""
    from delivery_semantics.plumbing.endpoints import java_client_config

    audit = audits.load(REPO / "audits" / "orders_mtls.yaml")
    conf = kafka_config(audit.kafka_conn_id)
    assert conf["security.protocol"] == "SSL" and "ssl.certificate.location" in conf
    row, out, texts = _run_audit_dag(audit, orders[1])
    assert (row["outbox_events"], row["verdict"]) == (27, "broken")
    assert "the at_least_once promise is broken by lost_acked" in out
    _assert_no_secret(texts)  # CLIENT_KEY_PASSWORD among them
    keystore_password = java_client_config(conf)["ssl.keystore.password"]
    assert not [where for where, text in texts.items() if keystore_password in text], "the keystore's password"


def test_an_audit_over_oauthbearer_finds_the_same_with_tokens_from_the_issuer(orders, tmp_path):
    """The orders audit on the OAUTHBEARER listener (kafka_oauth: OIDC client credentials): Spark's
    Kafka source and the driver's librdkafka fetch their own tokens, and find exactly the planted
    discrepancies. The client secret shows on no command line and in no output."""
    _, expected = orders
    path = _variant(tmp_path, lambda spec: spec["connections"].update(kafka="kafka_oauth"), name="orders_oauth")
    rid = f"audit:orders_oauth:{uuid.uuid4().hex[:6]}"
    with watching_ps() as commands:
        r = spark_submit.run(audit=audits.load(path), reconciliation_id=rid)
    assert r.returncode == 0, r.error
    got = _discrepancies(rid)
    for iso, kinds in expected.items():
        for kind, ids in kinds.items():
            assert got.pop((iso, kind)) == ids, (iso, kind)
        assert len(got.pop((iso, "malformed"))) == 1
    assert got == {}, f"unplanted discrepancies: {got}"
    secret = devstack.secret("OIDC_CLIENT_SECRET")
    assert secret not in "\n".join(commands) + r.stdout + r.stderr
    assert any("org.apache.kafka.sasl.oauthbearer.allowed.urls" in c for c in commands), "the JVMs allow the endpoint"


def _found(rid: str) -> tuple[list, list, list]:
    """A reconciliation's rows: its summaries, its discrepancies and its deduplicated copy."""
    summary = report.query("SELECT * FROM reconcile_summary WHERE reconciliation_id = %s ORDER BY isolation", (rid,))
    disc = report.query(
        "SELECT isolation, kind, event_id, copies, partitions, offsets FROM reconcile_discrepancies "
        "WHERE reconciliation_id = %s ORDER BY 1, 2, 3",
        (rid,),
    )
    copy = [{k: v for k, v in r.items() if k != "reconciliation_id"} for r in dedup.rows(rid)]
    skip = ("reconciliation_id", "first_reconciled_at")
    return [{k: v for k, v in r.items() if k not in skip} for r in summary], disc, copy


def test_the_checker_rides_over_a_leader_that_stops_answering(orders, healthy_cluster_after):
    """The leader of a partition paused (SIGSTOP) just before the checker asks for the topic's
    offsets: the cluster answers, the leader does not until the controller moves its partitions.
    The query is tried again (exit 2, bad input, at the main before this), and gives the offsets
    a quiet cluster gives."""
    from checker import sources

    audit, _ = orders
    kafka = sources.Kafka(kafka_config(audit.kafka_conn_id), {})
    src = sources.audit_source(audit, f"audit:orders:offsets-{uuid.uuid4().hex[:6]}", kafka)
    quiet = sources.topic_offsets(src)
    md = topics.admin_client(kafka.client).list_topics(audit.topic, timeout=10).topics[audit.topic]
    leader = next(p.leader for p in md.partitions.values() if p.leader != devstack.quorum_leader())
    backend = devstack.ProcessBackend()
    backend.pause(leader)
    try:
        started = time.monotonic()
        assert sources.topic_offsets(src) == quiet
        assert time.monotonic() - started > 5, "the paused leader was asked, and the query tried again"
    finally:
        backend.resume(leader)


def _airflow_tries(dag_id: str) -> tuple[str, dict[str, list[str]]]:
    """The DAG's latest run: its state, and each task's tries in order, by their states (from
    Airflow's own database: the earlier tries are in task_instance_history)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    with engine.connect() as c:
        run_id, state = c.execute(
            sqlalchemy.text("SELECT run_id, state FROM dag_run WHERE dag_id = :d ORDER BY id DESC LIMIT 1"),
            {"d": dag_id},
        ).one()
        tries: dict[str, list[str]] = {}
        for table in ("task_instance_history", "task_instance"):
            for task_id, try_number, ti_state in c.execute(
                sqlalchemy.text(
                    f"SELECT task_id, try_number, state FROM {table} WHERE dag_id = :d AND run_id = :r "
                    "ORDER BY try_number"
                ),
                {"d": dag_id, "r": run_id},
            ):
                tries.setdefault(task_id, []).append(f"{try_number}:{ti_state}")
    engine.dispose()
    return state, tries


@contextmanager
def when_reconcile_starts(tag: str, act, undo=None):
    """`act()` as soon as `ps` shows the audit's Spark application (its file name carries `tag`),
    before its JVM has asked Kafka anything; `undo()` once that application has ended."""
    acted: list[bool] = []

    def running() -> bool:
        return any("reconcile.py" in line and tag in line for line in _command_lines())

    def watch(done: threading.Event) -> None:
        while not done.is_set() and not running():
            time.sleep(0.2)
        if done.is_set():
            return
        act()
        acted.append(True)
        while running():
            time.sleep(0.5)
        if undo:
            undo()

    with _watching(watch, acted, join_timeout=300) as result:
        yield result


@pytest.mark.slow  # about 4 minutes: Airflow's retry waits its minute
def test_the_audit_dag_retries_a_transient_kafka_failure_and_fails_bad_input_at_once(
    orders, tmp_path, fresh_topic, healthy_cluster_after
):
    """`airflow dags test` of an audit's DAG (clean data: five outbox rows, their five records),
    twice. First, two of the three brokers stop answering (SIGSTOP: no quorum, so no leader moves)
    as its Spark application starts, until it ends: past the file's `kafka_retry_seconds: 3` it
    exits 75, Airflow retries the task a minute later, and that try finds every event delivered.
    Then the topic is deleted as the application starts: bad input, exit 2, the task fails on its
    first try, with no retry."""
    tag = uuid.uuid4().hex[:8]
    name = f"retry_{tag}"
    topic = fresh_topic("retry")
    table = f"public.retry_{tag}"
    events = [f"{tag}-{i}" for i in range(5)]
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {table} (seq_no bigserial PRIMARY KEY, id text NOT NULL, aggregate_id text, "
            "version int, created_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL DEFAULT 'SENT')"
        )
        cur.execute(f"GRANT SELECT ON {table} TO PUBLIC")
        cur.executemany(f"INSERT INTO {table} (id, aggregate_id, version) VALUES (%s, %s, 1)", [(e, e) for e in events])
    conf = kafka_config(orders[0].kafka_conn_id)
    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for e in events:
        p.produce(topic, key=e.encode(), value=json.dumps({"version": 1}).encode(), headers=[("event_id", e.encode())])
    assert p.flush(30) == 0

    def edit(spec: dict) -> None:
        spec.update(topic=topic, kafka_retry_seconds=3, dedup_copy={"store": "off"})
        spec["outbox"].update(table=table)
        spec["outbox"].pop("partitioning", None)

    _variant(tmp_path, edit, name=name)
    env = {"SEMANTICS_AUDITS_DIR": str(tmp_path)}
    airflow = [str(REPO / ".venv" / "bin" / "airflow"), "dags", "test", f"audit_{name}"]

    md = topics.admin_client(conf).list_topics(topic, timeout=10).topics[topic]
    alive = next(b for b in (1, 2, 3) if b != md.partitions[0].leader)
    stopped = [b for b in (1, 2, 3) if b != alive]
    backend = devstack.ProcessBackend()
    resume = lambda: [backend.resume(b) for b in stopped]
    try:
        with when_reconcile_starts(name, lambda: [backend.pause(b) for b in stopped], resume) as acted:
            res = run(airflow, timeout=900, env=env)
    finally:
        resume()  # SIGCONT again, whatever happened: `stack start` cannot wake a stopped broker
    out = res.stdout + res.stderr
    assert acted, f"the brokers were never stopped: no application of {name} seen\n{out[-3000:]}"
    state, tries = _airflow_tries(f"audit_{name}")
    assert "Error code is: 75" in out and "still failing after 3 s of retries" in out, out[-4000:]
    assert [t.split(":")[0] for t in tries["reconcile"]] == ["1", "2"], (tries, out[-4000:])
    assert tries["reconcile"][-1] == "2:success", (tries, out[-4000:])
    assert (state, tries["check"]) == ("success", ["1:success"])
    [row] = report.query("SELECT * FROM v_audit_results WHERE audit = %s", (name,))
    assert (row["delivered_once"], row["lost_acked"], row["verdict"]) == (5, 0, "kept")

    with when_reconcile_starts(name, lambda: topics.delete_topic(kafka_config(), topic)) as acted:
        res = run(airflow, timeout=900, env=env)
    out = res.stdout + res.stderr
    assert acted, "the topic was deleted as the application started"
    state, tries = _airflow_tries(f"audit_{name}")
    assert "Error code is: 2" in out and "bad input, not retried" in out, out[-4000:]
    assert (state, tries["reconcile"]) == ("failed", ["1:failed"]), (tries, out[-4000:])
    assert [t.split(":")[1] for t in tries["check"]] == ["upstream_failed"], tries


def _leader_kill(nemesis, leader: int) -> None:
    time.sleep(5)  # the application's JVM is starting
    nemesis.kill(leader)
    time.sleep(30)
    nemesis.restart(leader)


def _rolling_restart(nemesis, _leader: int) -> None:
    time.sleep(5)
    nemesis.rolling_restart()


# Minutes each; CI keeps the paused leader above, which asks the same retry of Kafka.
@pytest.mark.slow
@pytest.mark.parametrize("fault", [_leader_kill, _rolling_restart], ids=["leader_kill", "rolling_restart"])
def test_an_audit_run_through_a_broker_fault_has_the_quiet_runs_rows(orders, healthy_cluster_after, fault):
    """The nemesis's own faults while an audit runs: the leader of a partition of its topic
    killed (SIGKILL) as its Spark application starts and restarted 30 s later, or every broker
    stopped and started in turn, each once the cluster is in sync again. The rows are the quiet
    run's, and the application is tried again while the fault lasts."""
    from delivery_semantics.faults.nemesis import Nemesis

    audit, _ = orders
    tag = uuid.uuid4().hex[:6]
    quiet_id = f"audit:orders:quiet-{tag}"
    assert spark_submit.run(audit=audit, reconciliation_id=quiet_id).returncode == 0
    conf = kafka_config(audit.kafka_conn_id)
    md = topics.admin_client(conf).list_topics(audit.topic, timeout=10).topics[audit.topic]
    leader = next(p.leader for p in md.partitions.values() if p.leader != devstack.quorum_leader())
    nemesis = Nemesis(kafka_config(), devstack.ProcessBackend())
    thread = threading.Thread(target=fault, args=(nemesis, leader))
    thread.start()
    runs = 0
    try:
        while thread.is_alive() or runs == 0:
            faulted_id = f"audit:orders:faulted-{tag}-{runs}"
            res = spark_submit.run(audit=audit, reconciliation_id=faulted_id)
            assert res.returncode == 0, res.error
            assert _found(faulted_id) == _found(quiet_id), f"run {runs} under the fault"
            runs += 1
    finally:
        thread.join()
    actions = [e["action"] for e in nemesis.timeline.entries]
    assert actions.count("restart") == (3 if fault is _rolling_restart else 1), actions


def test_two_reconciliations_of_the_same_events_each_write_their_deduplicated_copy(orders):
    """The copy is keyed per reconciliation: the second audit run of the same topic and outbox
    writes its own rows, not none because the first took every event id. The first runs through the
    stack's Spark Connect server (`spark_connect`: its Delta write of the copy too), the second on
    its standalone cluster (`spark_standalone`), and both find the same."""
    audit, _ = orders
    tag = uuid.uuid4().hex[:6]
    first_id, second_id = f"audit:orders:first-{tag}", f"audit:orders:second-{tag}"
    res = spark_submit.run(audit=audit, reconciliation_id=first_id, spark_conn_id="spark_connect")
    assert res.returncode == 0, res.error
    res = spark_submit.run(audit=audit, reconciliation_id=second_id, spark_conn_id="spark_standalone")
    assert res.returncode == 0, res.error
    assert f"audit-{second_id}" in spark_cluster_apps() and f"audit-{first_id}" not in spark_cluster_apps()

    connect, cluster = _found(first_id), _found(second_id)
    assert len(connect[2]) == 26, "every event id read, the malformed record aside"
    assert connect[1], "the planted discrepancies"
    assert cluster == connect


# --------------------------------------------------------------------------- platform runs over SASL_SSL


@pytest.mark.slow  # CI's budget: test_oauth.py makes the same comparison over the OAUTHBEARER listener
def test_platform_runs_over_sasl_ssl_reconcile_as_on_plaintext():
    """The same transactional run produced over each listener and read at both isolation levels;
    one Spark application, on the SASL_SSL listener, reconciles both."""
    messages = 2000
    modes = ("transactional",)
    ids = {
        (listener, mode): load.start(
            load.LoadSpec(mode=mode, messages=messages, seed=7), kafka_conf=kafka_config(conn_id)
        ).run_id
        for listener, conn_id in (("sasl_ssl", "kafka_secure"), ("plaintext", "kafka_default"))
        for mode in modes
    }
    with watching_ps() as commands:
        r = spark_submit.run(
            run_id=list(ids.values()), env=spark_submit.spark_application_env(kafka_conn_id="kafka_secure")
        )
    assert r.returncode == 0, r.error
    _assert_no_secret({"ps -ef": "\n".join(commands), "spark output": r.stdout + r.stderr})
    results: dict = {"sasl_ssl": {}, "plaintext": {}}
    for s in r.summaries:
        (listener, mode), _ = next((k, v) for k, v in ids.items() if v == s["reconciliation_id"])
        results[listener][(mode, s["isolation"])] = {
            k: v for k, v in s.items() if k not in ("reconciliation_id", "topic")
        }
    assert len(results["sasl_ssl"]) == len(results["plaintext"]) == 2 * len(modes)
    assert results["sasl_ssl"] == results["plaintext"]
    for (mode, _iso), s in results["sasl_ssl"].items():
        assert s["delivered_once"] == messages and s["lost_acked"] == s["duplicate_events"] == 0, mode


# --------------------------------------------------------------------------- bad input


def _variant(tmp_path: Path, edit, name: str = "variant") -> Path:
    spec = yaml.safe_load(ORDERS.read_text())
    edit(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _audit_run(path: Path, rid: str, *more: str) -> subprocess.CompletedProcess:
    """`semantics audit run` through the stack's Spark Connect server (`spark_connect`): no JVM of its
    own to start (CI's budget), and the Connect path's stores and copies with it."""
    return semantics("audit", "run", str(path), "--reconciliation-id", rid, *more, timeout=600)


def _assert_results_file(path: Path, rid: str | None, verdict: str) -> dict:
    """The results file a real audit wrote: valid against the package's schema, with its verdict and
    the exit code that verdict gives."""
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, results_file.schema())
    assert (doc["verdict"], doc["exit_code"]) == (verdict, 0 if verdict == "kept" else 1)
    if rid:
        assert {r["reconciliation_id"] for r in doc["results"]} == {rid}
    return doc


def _summary(rid: str) -> dict:
    rows = report.query("SELECT * FROM v_audit_results WHERE reconciliation_id = %s", (rid,))
    assert len(rows) == 1, rows
    return rows[0]


@pytest.mark.parametrize(
    ("event_id", "store", "said"),
    [
        ({"header": "event_idd"}, "lakehouse", "header event_idd"),
        ({"json": "$.event_id"}, "postgres", "JSON path $.event_id"),
    ],
)
def test_an_audit_whose_file_cannot_find_the_event_id_says_so_plainly(
    orders, tmp_path, monkeypatch, event_id, store, said
):
    """A misspelt header or a JSON path no record has: the audit still gives its whole answer
    (every record malformed, every acked outbox row lost), with each copy store, and says in one
    line that the file, not the pipeline, is likely wrong; the check task fails with that line."""
    path = _variant(tmp_path, lambda s: s.update(dedup_copy={"store": store}) or s["record"].update(event_id=event_id))
    rid = f"audit:variant:mapping-{uuid.uuid4().hex[:6]}"
    res = _audit_run(path, rid)
    assert_judged(res)
    assert res.returncode == 1, "every acked outbox row lost: the promise is broken"
    row = _summary(rid)
    assert row["malformed"] == row["records_read"] > 0 and row["delivered_once"] == 0
    assert (row["lost_acked"], row["lost_unacked"]) == (25, 2), "every outbox row, as the file reads the topic"

    def line(records: int) -> str:
        return f"no record of topic orders has {said}; 0 of {records} records carry an event id"

    printed = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    assert printed and all(p["mapping_suspect"] == line(p["records_read"]) for p in printed)
    assert f"mapping_suspect: {line(printed[0]['records_read'])}" in res.stderr, res.stderr[-2000:]
    assert dedup.where(rid)["store"] == store
    # The check task's failure, which the audit's notifier sends, says it too.
    monkeypatch.setenv("SEMANTICS_AUDITS_DIR", str(tmp_path))
    with pytest.raises(report.BrokenPromise, match=re.escape(f"mapping_suspect: {line(row['records_read'])}")):
        report.audit_verdict(rid)


# CI keeps the batch with the lakehouse copy, the default, which crashed on nothing to copy; the
# window (which writes no copy) and the other stores are in the slow suite.
def _empty_pipeline(fresh_topic) -> tuple[str, str]:
    """A new topic and a new, empty outbox table: a pipeline before any traffic."""
    table = f"empty_{uuid.uuid4().hex[:8]}"
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute(
            f"CREATE TABLE public.{table} (seq_no bigserial PRIMARY KEY, id text NOT NULL, aggregate_id text, "
            "version int, created_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL)"
        )
        cur.execute(f"GRANT SELECT ON public.{table} TO PUBLIC")
    return fresh_topic("empty"), table


DOWNSTREAM_DAG = """from airflow.sdk import Asset, dag, task

VERIFIED = Asset({uri!r})


@dag(dag_id={dag_id!r}, schedule=[VERIFIED])
def downstream():
    @task
    def build(triggering_asset_events=None):
        print("built on", [e.extra for e in (triggering_asset_events or {{}}).get(VERIFIED, [])])

    build()


downstream()
"""


def test_a_kept_audits_dag_emits_its_topics_asset_its_lineage_and_its_metrics(orders, tmp_path, fresh_topic):
    """A team's DAG folder (its audit file, the five-line DAG file, and a DAG scheduled on the audit's
    Asset): `airflow dags test` of the audit keeps its promise, so its check task emits an event on
    `kafka://<first bootstrap server>/<topic>` with the verdict in its extra, and the downstream DAG is
    queued on it; OpenLineage (the provider, to a file) gets the reconcile task's inputs and outputs
    and the promise's guarantee as a successful assertion on the topic; StatsD gets the gauges."""
    topic, table = _empty_pipeline(fresh_topic)
    name = f"kept_{uuid.uuid4().hex[:6]}"
    dags = tmp_path / "dags"
    (dags / "audits").mkdir(parents=True)
    (dags / "team.py").write_text(installed.TEAM_DAG_FILE)
    spec = yaml.safe_load(ORDERS.read_text())
    spec.update(topic=topic, dedup_copy={"store": "off"})
    spec["outbox"].update(table=f"public.{table}")
    (dags / "audits" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    servers = json.loads(os.environ["AIRFLOW_CONN_KAFKA_SECURE"])["extra"]["bootstrap.servers"]
    uri = f"kafka://{servers.split(',')[0]}/{topic}"
    (dags / "downstream.py").write_text(DOWNSTREAM_DAG.format(uri=uri, dag_id=f"after_{name}"))
    lineage_file = tmp_path / "openlineage.jsonl"
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    statsd.settimeout(0.5)
    env = {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        **through_spark_connect(),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(lineage_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "semantics-test",
        "AIRFLOW__METRICS__STATSD_ON": "True",
        "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
        "AIRFLOW__METRICS__STATSD_PORT": str(statsd.getsockname()[1]),
    }
    airflow = str(REPO / ".venv" / "bin" / "airflow")
    try:
        first = run([airflow, "dags", "test", f"after_{name}"], env=env, timeout=300)  # the consumer, in the database
        assert first.returncode == 0, first.stderr[-3000:]
        unpaused = run(
            [airflow, "dags", "unpause", f"after_{name}"], env=env, timeout=300
        )  # a paused DAG is not queued
        assert unpaused.returncode == 0, unpaused.stderr[-3000:]
        res = run([airflow, "dags", "test", f"audit_{name}"], env=env, timeout=900)
        assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
        packets = []
        with contextlib.suppress(TimeoutError):
            while True:
                packets.append(statsd.recv(65536).decode())
    finally:
        statsd.close()
    gauges = dict(ln.rsplit("|", 1)[0].rsplit(":", 1) for p in packets for ln in p.splitlines() if ln.endswith("|g"))
    assert gauges[f"airflow.semantics.audit.{name}.guarantee.no_acked_loss"] == "1"
    assert gauges[f"airflow.semantics.audit.{name}.lost_acked"] == "0"

    event = airflow_query(
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = :uri", uri=uri
    )
    assert [e["extra"]["verdict"] for e in event] == ["kept"], event
    assert event[0]["extra"]["audit"] == name and event[0]["extra"]["counts"]["lost_acked"] == 0
    queued = airflow_query(
        "SELECT q.target_dag_id FROM asset_dag_run_queue q JOIN asset a ON a.id = q.asset_id WHERE a.uri = :uri",
        uri=uri,
    )
    assert [q["target_dag_id"] for q in queued] == [f"after_{name}"], "the downstream DAG is queued on it"

    events = [json.loads(ln) for ln in lineage_file.read_text().splitlines()]
    [done] = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"audit_{name}.reconcile"]
    inputs = {(d["namespace"], d["name"]): d for d in done["inputs"]}
    topic_in = inputs[(f"kafka://{servers.split(',')[0]}", topic)]
    checks = topic_in["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a["success"]) for a in checks] == [("no_acked_loss", True)]
    outbox = json.loads(os.environ["AIRFLOW_CONN_OUTBOX_DB"])
    assert (f"postgres://{outbox['host']}:{outbox['port']}", f"{outbox['schema']}.public.{table}") in inputs
    assert {d["name"].rsplit(".", 1)[-1] for d in done["outputs"]} == {"reconcile_summary", "reconcile_discrepancies"}


@pytest.mark.parametrize(
    ("kind", "store"),
    [
        ("batch", "lakehouse"),
        *(
            pytest.param(k, s, marks=pytest.mark.slow)
            for k, s in [
                ("batch", "postgres"),
                ("batch", "off"),
                ("window", "lakehouse"),
                ("window", "postgres"),
                ("window", "off"),
            ]
        ),
    ],
)
def test_an_audit_of_an_empty_topic_against_an_empty_outbox_keeps_its_promise(
    orders, tmp_path, fresh_topic, store, kind
):
    """The first scheduled audit of a new pipeline, before any traffic, as a batch or as a
    continuous window: exit 0, every count 0, the promise kept, and no mapping_suspect (nothing was
    read to suspect). A window keeps no deduplicated copy, and runs the same whichever store the
    file names."""
    topic, table = _empty_pipeline(fresh_topic)

    def edit(spec: dict) -> None:
        spec.update(topic=topic, dedup_copy={"store": store})
        spec["outbox"].update(table=f"public.{table}")
        if kind == "window":
            spec["window"] = {"grace": "10m"}

    path = _variant(tmp_path, edit, name=f"empty_{uuid.uuid4().hex[:6]}")
    counts = ("records_read", "outbox_due" if kind == "window" else "outbox_events", "lost_acked", "malformed")
    if kind == "batch":
        rid = f"audit:variant:empty-{uuid.uuid4().hex[:6]}"
        output = tmp_path / "results.json"
        res = _audit_run(path, rid, "--output", str(output))
        assert res.returncode == 0, res.stderr[-2000:]
        row = _summary(rid)
        assert row["delivered_once"] == 0
        _assert_results_file(output, rid, "kept")
    else:
        end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        output = tmp_path / "window.json"
        res = run(
            [
                str(REPO / "local" / "semantics"),
                "audit",
                "run",
                str(path),
                "--window-end",
                end.isoformat(),
                "--output",
                str(output),
            ]
        )
        assert res.returncode == 0, res.stderr[-2000:]
        doc = _assert_results_file(output, None, "kept")
        assert doc["results"][0]["window"]["end"] == end.strftime("%Y-%m-%dT%H:%M:%S+00:00")
        [row] = report.query("SELECT * FROM audit_windows WHERE audit = %s AND window_end = %s", (path.stem, end))
        assert (row["delivered"], row["pending_outbox"], row["open_discrepancies"]) == (0, 0, 0)
    assert {k: row[k] for k in counts} == dict.fromkeys(counts, 0) and row["verdict"] == "kept"
    assert "mapping_suspect" not in res.stderr


def test_a_store_role_that_can_write_is_warned_of_and_a_second_statement_never_runs(orders, tmp_path):
    """The preflight speaks the extended protocol: even a second statement past every text check
    (here, put there by hand) is refused by the server, and the canary table stays. A role that
    may write anywhere in its database gets a warning."""
    from delivery_semantics.audit import stores

    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS canary (x int)")
    path = _variant(tmp_path, lambda s: s["connections"].update(outbox="outbox_app"), name="writer")
    res = run([str(REPO / "local" / "semantics"), "audit", "validate", "--endpoints", str(path)], timeout=120)
    assert res.returncode == 0, res.stderr
    assert "WARNING: " in res.stderr and "role outbox_app can write in database outbox_demo" in res.stderr
    res = run([str(REPO / "local" / "semantics"), "audit", "validate", "--endpoints", str(ORDERS)], timeout=120)
    assert res.returncode == 0 and "WARNING" not in res.stderr, res.stderr
    store = stores.for_section(audits.load(path), "outbox")
    store.select = lambda: "SELECT 1 AS id) AS x; DROP TABLE canary; SELECT * FROM (SELECT 1 AS id"
    with pytest.raises(audits.AuditError, match="cannot insert multiple commands into a prepared statement"):
        store.check()
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("SELECT to_regclass('public.canary') IS NOT NULL")
        assert cur.fetchone() == (True,)


WRONG_SASL = json.dumps(
    {
        "conn_type": "kafka",
        "login": devstack.SCRAM_USER,
        "password": "not-the-password",
        "extra": {**json.loads(devstack.environment()["AIRFLOW_CONN_KAFKA_SECURE"])["extra"]},
    }
)
UNREACHABLE_DB = json.dumps(
    {"conn_type": "postgres", "host": "127.0.0.1", "port": 1, "login": "x", "password": "y", "schema": "outbox_demo"}
)
INJECTION = "outbox) AS x) AS y; DROP TABLE canary; SELECT * FROM (SELECT 1"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["outbox"].update(table=INJECTION), "outbox.table: 'outbox) AS x) AS y; DROP TABLE canary"),
        (lambda s: s["outbox"]["columns"].update(seq=INJECTION.replace(" ", "")), "outbox.columns.seq"),
        (
            lambda s: s.update(
                outbox={
                    "query": "SELECT id FROM outbox; DROP TABLE canary",
                    "allow_query": True,
                    "columns": {"event_id": "id"},
                }
            ),
            "outbox.query: ",
        ),
        (
            # Byte offsets taken as characters once cut this into SELECT; DROP; SELECT (issue 66).
            lambda s: s.update(
                outbox={
                    "query": "/*éééééééé*/;SELECT 'SELECT 1 AS id; DROP TABLE canary; SELECT 1 AS id --' AS id",
                    "allow_query": True,
                    "columns": {"event_id": "id"},
                }
            ),
            "outbox.query: holds a ';' before its end",
        ),
        (lambda s: s["connections"].update(outbox="ledger_db"), "connections.outbox: ledger_db is one of the platform"),
        (lambda s: s["outbox"]["columns"].update(seq="versoin"), 'outbox.columns: column "versoin" does not exist'),
        (lambda s: s["outbox"].update(table="public.no_such_outbox"), 'outbox.table: relation "public.no_such_outbox"'),
        (lambda s: s["connections"].update(kafka="no_such_kafka"), "connections: connection 'no_such_kafka'"),
        (lambda s: s["connections"].update(kafka="kafka_wrong"), "refused the client: "),
        (lambda s: s["connections"].update(outbox="outbox_unreachable"), "the database cannot be reached"),
        (lambda s: s.update(topic="no-such-topic"), "topic 'no-such-topic' does not exist"),
        (lambda s: s.pop("record"), "'record' is a required property"),
    ],
    ids=[
        "injected-table",
        "injected-column",
        "free-sql-write",
        "free-sql-byte-offsets",
        "platform-connection",
        "unknown-column",
        "unknown-table",
        "missing-connection",
        "wrong-sasl-credentials",
        "unreachable-outbox-db",
        "unknown-topic",
        "fails-the-schema",
    ],
)
def test_bad_audits_are_refused_with_one_line_and_exit_2_before_anything_is_written(orders, tmp_path, edit, message):
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS canary (x int)")
    with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS canary (x int)")
    before = _audit_rows()
    path = _variant(tmp_path, edit)
    env = {"AIRFLOW_CONN_KAFKA_WRONG": WRONG_SASL, "AIRFLOW_CONN_OUTBOX_UNREACHABLE": UNREACHABLE_DB}
    started = time.monotonic()
    res = run([str(REPO / "local" / "semantics"), "audit", "run", str(path)], env=env, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"audit: {path}: ") and message in lines[0], res.stderr
    assert time.monotonic() - started < 60
    assert _audit_rows() == before
    for conn in (_outbox_owner(), psycopg2.connect(**ledger_database().psycopg2_kwargs())):
        with conn, conn.cursor() as cur:
            cur.execute("SELECT to_regclass('public.canary') IS NOT NULL")
            assert cur.fetchone()[0], "the canary table is gone"
        conn.close()
    _assert_no_secret({"stderr": res.stderr})


@pytest.mark.parametrize("command", [["audit", "run"], ["audit", "validate", "--endpoints"]])
def test_free_sql_cannot_write_even_through_a_role_that_can(orders, tmp_path, command):
    """The outbox's owner role may drop tables; the audit's free SQL still may not, whether it is
    run or only validated against the database."""

    def commit_and_drop(s):
        s["connections"]["outbox"] = "outbox_app"  # the owner: a role that can write
        s["outbox"] = {
            "query": "SELECT id FROM outbox; COMMIT; DROP TABLE canary",
            "allow_query": True,
            "columns": {"event_id": "id"},
        }

    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS canary (x int)")
    path = _variant(tmp_path, commit_and_drop)
    res = run([str(REPO / "local" / "semantics"), *command, str(path)], timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines == [f"audit: {path}: outbox.query: holds 3 statements; free SQL is exactly one SELECT"]
    with _outbox_owner() as c, c.cursor() as cur:
        cur.execute("SELECT to_regclass('public.canary') IS NOT NULL")
        assert cur.fetchone()[0], "the canary table is gone"


# --------------------------------------------------------------------------- the documentation


def _doc_blocks(lang: str) -> list[str]:
    text = (REPO / "docs" / "RECONCILE.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


# Audit files in the docs whose pipelines their own tests build and run.
RUN_BY_THEIR_TESTS = {
    "orders_avro": "test_record_formats.py",
    "orders_protobuf": "test_record_formats.py",
    "orders_text": "test_record_formats.py",
    "orders_mtls": "test_an_audit_over_mutual_tls_finds_the_same_and_shows_no_key_or_keystore_password",
    "orders_lakehouse": "test_stores.py",
}


def test_every_audit_file_in_the_docs_is_a_file_in_the_repo_and_runs(orders, tmp_path):
    blocks = _doc_blocks("yaml")
    assert len(blocks) >= 2
    documented = set()
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("# sections of an audit file"):
            # Sections shown alone: added to a real audit file, they pass its schema.
            spec = {**yaml.safe_load(ORDERS.read_text()), **yaml.safe_load(block)}
            (tmp_path / "orders.yaml").write_text(yaml.safe_dump(spec))
            audits.load(tmp_path / "orders.yaml")
            continue
        assert first.startswith("# audits/"), f"a YAML example in RECONCILE.md must start with its path: {first}"
        path = REPO / first[2:].split()[0]
        assert path.read_text() == block, f"{path} and its copy in docs/RECONCILE.md differ"
        documented.add(path.stem)
        if audits.load(path).windowed or path.stem in RUN_BY_THEIR_TESTS:
            continue  # its pipeline is built, and the file run, by its own test
        audit_preflight.preflight(path)
        if path == ORDERS:
            continue  # run by its DAG above, and by `audit run orders` in the docs' commands
        rid = f"audit:{path.stem}:docs-{uuid.uuid4().hex[:6]}"
        res = _audit_run(path, rid)
        assert_judged(res)
        assert f"audit run 1/1: {rid}: " in res.stderr, "its progress line, on stderr"
        s = {
            r["isolation"]: r
            for r in report.query("SELECT * FROM v_audit_results WHERE reconciliation_id = %s", (rid,))
        }
        assert len(s) == 1 and s[next(iter(s))]["outbox_events"] == 25  # the SENT rows
        assert _discrepancies(rid)
    # The README's tour shows its own, run by the test after this one.
    assert documented | {"quickstart"} == {p.stem for p in (REPO / "audits").glob("*.yaml")}, "every file in the docs"


# Run above with more checks: the scheduled audit by its DAG, and `audit run FILE` (the same
# command and Spark application) by the test of the docs' audit files.
RUN_ELSEWHERE = {"airflow dags test audit_orders", "local/semantics audit run orders"}


def test_every_command_in_the_docs_runs(orders):
    commands = [
        ln.split("#", 1)[0].strip()
        for block in _doc_blocks("bash")
        for ln in block.splitlines()
        if ln.split("#", 1)[0].strip()
    ]
    assert any("audit run" in c for c in commands)
    for line in commands:
        if line in RUN_ELSEWHERE:
            continue
        res = run(["bash", "-c", line], timeout=900)
        if re.search(r"\b(audit run|reconcile|pipeline run)\b", line):
            assert_judged(res)  # a documented audit may find its file's planted anomalies
        else:
            assert res.returncode == 0, (line, res.stderr[-2000:])


def test_the_readme_tour_audits_its_sample_and_finds_exactly_the_planted_loss_and_duplicate(tmp_path):
    """The README's second step, as a newcomer runs it after `make demo`: its files are the repo's,
    `local/stack sample` fills the quickstart pipeline, and the audit finds what was planted."""
    text = (REPO / "README.md").read_text()
    shown = {b.splitlines()[0][2:]: b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)}
    assert set(shown) == {"audits/quickstart.yaml", "modes/orders_java.yaml"}, set(shown)
    for path, block in shown.items():
        assert (REPO / path).read_text() == block, f"{path} and its copy in the README differ"
    filled = run([str(REPO / "local" / "stack"), "sample"], check=True)
    planted = json.loads(filled.stdout.split("planted: ", 1)[1])
    output = tmp_path / "quickstart.json"
    res = _audit_run(Path("quickstart"), f"audit:quickstart:tour-{uuid.uuid4().hex[:6]}", "--output", str(output))
    # The planted loss breaks at_least_once's promise: the command fails as a CI step should.
    assert res.returncode == 1 and assert_judged(res), res.stderr[-3000:]
    doc = _assert_results_file(output, None, "broken")
    [judged] = [r for r in doc["results"] if r["isolation"] == "read_uncommitted"]
    assert (judged["counts"]["lost_acked"], judged["counts"]["duplicate_events"]) == (1, 1)
    assert judged["broken_by"] == ["lost_acked"] and judged["subject"] == {
        "kind": "audit",
        "name": "quickstart",
        "judged_as": "at_least_once",
    }
    summaries = {
        s["isolation"]: s for s in map(json.loads, (ln for ln in res.stdout.splitlines() if ln.startswith("{")))
    }
    s = summaries["read_uncommitted"]  # at_least_once is judged as its consumers read
    assert (s["records_read"], s["delivered_once"], s["lost_acked"], s["duplicate_events"], s["malformed"]) == (
        1000,
        998,
        1,
        1,
        0,
    ), s
    assert (s["verdict"], s["broken_by"]) == ("broken", "lost_acked"), "at least once may duplicate, never lose"
    found = _discrepancies(s["reconciliation_id"])
    assert set(found[("read_uncommitted", "lost_acked")]) == {planted["lost"]}
    assert set(found[("read_uncommitted", "duplicate")]) == {planted["duplicated"]}
    # The rules read the same topic's configuration from the cluster: RF 3 and min ISR 2 hold
    # acks=all's promise; lowered to 1 by the team, they would not.
    predict = [str(REPO / "local" / "semantics"), "predict", "--audit", "quickstart", "--json"]
    res = run([*predict, "--set", "producer.acks=all", "--set", "producer.enable.idempotence=true"], check=True)
    assert [json.loads(line)["rule"] for line in res.stdout.splitlines()] == ["idempotence_across_restarts"]
    res = run([*predict, "--set", "producer.acks=all", "--set", "topic.min.insync.replicas=1"], check=True)
    assert "min_insync_one" in {json.loads(line)["rule"] for line in res.stdout.splitlines()}
    res = run([str(REPO / "local" / "semantics"), "predict", "--audit", "orders_nosuch"])
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    # A team that lets an out-of-sync replica lead: the audit's preflight says what that breaks.
    admin = topics.admin_client(kafka_config())
    change = ConfigResource(ResourceType.TOPIC, "quickstart_orders")
    change.add_incremental_config(
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)
    )
    admin.incremental_alter_configs([change])[change].result(timeout=30)
    checked = run([str(REPO / "local" / "semantics"), "audit", "validate", "quickstart", "--endpoints"], check=True)
    assert "audit quickstart: predicted: unclean_leader_election: topic.unclean.leader.election.enable=true" in (
        checked.stderr
    ), checked.stderr
