"""The rule catalog: each rule found where its setting is and not where it is not, every name it
uses the catalog's, and the rules' account of the presets agreeing with DESIGN.md's expectations."""

from __future__ import annotations

import pytest

from delivery_semantics import catalog, rule_catalog

SOURCE = "io.debezium.connector.postgresql.PostgresConnector"
SINK = "io.debezium.connector.jdbc.JdbcSinkConnector"

# Per rule: settings that trip it, and the same with the setting that makes it hold.
CASES = {
    "acks_zero": ({"producer": {"acks": "0"}}, {"producer": {"acks": "all"}}),
    "acks_one": ({"producer": {"acks": "1"}}, {"producer": {"acks": "-1"}}),
    "acks_one_offsets": ({"producer": {"acks": "1"}}, {"producer": {"acks": "all"}}),
    "retries_without_idempotence": (
        {"producer": {"enable.idempotence": "false", "retries": "5"}},
        {"producer": {"enable.idempotence": "true", "retries": "5"}},
    ),
    "in_flight_without_idempotence": (
        {"producer": {"enable.idempotence": "false", "max.in.flight.requests.per.connection": "5"}},
        {"producer": {"enable.idempotence": "false", "max.in.flight.requests.per.connection": "1"}},
    ),
    "delivery_timeout_shorter_than_failover": (
        {"producer": {"delivery.timeout.ms": "10000"}},
        {"producer": {"delivery.timeout.ms": "120000"}},
    ),
    "idempotence_across_restarts": (
        {"producer": {"enable.idempotence": "true"}},
        {"producer": {"enable.idempotence": "true", "transactional.id": "t"}},
    ),
    "transaction_timeout_shorter_than_a_stall": (
        {"producer": {"transactional.id": "t", "transaction.timeout.ms": "10000"}},
        {"producer": {"transactional.id": "t", "transaction.timeout.ms": "60000"}},
    ),
    "transactions_read_uncommitted": (
        {"producer": {"transactional.id": "t"}, "consumer": {"isolation.level": "read_uncommitted"}},
        {"producer": {"transactional.id": "t"}, "consumer": {"isolation.level": "read_committed"}},
    ),
    "min_insync_one": (
        {"producer": {"acks": "all"}, "topic": {"min.insync.replicas": "1"}},
        {"producer": {"acks": "all"}, "topic": {"min.insync.replicas": "2"}},
    ),
    "unclean_leader_election": (
        {"topic": {"unclean.leader.election.enable": "true"}},
        # Two in-sync copies of every acked write: a single loss leaves one to elect cleanly.
        {"producer": {"acks": "all"}, "topic": {"unclean.leader.election.enable": "true", "min.insync.replicas": "2"}},
    ),
    "replication_factor_one": (
        {"topic": {"replication.factor": "1"}, "producer": {"delivery.timeout.ms": "10000"}},
        # A send that outwaits the broker's restart lands once it is back.
        {"topic": {"replication.factor": "1"}, "producer": {"delivery.timeout.ms": "120000"}},
    ),
    "retention_shorter_than_the_audit": (
        {"topic": {"retention.ms": "60000", "app.audit.window.ms": "600000"}},
        {"topic": {"retention.ms": "604800000", "app.audit.window.ms": "600000"}},
    ),
    "broker_unclean_leader_election": (
        {"broker": {"unclean.leader.election.enable": "true"}},
        {"broker": {"unclean.leader.election.enable": "false"}},
    ),
    "auto_commit": (
        {"consumer": {"enable.auto.commit": "true"}},
        {"consumer": {"enable.auto.commit": "false"}},
    ),
    "commit_before_process": (
        {"consumer": {"app.commit": "before_process"}},
        {"consumer": {"app.commit": "after_process"}},
    ),
    "commit_after_process_without_dedup": (
        {"consumer": {"app.commit": "after_process", "app.dedup": "false"}},
        {"consumer": {"app.commit": "after_process", "app.dedup": "true"}},
    ),
    "auto_offset_reset_latest": (
        {"consumer": {"auto.offset.reset": "latest"}},
        {"consumer": {"auto.offset.reset": "earliest"}},
    ),
    "max_poll_interval_shorter_than_processing": (
        {"consumer": {"max.poll.interval.ms": "30000", "app.processing.ms": "60000"}},
        {"consumer": {"max.poll.interval.ms": "300000", "app.processing.ms": "60000"}},
    ),
    "read_uncommitted_on_a_transactional_topic": (
        {"consumer": {"isolation.level": "read_uncommitted"}, "topic": {"app.transactional": "true"}},
        {"consumer": {"isolation.level": "read_committed"}, "topic": {"app.transactional": "true"}},
    ),
    "errors_tolerated_without_a_dead_letter_queue": (
        {"connector": {"connector.class": SINK, "errors.tolerance": "all"}},
        {"connector": {"connector.class": SINK, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}},
    ),
    "source_without_exactly_once": (
        {"connector": {"connector.class": "io.debezium.connector.postgresql.PostgresConnector"}},
        {
            "connector": {
                "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "exactly.once.source.support": "enabled",
            }
        },
    ),
    "jdbc_sink_insert": (
        {"connector": {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "insert.mode": "insert"}},
        {"connector": {"connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector", "insert.mode": "upsert"}},
    ),
    "producer_override_weakens_acks": (
        {"connector": {"connector.class": SOURCE, "producer.override.acks": "1"}},
        {"connector": {"connector.class": SOURCE, "producer.override.acks": "all"}},
    ),
    "jdbc_sink_keyed_by_kafka_coordinates": (
        {"connector": {"connector.class": SINK, "insert.mode": "upsert", "primary.key.mode": "kafka"}},
        {"connector": {"connector.class": SINK, "insert.mode": "upsert", "primary.key.mode": "record_key"}},
    ),
    "retries_zero": ({"producer": {"acks": "1", "retries": "0"}}, {"producer": {"acks": "1", "retries": "3"}}),
    "retention_by_size": (
        {"topic": {"retention.bytes": "1073741824", "app.audit.window.ms": "3600000"}},
        {"topic": {"retention.bytes": "-1", "app.audit.window.ms": "3600000"}},
    ),
    "compacted_topic": ({"topic": {"cleanup.policy": "compact"}}, {"topic": {"cleanup.policy": "delete"}}),
    "sink_reads_uncommitted": (
        {
            "connector": {
                "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                "consumer.override.isolation.level": "read_uncommitted",
            }
        },
        {
            "connector": {
                "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                "consumer.override.isolation.level": "read_committed",
            }
        },
    ),
}


