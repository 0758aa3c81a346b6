"""The boundary between teams (docs/SECURITY.md, issue 66), tried as a hostile but ordinary user
would: a committer of one team's audit and mode files, or a user who may trigger DAGs. Every attempt
is refused in one line before any statement, process or row, or confined, or bounded. No service
is needed; the DagBag's side (one bad file, one error; every task's timeout) is in test_dags.py."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest
import yaml
from conftest import REPO, cli

from delivery_semantics import budgets, catalog, clients, mode_files, modes, teams
from delivery_semantics.audit import AuditError, audits, schemas
from delivery_semantics.audit.stores.sql import free_select
from delivery_semantics.plumbing import endpoints, spark
from delivery_semantics.plumbing.connect import ConnectCluster
from delivery_semantics.workload import load, settings

QUICKSTART = yaml.safe_load((REPO / "audits" / "quickstart.yaml").read_text())
PAYLOAD = "/*éééééééé*/;SELECT 'SELECT 1 AS id; DROP TABLE victim; SELECT 1 AS id --' AS id"


def _audit(tmp_path: Path, edit=None, name: str = "team_audit") -> Path:
    spec = json.loads(json.dumps(QUICKSTART))
    if edit:
        edit(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return path


# --------------------------------------------------------------------------- free SQL


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (PAYLOAD, "holds a ';' before its end"),
        ("SELECT 1 AS id\0; DROP TABLE x", "holds the character U+0000"),
        ("SELECT '\ud800' AS id", "holds the character U+D800"),
        ("SELECT 1 AS id\x1b", "holds the character U+001B"),
        ("SELECT 1 AS id; COMMIT; DROP TABLE victim", "holds 3 statements"),
        ("SELECT 1 AS id;;", "holds a ';' before its end"),
        ("WITH d AS (DELETE FROM victim RETURNING id) SELECT id FROM d", "writes (DELETE)"),
    ],
    ids=["utf8-offsets", "nul", "surrogate", "escape", "commit", "empty-statement", "writing-with"],
)
def test_free_sql_is_refused_before_any_database_sees_it(query, message):
    with pytest.raises(AuditError, match=re.escape(message)):
        free_select(query, "outbox.query")


def test_free_sql_runs_exactly_the_statement_checked_multibyte_text_included():
    text = "/* café, naïve */ SELECT 'é;ü' AS id, 2 AS n -- trailing ü;\n;"
    got = free_select(text, "outbox.query")
    assert got == "SELECT 'é;ü' AS id, 2 AS n -- trailing ü;"
    # Parsed again, it is the one SELECT that was checked: nothing of the text around it.
    assert free_select(got, "outbox.query") == got


# --------------------------------------------------------------------------- connections


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["connections"].update(outbox="ledger_db"), "connections.outbox: ledger_db is one of the platform"),
        (lambda s: s["connections"].update(kafka="spark_default"), "connections.kafka: spark_default is one of"),
        (
            lambda s: s.update(alerts={"notifier": {"smtp": {"to": "a@example.com", "smtp_conn_id": "ledger_db"}}}),
            "alerts.notifier.smtp.smtp_conn_id: ledger_db is one of the platform",
        ),
    ],
    ids=["outbox-ledger", "kafka-spark", "smtp-ledger"],
)
def test_a_file_never_names_the_platforms_own_connections(tmp_path, edit, message):
    with pytest.raises(AuditError, match=message):
        audits.load(_audit(tmp_path, edit))


def test_a_teams_file_names_only_its_teams_connections_each_in_its_role(tmp_path, monkeypatch):
    orders, payments = tmp_path / "orders", tmp_path / "payments"
    orders.mkdir(), payments.mkdir()
    (tmp_path / "teams.yaml").write_text(
        yaml.safe_dump(
            {
                "teams": {
                    "orders": {
                        "folders": ["orders"],
                        "connections": {"kafka_default": "kafka", "outbox_db": "postgres"},
                    },
                    "payments": {"folders": ["payments"], "connections": {"kafka_pay": "kafka", "pay_db": "postgres"}},
                }
            }
        )
    )
    monkeypatch.setenv("SEMANTICS_TEAMS", str(tmp_path / "teams.yaml"))
    assert audits.load(_audit(orders)).name == "team_audit"
    with pytest.raises(
        AuditError, match="pay_db is not a connection of team orders, whose files may name: kafka_default, outbox_db"
    ):
        audits.load(_audit(orders, lambda s: s["connections"].update(outbox="pay_db")))
    with pytest.raises(AuditError, match=r"connections.kafka: outbox_db is a postgres connection; kafka takes kafka"):
        audits.load(_audit(orders, lambda s: s["connections"].update(kafka="outbox_db")))
    with pytest.raises(AuditError, match="belongs to no team"):
        audits.load(_audit(tmp_path))
    mode = payments / "team_mode.yaml"
    mode.write_text("client: librdkafka\nsettings: {acks: all}\npromise: no_acked_loss\nconnection: kafka_default\n")
    with pytest.raises(mode_files.ModeFileError, match="kafka_default is not a connection of team payments"):
        mode_files.load(mode)


def test_a_connection_of_another_type_is_never_a_kafka_cluster(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SOME_DB",
        json.dumps({"conn_type": "postgres", "host": "db", "login": "u", "password": "p", "schema": "d"}),
    )
    with pytest.raises(endpoints.EndpointError, match="'some_db' is of type 'postgres', not a kafka connection"):
        endpoints.kafka_config("some_db")
    with pytest.raises(teams.TeamError, match="smtp takes smtp"):
        teams.check_type("some_db", "postgres", "smtp")


@pytest.mark.parametrize(
    ("host", "schema"),
    [
        ("db?socketFactory=org.x.Evil&socketFactoryArg=x", "outbox"),
        ("db", "outbox?loggerFile=/tmp/x"),
        ("db/outbox;allowLoadLocalInfile=true", "outbox"),
        ("db", "outbox&autoDeserialize=true"),
    ],
)
def test_jdbc_options_never_come_from_a_connections_host_or_schema(monkeypatch, host, schema):
    conn = {"conn_type": "postgres", "host": host, "login": "u", "password": "p", "schema": schema}
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_DB", json.dumps(conn))
    with pytest.raises(endpoints.EndpointError, match=r"'team_db': its (host|schema)"):
        endpoints.database("team_db")


@pytest.mark.parametrize(
    ("store", "jdbc", "outcome"),
    [
        ("postgres", {"sslmode": "verify-full", "connectTimeout": "10"}, "?sslmode=verify-full&connectTimeout=10"),
        ("mysql", {"sslMode": "verify-full"}, "&sslMode=verify-full"),
        ("postgres", {"socketFactory": "org.x.Evil"}, "extra.jdbc.socketFactory is not a driver option"),
        ("postgres", {"sslmode": "require&loggerFile=/tmp/x"}, "extra.jdbc.sslmode: not "),
        ("mysql", {"allowLoadLocalInfile": "true"}, "is not a driver option a mysql store takes"),
        ("mysql", {"autoDeserialize": "true"}, "is not a driver option a mysql store takes"),
    ],
)
def test_driver_options_come_only_from_an_allowlisted_extra(monkeypatch, store, jdbc, outcome):
    from delivery_semantics.audit.stores import StoreError, store_class

    conn = {
        "conn_type": store,
        "host": "db",
        "login": "u",
        "password": "p",
        "schema": "outbox",
        "extra": {"jdbc": jdbc},
    }
    monkeypatch.setenv("AIRFLOW_CONN_TEAM_DB", json.dumps(conn))
    cls = store_class(store)
    if outcome.startswith(("?", "&")):
        url = cls.spark_env("team_db", "SEMANTICS_SOURCE")["SEMANTICS_SOURCE_JDBC_URL"]
        assert url.endswith(outcome) and url.count("?") == 1, url
    else:
        with pytest.raises(StoreError, match=re.escape(outcome)):
            cls.spark_env("team_db", "SEMANTICS_SOURCE")


def test_an_audit_file_never_takes_a_pipeline_runs_name(tmp_path):
    with pytest.raises(AuditError, match="names beginning pipeline_ are the connector pipelines"):
        audits.load(_audit(tmp_path, name="pipeline_x"))


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"linger.ms": "900000"}, "linger.ms='900000' must be an integer from 0 to 60000"),
        ({"message.timeout.ms": "0"}, "message.timeout.ms='0' must be an integer from 1000 to 900000"),
        ({"queue.buffering.max.messages": "1"}, "queue.buffering.max.messages='1' must be an integer from 1000"),
        ({"linger.ms": "40000", "message.timeout.ms": "60000"}, "linger.ms=40000 must be at most half"),
    ],
)
def test_settings_that_would_hold_a_run_for_months_are_refused(overrides, message):
    with pytest.raises(catalog.ModeError, match=re.escape(message)):
        settings.resolve(modes.get_mode("at_least_once"), "librdkafka", overrides)


def test_java_timeouts_are_bounded_too():
    with pytest.raises(catalog.ModeError, match=r"delivery.timeout.ms='0' must be an integer from 1000"):
        settings.resolve(modes.get_mode("at_least_once"), "java", {"delivery.timeout.ms": "0"})


def test_memory_summed_over_a_runs_producers_stays_under_the_operators_cap():
    big_queue = {"queue.buffering.max.kbytes": str(1024 * 1024), "queue.buffering.max.messages": "10000000"}
    with pytest.raises(load.LoadError, match="32 producers of up to 1088 MiB each hold 34816 MiB, over the run's 8192"):
        load.validate(load.LoadSpec(mode="at_least_once", messages=20_000, producers=32, overrides=big_queue))
    with pytest.raises(load.LoadError, match="32 producers of up to 2176 MiB each"):
        load.validate(
            load.LoadSpec(
                mode="at_least_once",
                client="java",
                messages=20_000,
                producers=32,
                overrides={"buffer.memory": str(1024 << 20)},
            )
        )
    assert load.validate(load.LoadSpec(mode="at_least_once", messages=20_000, producers=32)).mode.name


def test_a_load_has_a_deadline_from_its_size_under_the_operators_maximum(monkeypatch):
    assert budgets.load_seconds(20_000) == 300 + 400
    assert budgets.load_seconds(20_000, rate=50) == 300 + 800
    assert budgets.load_seconds(10_000_000) == 6 * 3600
    monkeypatch.setenv("SEMANTICS_RUN_MAX_SECONDS", "600")
    assert budgets.load_seconds(20_000) == 600


@pytest.mark.parametrize(
    ("spark_conf", "message"),
    [
        ({"spark.cores.max": 999999}, r"spark.cores.max: 999999 is outside 1 to 8"),
        ({"spark.executor.memory": "999999t"}, r"spark.executor.memory: 999999t is outside 1 MiB to 16384 MiB"),
        ({"spark.driver.maxResultSize": "0"}, r"spark.driver.maxResultSize: 0 is outside .* 0, unlimited, is refused"),
        ({"spark.executor.instances": 500}, r"spark.executor.instances: 500 is outside 1 to 8"),
    ],
)
def test_an_audits_spark_sizes_stay_within_the_operators_maxima(tmp_path, spark_conf, message):
    with pytest.raises(AuditError, match=message):
        audits.load(_audit(tmp_path, lambda s: s.update(spark=spark_conf)))


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("@continuous", "@continuous runs without pause"),
        ("* * * * *", "runs every 0:01:00; the shortest interval allowed is 0:05:00"),
        ("0,1 * * * *", "runs every 0:01:00"),
    ],
)
def test_schedules_run_no_more_often_than_the_operators_minimum(tmp_path, schedule, message):
    with pytest.raises(AuditError, match=message):
        audits.load(_audit(tmp_path, lambda s: s.update(schedule=schedule)))
    mode = tmp_path / "fast_mode.yaml"
    mode.write_text(
        yaml.safe_dump(
            {"client": "librdkafka", "settings": {"acks": "all"}, "promise": "no_acked_loss", "schedule": schedule}
        )
    )
    with pytest.raises(mode_files.ModeFileError, match=message):
        mode_files.load(mode)
    assert audits.load(_audit(tmp_path, lambda s: s.update(schedule="*/5 * * * *"))).schedule == "*/5 * * * *"


# --------------------------------------------------------------------------- paths and processes


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("{./.,q}./outside", "holds '{': Spark would read it as a pattern"),
        ("lake/*", "holds '*'"),
        ("s3a://lake/team-a/../team-b", "climbs with '..'"),
    ],
)
def test_a_lakehouse_path_is_plain_no_glob_and_no_climbing_uri(tmp_path, monkeypatch, path, message):
    monkeypatch.setenv("SEMANTICS_DATA_ROOTS", f"{tmp_path},s3a://lake/team-a")
    sink = {"store": "delta", "path": path, "columns": {"event_id": "e", "key": "k", "version": "v", "applied_at": "a"}}
    with pytest.raises(AuditError, match=message):
        audits.load(_audit(tmp_path, lambda s: s.update(window={"grace": "10m"}, sink=sink)))


def _proto_audit(tmp_path: Path) -> Path:
    folder = tmp_path / "team"
    folder.mkdir()
    (folder / "order.proto").write_text(
        'syntax = "proto3";\nimport "secret.proto";\nmessage Order { string id = 1; Secret s = 2; }\n'
    )
    return folder


def test_protoc_never_follows_a_committed_link_out_of_the_audits_folder(tmp_path):
    folder = _proto_audit(tmp_path)
    outside = tmp_path / "outside.proto"
    outside.write_text('syntax = "proto3";\nmessage Secret { string password = 1; }\n')
    (folder / "secret.proto").symlink_to(outside)
    with pytest.raises(AuditError, match=r"not a .proto schema: secret.proto: File not found"):
        schemas._compile_proto(folder / "order.proto", "record.schemas")


def test_protoc_is_never_held_by_a_fifo(tmp_path):
    folder = _proto_audit(tmp_path)
    os.mkfifo(folder / "secret.proto")
    done = threading.Event()
    errors = []

    def compile_it():
        try:
            schemas._compile_proto(folder / "order.proto", "record.schemas")
        except AuditError as e:
            errors.append(str(e))
        done.set()

    threading.Thread(target=compile_it, daemon=True).start()
    assert done.wait(60), "protoc waited on the FIFO"
    assert errors and "secret.proto: File not found" in errors[0]


def test_a_connectors_secret_is_never_written_through_a_planted_link(tmp_path):
    shared = tmp_path / "secrets"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    target = tmp_path / "stolen"
    (shared / "orders-sink.properties").symlink_to(target)
    cluster = ConnectCluster.__new__(ConnectCluster)
    cluster.conn_id, cluster.secrets_dir = "kafka_connect", str(shared)
    with pytest.raises(endpoints.EndpointError, match="not a private folder"):
        cluster.secret_reference("orders-sink", "s3cret")
    shared.chmod(0o700)
    ref = cluster.secret_reference("orders-sink", "s3cret")
    assert not target.exists(), "the password went through the link"
    written = shared / "orders-sink.properties"
    assert not written.is_symlink() and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert ref == "${file:" + str(written) + ":password}"


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("spark://spark-yarn-gateway", "the Spark provider would take it for yarn"),
        ("spark://k8s-proxy.example", "the Spark provider would take it for k8s"),
        ("YARN", "not local"),
        ("mesos://m", "not local"),
    ],
)
def test_a_master_the_spark_provider_would_take_for_another_is_refused(monkeypatch, host, said):
    """The provider tests `yarn` and `k8s` as substrings: a standalone master named so would take its
    YARN or Kubernetes path (and its environment would go on the command line)."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEAM", json.dumps({"conn_type": "spark", "host": host, "port": 7077}))
    with pytest.raises(endpoints.EndpointError, match=said):
        spark.spark_master("spark_team")


def test_a_mode_files_client_id_carries_the_platforms_prefix(tmp_path):
    path = tmp_path / "team_client.yaml"
    path.write_text("client: java\nsettings: {client.id: billing-service}\npromise: no_acked_loss\n")
    mode = mode_files.load(path).mode
    assert mode.producer_settings("java")["client.id"] == f"{clients.base.CLIENT_ID_PREFIX}billing-service"


def test_one_bad_file_gives_one_line_and_exit_2_in_audit_validate(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text((REPO / "audits" / "quickstart.yaml").read_text() + f"description: {'9' * 5000}\n")
    res = cli("audit", "validate", str(path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "huge.yaml: not valid YAML: ValueError: Exceeds the limit" in lines[0]
