"""Bad input is refused before any side effect: producer settings, load specs, mappings, and the
CLI's one-line errors with exit 2. None of this needs a running service."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import REPO, cli

from delivery_semantics import catalog, modes
from delivery_semantics.audit.stores import mysql, sql
from delivery_semantics.workload import load
from delivery_semantics.workload.generator import slices
from delivery_semantics.workload.settings import resolve


@pytest.mark.parametrize(
    ("mode", "overrides", "message"),
    [
        ("idempotent", {"acks": "1"}, "enable.idempotence=true needs acks=all"),
        ("idempotent", {"max.in.flight": "6"}, "max.in.flight.requests.per.connection <= 5"),
        ("transactional", {"enable.idempotence": "false"}, "transactional producer needs enable.idempotence=true"),
        (
            "at_least_once",
            {"bootstrap.servers": "x:1"},
            "cannot be set by a mode or a run: it names or replaces the cluster",
        ),
        ("at_least_once", {"transactional.id": "mine"}, "cannot be set by a mode or a run: the platform sets it"),
        ("at_least_once", {"sasl.password": "x"}, "cannot be set by a mode or a run: the Kafka connection sets it"),
        (
            "at_least_once",
            {"no.such.key": "1"},
            "no.such.key is not a setting a form or --set may give the librdkafka client; allowed: acks,",
        ),
        ("at_least_once", {"linger.ms": {"a": 1}}, "a setting's value is a string"),
        ("at_least_once", {"linger.ms": "-1"}, "linger.ms='-1' must be an integer from 0 to 60000"),
        ("at_least_once", {"acks": "2"}, "acks='2' must be one of 0, 1, all, -1"),
    ],
)
def test_bad_or_owned_producer_settings_are_refused(mode, overrides, message):
    with pytest.raises(catalog.ModeError, match=re.escape(message)):
        resolve(modes.get_mode(mode), "librdkafka", overrides)


def test_a_mode_preset_sets_every_key_it_depends_on():
    r = resolve(modes.get_mode("at_least_once"), None, {"request.required.acks": "-1", "compression.codec": "lz4"})
    assert (r.conf["acks"], r.conf["compression.type"], r.conf["enable.idempotence"]) == ("all", "lz4", "false")
    assert r.overrides == {"acks": "-1", "compression.type": "lz4"}
    assert resolve(modes.get_mode("transactional")).conf["transaction.timeout.ms"] == "60000"


def test_a_setting_that_contradicts_the_promise_is_a_finding_not_a_refusal():
    """at_most_once promises no duplicates: with acks=1 its retries may write twice."""
    r = resolve(modes.get_mode("at_most_once"), None, {"acks": "1", "retries": "3"})
    assert [(f.guarantee, f.setting) for f in r.findings] == [("no_duplicates", "enable.idempotence=false")]
    # at_least_once declares what acks=1 does: its promise lifts no_acked_loss under the leader's faults.
    assert resolve(modes.get_mode("at_least_once")).findings == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "nope", "messages": 10}, "unknown mode 'nope'"),
        ({"mode": "idempotent", "messages": -1}, "messages must be a positive integer"),
        ({"mode": "idempotent", "messages": 10, "abort_ratio": 0.5}, "abort_ratio needs the transactional mode"),
        ({"mode": "idempotent", "messages": 10, "topic": "bad topic!"}, "topic"),
        ({"mode": "idempotent", "messages": 10, "run_id": "x'; DROP TABLE runs; --"}, "run id"),
        ({"mode": "idempotent", "messages": 10, "payload_bytes": 2_000_000}, "does not fit message.max.bytes"),
        ({"mode": "idempotent", "messages": 10, "overrides": {"no.such.key": "1"}}, "is not a setting a form"),
        ({"mode": "idempotent", "messages": 10, "client": "go"}, "unknown client 'go'"),
        ({"mode": "idempotent", "messages": 10, "producers": 0}, "producers must be a positive integer"),
        ({"mode": "idempotent", "messages": 3, "producers": 4}, "producers must be at most 3"),
        ({"mode": "idempotent", "messages": 1000, "producers": 33}, "producers must be at most 32"),
        ({"mode": "idempotent", "messages": 10, "record_format": "xml"}, "record format 'xml': use one of text, avro"),
        (
            {"mode": "idempotent", "messages": 10, "client": "java", "record_format": "avro"},
            "record format avro: the java client writes text records only",
        ),
    ],
)
def test_a_load_spec_is_checked_before_anything_is_sent(spec, message):
    with pytest.raises(load.LoadError, match=message):
        load.validate(load.LoadSpec(**spec))


@pytest.mark.parametrize(("messages", "producers"), [(1, 1), (10, 3), (15_000, 2), (1_000_003, 32)])
def test_producer_slices_cover_every_event_once_and_evenly(messages, producers):
    cut = slices(messages, producers)
    assert cut[0][0] == 0 and cut[-1][1] == messages
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(cut))
    sizes = [stop - start for start, stop in cut]
    assert len(cut) == producers and max(sizes) - min(sizes) <= 1 and min(sizes) > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["load", "run", "--mode", "nope", "--messages", "10"],
            "load: unknown mode 'nope': choose one of at_most_once",
        ),
        (["load", "run", "--mode", "idempotent", "--messages", "-5"], "load: messages must be a positive integer"),
        (["load", "run", "--mode", "at_most_once", "--scenario", "lost_ack", "--messages", "5"], "never waits for one"),
        (["load", "run", "--mode", "idempotent", "--messages", "5", "--set", "acks"], "is not key=value"),
        (["load", "run", "--mode", "idempotent", "--messages", "5", "--producers", "-1"], "producers must be"),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--client", "java", "--set", "no.such=1"],
            "load: no.such is not a setting a form or --set may give the java client",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--client", "java", "--set", "acks=7"],
            "load: acks='7' must be one of 0, 1, all, -1",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--client", "java", "--set", "key.serializer=x"],
            "load: key.serializer cannot be set by a mode or a run: the platform sets it",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--set", "transactional.id=x"],
            "load: transactional.id cannot be set by a mode or a run: the platform sets it",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--set", "linger.ms=soon"],
            "load: linger.ms='soon' is not an integer",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--client", "go"],
            "load: unknown client 'go': choose one of librdkafka, java",
        ),
        (
            ["load", "run", "--mode", "idempotent", "--messages", "5", "--record-format", "xml"],
            "load: record format 'xml': use one of text, avro",
        ),
        (["consumer_workload", "run", "--strategy", "yolo", "--source-run", "r1"], "unknown consumer strategy 'yolo'"),
        (
            ["consumer_workload", "run", "--strategy", "process_then_commit", "--source-run", "r1", "--crashes", "0"],
            "crashes must be an integer in [1, 5]",
        ),
        (
            ["consumer_workload", "run", "--strategy", "process_then_commit", "--source-run", "r1", "--set", "a=1"],
            "consumer setting 'a': strategy process_then_commit takes no settings",
        ),
        (
            [
                "consumer_workload",
                "run",
                "--strategy",
                "auto_commit",
                "--source-run",
                "r1",
                "--set",
                "auto.commit.interval.ms=1\r\n5",
            ],
            "consumer setting auto.commit.interval.ms='1\\r\\n5': an integer in [100, 60000]",
        ),
        (
            [
                "consumer_workload",
                "run",
                "--strategy",
                "slow_poll_loop",
                "--source-run",
                "r1",
                "--set",
                "max.poll.interval.ms=20000",
            ],
            "app.processing.ms=12000 must exceed max.poll.interval.ms=20000",
        ),
        (["reconcile", "--mapping", "audits/orders.yaml", "--no-dedup-copy"], "--dedup-copy is for --run-id"),
        (["dedup", "vacuum", "--retain-hours", "-1"], "semantics dedup vacuum: argument --retain-hours: '-1' is not"),
        (["dedup", "show", "r1", "--limit", "x"], "semantics dedup show: argument --limit: 'x' is not a whole number"),
        (["load", "run", "--mode"], "semantics load run: argument --mode: expected one argument"),
        (["dedup", "vacuum", "--lakehouse", "/nonexistent"], "dedup: TableNotFoundError"),
        (
            ["audit", "run", "orders_stream", "--window-end", "2999-01-01T00:00:00Z"],
            "audit: the window end 2999-01-01T00:00:00+00:00 is in the future",
        ),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(args, message):
    res = cli(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_partition_is_refused_where_the_brokers_links_are_not_proxied():
    """A backend of a team's own that proxies only client traffic (the base class's answer); the
    local stack and the compose deployment both proxy every link."""
    res = cli(
        *("load", "run", "--mode", "idempotent", "--scenario", "partitioned_leader", "--messages", "5"),
        SEMANTICS_NEMESIS_BACKEND="delivery_semantics.faults.nemesis:Backend",
    )
    assert res.returncode == 2, res.stderr
    assert "partitioned_leader: the abstract backend routes only client traffic through Toxiproxy" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


ORDERS = REPO / "audits" / "orders.yaml"
STREAM = REPO / "audits" / "orders_stream.yaml"


def _audit(tmp_path, edit, base=ORDERS) -> str:
    import yaml

    spec = yaml.safe_load(base.read_text())
    edit(spec)
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("mode"), r"give mode \(a delivery mode\) or pipeline \(a connector pipeline\), one of them"),
        (lambda s: s.update(pipeline="debezium_outbox"), r"give mode \(a delivery mode\) or pipeline"),
        (lambda s: s.update(mode="exactly_once"), "mode: 'exactly_once' is not a delivery mode"),
        (
            lambda s: [s.pop("mode"), s.update(pipeline="at_least_once")],
            "pipeline: 'at_least_once' is not a connector pipeline; use one of debezium_outbox",
        ),
        (
            lambda s: s["outbox"].update(table="outbox) AS x) AS y; DROP TABLE t; SELECT * FROM (SELECT 1"),
            r"outbox.table: 'outbox\) AS x.*is not a table name: a SQL identifier",
        ),
        (
            lambda s: s["outbox"]["columns"].update(key="aggregate id"),
            "outbox.columns.key: 'aggregate id' is not a SQL",
        ),
        (lambda s: s["outbox"]["partitioning"].update(column="seq_no; --"), "outbox.partitioning.column"),
        (lambda s: s["outbox"].update(query="SELECT 1"), "outbox: query is free SQL: it needs allow_query: true"),
        (lambda s: s["record"].update(event_id={"hdr": "x"}), r"record.event_id: .* is not a field: use one of"),
        (lambda s: s["record"].update(seq={"json": "$.a'; DROP"}), "record.seq"),
        (
            lambda s: s.update(bootstrap_servers="k:9092"),
            r"\(top level\): unknown field 'bootstrap_servers' \(Kafka comes from",
        ),
        (lambda s: s["connections"].pop("outbox"), "connections: 'outbox' is a required property"),
        (lambda s: s.update(topic="bad topic"), "topic: 'bad topic' is not a Kafka topic name"),
        (
            lambda s: s.update(transactional=True),
            "transactional: true, but mode at_least_once does not write transactions",
        ),
    ],
)
def test_an_audit_file_is_refused_naming_the_file_and_the_field(tmp_path, edit, message):
    from delivery_semantics.audit import audits

    path = _audit(tmp_path, edit)
    with pytest.raises(audits.AuditError, match=f"^{path}: {message}"):
        audits.load(path)


def test_an_audit_names_a_mode_or_a_pipeline_and_an_older_file_may_name_a_pipeline_as_its_mode(tmp_path):
    from delivery_semantics.audit import audits

    assert audits.load(_audit(tmp_path, lambda s: None)).judged_as == "at_least_once"
    as_pipeline = audits.load(_audit(tmp_path, lambda s: [s.pop("mode"), s.update(pipeline="debezium_outbox_eos")]))
    assert as_pipeline.judged_as == "debezium_outbox_eos"
    assert audits.load(_audit(tmp_path, lambda s: s.update(mode="debezium_outbox"))).judged_as == "debezium_outbox"
    eos = _audit(tmp_path, lambda s: [s.pop("mode"), s.update(pipeline="debezium_outbox", transactional=True)])
    with pytest.raises(audits.AuditError, match="transactional: true, but pipeline debezium_outbox does not write"):
        audits.load(eos)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["window"].update(grace="15 minutes"), "window.grace: '15 minutes' is not a duration"),
        (lambda s: s.pop("window"), r"\(top level\): sink needs window"),
        (
            lambda s: [s.pop(k) for k in ("window", "sink")],
            "alerts.max_open_discrepancies: counts a continuous audit's windows: it needs window",
        ),
        (lambda s: s["connections"].pop("sink"), "connections.sink: a jdbc sink needs its database's connection"),
        (lambda s: s["outbox"]["columns"].pop("publish_at"), "outbox.columns: 'publish_at' is a required property"),
        (
            lambda s: s["sink"].update(strategy="transactional_copy"),
            "sink.strategy: 'transactional_copy' is not a sink",
        ),
        (lambda s: s["sink"]["columns"].update(applied_at="applied at"), "sink.columns.applied_at: 'applied at'"),
        (lambda s: s["sink"].update(store="s3; DROP TABLE t"), r"sink.store: 's3; DROP TABLE t' is not one of"),
        (
            lambda s: s["sink"].update(store="jdbc", format="delta"),
            r"sink: store and format \(its older name\) are one field: give store",
        ),
        (lambda s: s.update(pipeline="debezium_outbox\r\nmode: x"), r"give mode \(a delivery mode\) or pipeline"),
        (
            lambda s: [s.pop("mode"), s.update(pipeline="debezium_outbox\r\nmode: x")],
            r"pipeline: 'debezium_outbox\\r\\nmode: x' is not a connector pipeline",
        ),
        (lambda s: s["alerts"].update(notifier={"pager": {}}), r"alerts.notifier: unknown field 'pager'"),
        (lambda s: s["alerts"].update(max_open_discrepancies=-1), "alerts.max_open_discrepancies: -1 is less than"),
    ],
)
def test_a_continuous_audit_file_is_refused_naming_the_file_and_the_field(tmp_path, edit, message):
    from delivery_semantics.audit import audits

    path = _audit(tmp_path, edit, STREAM)
    with pytest.raises(audits.AuditError, match=f"^{path}: {message}"):
        audits.load(path)


def test_window_ends_and_ids_are_exact_and_in_utc():
    from datetime import UTC, datetime, timedelta

    from delivery_semantics.audit import audits

    a = audits.load(STREAM)
    assert (a.windowed, a.grace, a.sink_strategy) == (True, timedelta(minutes=10), "process_then_commit")
    end = audits.window_end("2026-11-23T15:00:00.250+01:00")
    assert end == datetime(2026, 11, 23, 14, 0, tzinfo=UTC)
    assert audits.window_id(a, end) == "audit:orders_stream:2026-11-23T14:00:00Z"
    later = datetime.now(UTC) + timedelta(minutes=1)
    with pytest.raises(audits.AuditError, match=r"is in the future.*a window never ends after now"):
        audits.window_end(later.isoformat())
    for bad in ("2026-11-23T14:00:00", "yesterday"):
        with pytest.raises(audits.AuditError):
            audits.window_end(bad)
    assert sql.time_bounded("SELECT 1 AS t", "t", None, end) == (
        "SELECT * FROM (SELECT 1 AS t) AS bounded WHERE t < TIMESTAMPTZ '2026-11-23T14:00:00+00:00'"
    )
    assert sql.sink_select(a) == (
        'SELECT "event_id" AS "event_id", "order_id" AS "key", "version" AS "version", "applied_at" AS "applied_at" '
        'FROM "public"."order_applies"'
    )
    # MySQL's dialect: backticks (`key` is a reserved word there), a time in a UTC session.
    assert sql.sink_select(a, mysql.quote_mysql).startswith("SELECT `event_id` AS `event_id`, `order_id` AS `key`")
    assert sql.time_bounded("SELECT 1 AS t", "t", None, end, mysql.timestamp_utc) == (
        "SELECT * FROM (SELECT 1 AS t) AS bounded WHERE t < TIMESTAMP '2026-11-23 14:00:00.000000'"
    )


def test_identifiers_are_quoted_and_free_sql_only_where_allowed(tmp_path):
    from delivery_semantics.audit import audits

    a = audits.load(ORDERS)
    assert sql.outbox_select(a) == (
        'SELECT "id" AS "event_id", "aggregate_id" AS "key", "version" AS "seq", "created_at" AS "publish_at", '
        '"state" AS "status", "seq_no" AS partition_key FROM "public"."outbox"'
    )
    with pytest.raises(audits.AuditError):
        sql.quote_ident('x"; DROP TABLE t; --')
    with pytest.raises(audits.AuditError):
        mysql.quote_mysql("order_events` WHERE 1=0; DROP TABLE order_events; -- ")

    def free_sql(s):
        s["outbox"] = {
            "query": "SELECT id FROM outbox WHERE state <> 'TEST'",
            "allow_query": True,
            "columns": {"event_id": "id"},
        }

    q = audits.load(_audit(tmp_path, free_sql))
    assert (
        sql.outbox_select(q)
        == 'SELECT "id" AS "event_id" FROM (\nSELECT id FROM outbox WHERE state <> \'TEST\'\n) AS outbox_query'
    )
    assert audits.reconciliation_id(a, "scheduled__2026-11-23T10:00:00+00:00") == (
        "audit:orders:scheduled__2026-11-23T10:00:00+00:00"
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT id FROM outbox; COMMIT; DROP TABLE outbox", "holds 3 statements"),
        ("SELECT 1) AS q; DROP TABLE t; SELECT * FROM (SELECT 1", "not valid SQL"),
        # a backslash does not escape a quote in a standard string: two statements, as the server reads it
        ("SELECT id FROM outbox WHERE state = 'a\\'; DROP TABLE t; --'", "holds 2 statements"),
        ("DELETE FROM outbox RETURNING id", "is a DeleteStmt, not a SELECT"),
        ("WITH gone AS (DELETE FROM outbox RETURNING id) SELECT id FROM gone", "writes (DELETE)"),
        ("SELECT id INTO stolen FROM outbox", "creates a table (SELECT INTO)"),
        ("SELECT id FROM outbox FOR UPDATE", "locks rows"),
        ("   ", "holds 0 statements"),
    ],
)
def test_free_sql_is_exactly_one_select_before_anything_runs(tmp_path, query, message):
    from delivery_semantics.audit import audits

    def free_sql(s):
        s["outbox"] = {"query": query, "allow_query": True, "columns": {"event_id": "id"}}

    path = _audit(tmp_path, free_sql)
    with pytest.raises(audits.AuditError, match=f"^{path}: outbox.query: .*{re.escape(message)}"):
        audits.load(path)


def test_free_sql_runs_as_the_one_statement_it_is():

    q = "/* the sent rows */ SELECT id FROM outbox WHERE state = 'SENT; or not' -- no test rows\n;"
    assert sql.free_select(q, "x") == "SELECT id FROM outbox WHERE state = 'SENT; or not' -- no test rows"


@pytest.mark.parametrize(
    ("spec", "value", "expected"),
    [
        ({"value": True}, b"17", "17"),  # Kafka's VerifiableProducer: the value is the id
        ({"value": True}, b"order-9", "order-9"),
        ({"json": "$"}, b'"order-9"', "order-9"),  # a JSON string: its text
        ({"json": "$"}, b"17", "17"),
        ({"json": "$.id"}, b'{"id": "order-9"}', "order-9"),
    ],
)
def test_a_value_that_is_the_id_itself_is_read(spark, tmp_path, spec, value, expected):
    from checker.formats import field
    from delivery_semantics.audit import audits

    def bare(s):
        s["record"] = {"event_id": spec, "key": {"record_key": True}}

    audits.load(_audit(tmp_path, bare))  # the schema takes it
    df = spark.createDataFrame([(value, b"k")], "value binary, key binary")
    assert df.select(field(spec, "string").alias("id")).first()["id"] == expected


def test_kafka_security_settings_become_the_java_clients_for_spark():
    from delivery_semantics.plumbing.endpoints import EndpointError, spark_kafka_options

    conf = {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": 'p"w\\',
        "ssl.ca.location": "/etc/ca.pem",
        "linger.ms": "5",
    }
    assert spark_kafka_options(conf) == {
        "kafka.bootstrap.servers": "b:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" '
        'password="p\\"w\\\\";',
    }
    assert spark_kafka_options({"bootstrap.servers": "b:9092"}) == {"kafka.bootstrap.servers": "b:9092"}
    with pytest.raises(EndpointError, match="needs a user"):
        spark_kafka_options({**conf, "sasl.password": ""})
    with pytest.raises(EndpointError, match="GSSAPI is not supported"):
        spark_kafka_options({**conf, "sasl.mechanisms": "GSSAPI"})


def test_the_kafka_connection_carries_the_sasl_secret_in_its_password_field(monkeypatch):
    from delivery_semantics.plumbing.endpoints import kafka_config, mask_secrets

    monkeypatch.setenv(
        "AIRFLOW_CONN_SECURED",
        json.dumps(
            {
                "conn_type": "kafka",
                "login": "svc",
                "password": "s3cret",
                "extra": {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL"},
            }
        ),
    )
    conf = kafka_config("secured")
    assert (conf["sasl.username"], conf["sasl.password"]) == ("svc", "s3cret")
    assert "s3cret" not in json.dumps(mask_secrets(conf))


def test_the_connection_in_the_docs_gives_librdkafka_and_spark_their_settings(monkeypatch):
    import re

    from delivery_semantics.plumbing.endpoints import kafka_config, spark_kafka_options

    example, mtls = re.findall(r"```json\n(.*?)```", (REPO / "docs" / "RECONCILE.md").read_text(), flags=re.S)
    monkeypatch.setenv("AIRFLOW_CONN_DOCS_MTLS", mtls)
    conf = kafka_config("docs_mtls")
    assert (conf["security.protocol"], conf["ssl.key.password"]) == ("SSL", "the client key's password")
    assert "sasl.password" not in conf and conf["ssl.key.location"] == "var/tls/client.key"
    monkeypatch.setenv("AIRFLOW_CONN_DOCS_EXAMPLE", example)
    conf = kafka_config("docs_example")
    assert (conf["security.protocol"], conf["sasl.username"], conf["sasl.password"]) == (
        "SASL_SSL",
        "semantics",
        "the SCRAM password",
    )
    spark = spark_kafka_options(conf)
    assert spark["kafka.ssl.truststore.location"] == "var/tls/ca.pem"
    assert 'username="semantics" password="the SCRAM password";' in spark["kafka.sasl.jaas.config"]


def test_a_notifier_whose_provider_is_missing_is_refused_before_anything_runs(tmp_path):
    from delivery_semantics.audit import audits

    audits.check_notifier(audits.load(STREAM))  # smtp: a provider Airflow installs with it
    slack = audits.load(_audit(tmp_path, lambda s: s["alerts"].update(notifier={"slack": {"channel": "#x"}}), STREAM))
    with pytest.raises(
        audits.AuditError, match=r"alerts\.notifier\.slack: apache-airflow-providers-slack is not installed"
    ):
        audits.check_notifier(slack)


def test_a_store_is_chosen_by_the_connections_type_and_an_unknown_one_is_refused(monkeypatch):
    from delivery_semantics.audit import audits, stores
    from delivery_semantics.audit.stores.postgres import PostgresStore

    a = audits.load(ORDERS)
    monkeypatch.delenv("SEMANTICS_SOURCE_DIALECT", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_OUTBOX_DB", json.dumps({"conn_type": "postgres", "host": "h", "schema": "d"}))
    assert isinstance(stores.for_section(a, "outbox"), PostgresStore)
    env = stores.spark_env("outbox_db", "outbox")
    assert (
        env["SEMANTICS_SOURCE_DIALECT"] == "postgres"
        and env["SEMANTICS_SOURCE_JDBC_URL"] == "jdbc:postgresql://h:5432/d"
    )
    monkeypatch.setenv("AIRFLOW_CONN_OUTBOX_DB", json.dumps({"conn_type": "mysql", "host": "h", "schema": "d"}))
    from delivery_semantics.audit.stores.mysql import MysqlStore

    assert isinstance(stores.for_section(a, "outbox"), MysqlStore)
    assert stores.spark_env("outbox_db", "outbox")["SEMANTICS_SOURCE_JDBC_URL"].startswith(
        "jdbc:mysql://h:3306/d?permitMysqlScheme&connectionTimeZone=UTC"
    )
    monkeypatch.setenv("AIRFLOW_CONN_OUTBOX_DB", json.dumps({"conn_type": "http", "host": "h"}))
    with pytest.raises(
        stores.StoreError,
        match=r"^a connection of type 'http' holds no store the audits read; one of: mysql, postgres$",
    ):
        stores.for_section(a, "outbox")
    # In a Spark application the submitter's environment names the store.
    monkeypatch.setenv("SEMANTICS_SOURCE_DIALECT", "postgres")
    assert isinstance(stores.for_section(a, "outbox"), PostgresStore)


def _client_certificate(tmp_path, password: bytes):
    """A self-signed certificate and its key, encrypted with `password` (PKCS#8 PEM)."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "client.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "client.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )
    return cert


def test_a_tls_client_certificate_becomes_a_pkcs12_keystore_for_the_java_client(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives.serialization import pkcs12

    from delivery_semantics.plumbing.endpoints import EndpointError, kafka_config, spark_kafka_options

    cert = _client_certificate(tmp_path, b"key-secret")
    monkeypatch.setenv("SEMANTICS_KEYSTORE_DIR", str(tmp_path / "stores"))
    extra = {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/ca.pem",
        "ssl.certificate.location": str(tmp_path / "client.pem"),
        "ssl.key.location": str(tmp_path / "client.key"),
    }
    monkeypatch.setenv(
        "AIRFLOW_CONN_MTLS", json.dumps({"conn_type": "kafka", "password": "key-secret", "extra": extra})
    )
    conf = kafka_config("mtls")
    assert conf["ssl.key.password"] == "key-secret" and "sasl.password" not in conf  # librdkafka's own keys
    options = spark_kafka_options(conf)
    store = Path(options["kafka.ssl.keystore.location"])
    assert options["kafka.ssl.keystore.type"] == "PKCS12" and options["kafka.security.protocol"] == "SSL"
    assert store.parent == tmp_path / "stores" and oct(store.stat().st_mode & 0o777) == "0o600"
    assert oct(store.parent.stat().st_mode & 0o777) == "0o700"
    _, got, _ = pkcs12.load_key_and_certificates(store.read_bytes(), options["kafka.ssl.keystore.password"].encode())
    assert got == cert
    assert "key-secret" not in json.dumps(options), "the key's own password is not handed on"
    assert spark_kafka_options(conf) == options, "the same key finds the same keystore"
    with pytest.raises(EndpointError) as e:
        spark_kafka_options({**conf, "ssl.key.password": "not-the-key-password"})
    assert "cannot be read with the connection's password" in str(e.value) and "not-the-key" not in str(e.value)
    with pytest.raises(EndpointError, match="needs both"):
        spark_kafka_options({k: v for k, v in conf.items() if k != "ssl.key.location"})


def test_mapping_suspect_says_when_almost_no_record_carries_an_event_id(tmp_path):
    from delivery_semantics.audit import audits

    audit = audits.load(REPO / "audits" / "orders.yaml")
    said = "of topic orders has header event_id"
    assert audits.mapping_suspect(audit, 12_345, 12_345) == f"no record {said}; 0 of 12,345 records carry an event id"
    assert (
        audits.mapping_suspect(audit, 12_345, 12_300)
        == f"almost no record {said}; 45 of 12,345 records carry an event id"
    )
    assert audits.mapping_suspect(audit, 12_345, 12_000) is None, "345 of 12,345 is over 1%"
    assert audits.mapping_suspect(audit, 0, 0) is None, "an empty window: nothing to suspect"
    assert audits.mapping_suspect(audit, None, None) is None
    strict = audits.Audit("o", audit.path, {**audit.spec, "record": {**audit.record, "min_id_share": 0.5}})
    assert audits.mapping_suspect(strict, 100, 60).startswith("almost no record")
    json_path = audits.Audit("o", audit.path, {**audit.spec, "record": {**audit.record, "event_id": {"json": "$.id"}}})
    assert "has JSON path $.id;" in audits.mapping_suspect(json_path, 10, 10)


def test_a_run_the_disk_cannot_hold_is_refused_in_one_line_before_anything(tmp_path, monkeypatch):
    import shutil

    from delivery_semantics.workload import load

    monkeypatch.setenv("SEMANTICS_DATA_DISKS", str(tmp_path))
    free = shutil.disk_usage(tmp_path).free
    too_many = free // (3 * 260 + load.DISK_BYTES_PER_EVENT) + 1
    spec = load.LoadSpec(mode="idempotent", messages=int(too_many))
    with pytest.raises(load.LoadError, match=r"^not enough disk for [0-9,]+ events: .* GiB free, the run needs about"):
        load.require_free_disk(spec)
    load.require_free_disk(load.LoadSpec(mode="idempotent", messages=1000))  # a small run fits
    monkeypatch.delenv("SEMANTICS_DATA_DISKS")
    load.require_free_disk(spec)  # no folder named: a cluster of its own, not checked