def test_the_catalog_has_twenty_rules_across_every_family_each_with_its_reference():
    assert len(rule_catalog.RULES) >= 20 and len(rule_catalog.RULES_BY_NAME) == len(rule_catalog.RULES)
    # `cluster` holds facts (feature levels) other families' rules read; it has no rule of its own.
    assert {r.family for r in rule_catalog.RULES} == set(rule_catalog.FAMILIES) - {"cluster"}
    for r in rule_catalog.RULES:
        assert r.kind in catalog.KINDS, r.name
        assert r.scenarios and set(r.scenarios) <= set(catalog.SCENARIOS), r.name
        assert r.guarantee in rule_catalog.GUARANTEES, r.name
        assert r.reference.startswith("https://") and r.reason, r.name
        assert all(ref.split(".", 1)[0] in rule_catalog.FAMILIES for ref in r.reads), r.name
    assert set(CASES) == set(rule_catalog.RULES_BY_NAME), "a known-answer case per rule"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_is_found_with_its_setting_and_not_without(name):
    tripped, held = CASES[name]
    assert name in {p.rule.name for p in rule_catalog.predict(tripped)}, tripped
    assert name not in {p.rule.name for p in rule_catalog.predict(held)}, held
    assert name not in {p.rule.name for p in rule_catalog.predict({})}, "nothing given, nothing judged"


def test_a_family_not_given_is_not_judged_with_its_defaults():
    # The consumer's defaults (auto commit, latest) would trip three rules: a producer alone trips none of them.
    found = {p.rule.family for p in rule_catalog.predict({"producer": {"acks": "all", "enable.idempotence": "true"}})}
    assert "consumer" not in found and "connector" not in found


def test_the_java_clients_defaults_are_its_own():
    # kafka-clients 3+ defaults to idempotence; librdkafka does not.
    assert "retries_without_idempotence" not in {p.rule.name for p in rule_catalog.predict({"producer": {}}, "java")}
    assert "retries_without_idempotence" in {p.rule.name for p in rule_catalog.predict({"producer": {}})}


def test_bad_input_is_one_line():
    for given, client, message in (
        ({"nosuch": {}}, "librdkafka", "unknown settings family 'nosuch'"),
        ({"producer": {}}, "kotlin", "unknown client 'kotlin'"),
    ):
        with pytest.raises(rule_catalog.RuleError, match=message):
            rule_catalog.predict(given, client)


def test_the_rules_and_design_md_agree_on_every_preset_pair_or_the_package_does_not_load(monkeypatch):
    """Two accounts of the semantics: what the rules predict of each preset's settings under each
    scenario, and what DESIGN.md §3 expects (catalog.Scenario.expected). Every count expected above
    zero is predicted, and nothing predicted is expected to be zero; rule_catalog.py checks it as it loads."""
    assert rule_catalog.disagreements() == []
    # A rule taken away: the count it alone predicts is expected above zero and predicted by none.
    monkeypatch.setattr(rule_catalog, "RULES", tuple(r for r in rule_catalog.RULES if r.name != "acks_zero"))
    assert "at_most_once x leader_kill: DESIGN.md expects lost >0, predicted by no rule" in rule_catalog.disagreements()


def test_predict_reads_a_mode_a_pipeline_or_settings_and_refuses_bad_input_in_one_line(capsys):
    import json

    from delivery_semantics.entry.cli import main

    assert main(["predict", "--mode", "at_least_once", "--json"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {f["rule"] for f in found} == {
        "acks_one",
        "acks_one_offsets",
        "retries_without_idempotence",
        "in_flight_without_idempotence",
    }
    assert all(f["reference"].startswith("https://") for f in found)
    assert main(["predict", "--pipeline", "debezium_outbox"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("source_without_exactly_once: ") and "jdbc_sink_insert: " in out
    assert main(["predict", "--set", "producer.acks=1", "--fail-on", "no_acked_loss"]) == 1
    capsys.readouterr()
    for argv, message in (
        (["--set", "producer.acks"], "is not FAMILY.KEY=VALUE"),
        (["--set", "nosuch.key=1"], "unknown settings family"),
        (["--mode", "nosuch"], "unknown mode 'nosuch'"),
        (["--pipeline", "nosuch"], "unknown pipeline 'nosuch'"),
        (["--mode", "idempotent", "--fail-on", "nope"], "--fail-on 'nope'"),
        ([], "nothing to read"),
    ):
        assert main(["predict", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


def test_a_live_source_that_requires_exactly_once_is_judged_by_that_and_only_rule_keys_are_read():
    # Through Connect's REST API the worker's setting is not visible; a connector that requires
    # exactly-once support runs only on a worker that gives it.
    source = {"connector.class": catalog.SOURCE_CONNECTOR, "exactly.once.support": "required"}
    assert [p.rule.name for p in rule_catalog.predict({"connector": source})] == []
    assert (
        "connection.password" not in rule_catalog.CONNECTOR_KEYS and "connection.url" not in rule_catalog.CONNECTOR_KEYS
    )
    assert {"errors.tolerance", "insert.mode", "exactly.once.support", "connector.class"} <= rule_catalog.CONNECTOR_KEYS


@pytest.mark.parametrize("name", ["a b", "../connectors", "x\r\nHost: evil", "", "-leading", "a" * 201])
def test_a_connector_name_that_is_not_one_is_refused_before_any_request(name):
    from delivery_semantics.plumbing.connect import ConnectCluster, ConnectError

    cluster = ConnectCluster(urls=["http://127.0.0.1:1"])  # nothing listens: a request would say so instead
    with pytest.raises(ConnectError, match="is not"):
        cluster.settings_for_rules(name)


def test_a_failed_send_is_lost_where_the_application_drops_it_and_a_single_replica_waits_for_its_broker():
    short = {"delivery.timeout.ms": "10000"}
    fired = {p.rule.name for p in rule_catalog.predict({"producer": short, "topic": {"replication.factor": "1"}})}
    assert {"delivery_timeout_shorter_than_failover", "replication_factor_one"} <= fired
    # An application that sends again what failed loses none of it (the platform's loads but at_most_once).
    resent = {**short, "app.resends_failed": "true"}
    fired = {p.rule.name for p in rule_catalog.predict({"producer": resent, "topic": {"replication.factor": "1"}})}
    assert not fired & {"delivery_timeout_shorter_than_failover", "replication_factor_one"}
    assert rule_catalog.of_mode("at_least_once")[0]["producer"]["app.resends_failed"] == "true"
    assert rule_catalog.of_mode("at_most_once")[0]["producer"]["app.resends_failed"] == "false"
    # A transaction that fails to commit is the application's to send again too.
    transactional = {**short, "transactional.id": "t", "transaction.timeout.ms": "10000"}
    fired = {p.rule.name for p in rule_catalog.predict({"producer": transactional})}
    assert {"delivery_timeout_shorter_than_failover", "transaction_timeout_shorter_than_a_stall"} <= fired
    fired = {p.rule.name for p in rule_catalog.predict({"producer": {**transactional, "app.resends_failed": "true"}})}
    assert not fired & {"delivery_timeout_shorter_than_failover", "transaction_timeout_shorter_than_a_stall"}
    # Longer than a failover, shorter than a broker's restart: only the single replica loses.
    fired = {
        p.rule.name
        for p in rule_catalog.predict(
            {"producer": {"delivery.timeout.ms": "15000"}, "topic": {"replication.factor": "1"}}
        )
    }
    assert "replication_factor_one" in fired and "delivery_timeout_shorter_than_failover" not in fired


def test_a_delivery_timeout_within_the_request_timeout_fails_a_send_before_any_retry():
    # Measured: at_least_once_all with delivery.timeout.ms=5000 under lost acks (request timeout 10 s):
    # no duplicate, 419 sends lost.
    def fired(producer):
        return {p.rule.name for p in rule_catalog.predict({"producer": {"enable.idempotence": "false", **producer}})}

    assert "retries_without_idempotence" in fired({})
    assert "retries_without_idempotence" in fired({"delivery.timeout.ms": "15000", "request.timeout.ms": "10000"})
    assert "retries_without_idempotence" not in fired({"delivery.timeout.ms": "5000", "request.timeout.ms": "10000"})
    assert "retries_without_idempotence" not in fired({"message.timeout.ms": "30000"}), "librdkafka's name, 30 s"
