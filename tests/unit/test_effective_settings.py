"""`predict` on the configurations a Kafka expert points at: each finding computed from the
effective values (a topic's key not set on it is its broker's; a broker's session timeout sets the
failover; the client decides what auto-commit does), each value read naming where it came from,
and the ApiVersions exchange that reads a cluster's feature levels, on planted bytes."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest

from delivery_semantics import budgets, rule_catalog
from delivery_semantics.entry import cli
from delivery_semantics.plumbing import kafka_features

SOURCE = "io.debezium.connector.postgresql.PostgresConnector"
SINK = "io.debezium.connector.jdbc.JdbcSinkConnector"


def found(given: dict, client: str = "librdkafka", sources: dict | None = None) -> dict[str, rule_catalog.Prediction]:
    return {p.rule.name: p for p in rule_catalog.predict(given, client, sources)}


def test_a_topic_without_its_own_min_insync_replicas_takes_its_brokers():
    acks_all = {"acks": "all"}
    assert "min_insync_one" not in found({"producer": acks_all, "topic": {}, "broker": {"min.insync.replicas": "2"}})
    p = found({"producer": acks_all, "topic": {}, "broker": {"min.insync.replicas": "1"}})["min_insync_one"]
    assert p.settings["topic.min.insync.replicas"] == "1" and p.sources["topic.min.insync.replicas"] == "set"
    # The topic's own setting wins over its broker's.
    given = {"producer": acks_all, "topic": {"min.insync.replicas": "1"}, "broker": {"min.insync.replicas": "2"}}
    assert "min_insync_one" in found(given)


def test_each_value_read_says_where_it_came_from():
    sources = {"broker.min.insync.replicas": "broker default, dynamic", "topic.retention.ms": "topic"}
    given = {"producer": {"acks": "all"}, "topic": {}, "broker": {"min.insync.replicas": "1"}}
    p = found(given, sources=sources)["min_insync_one"]
    assert p.sources == {
        "topic.min.insync.replicas": "broker default, dynamic",  # not set on the topic: its broker's
        "broker.min.insync.replicas": "broker default, dynamic",
        "producer.acks": "set",
    }
    assert "producer.acks=all (set)" in p.line() and "(broker default, dynamic)" in p.line()
    # A key the user did not give is its client's default, by client.
    p = found({"producer": {"enable.idempotence": "false"}})["in_flight_without_idempotence"]
    assert p.sources["producer.max.in.flight.requests.per.connection"] == "librdkafka default"
    p = found({"producer": {"enable.idempotence": "false"}}, "java")["in_flight_without_idempotence"]
    assert p.sources["producer.max.in.flight.requests.per.connection"] == "java default"


@pytest.mark.parametrize(
    "timeout, session, flagged",
    [("20000", "6000", False), ("20000", "30000", True), ("10000", None, True), ("15000", None, False)],
)
def test_the_delivery_timeout_is_compared_with_the_brokers_session_timeout(timeout, session, flagged):
    given: dict = {"producer": {"delivery.timeout.ms": timeout}}
    if session:
        given["broker"] = {"broker.session.timeout.ms": session}
    got = found(given).get("delivery_timeout_shorter_than_failover")
    assert (got is not None) is flagged
    if got and session:
        assert got.settings["broker.broker.session.timeout.ms"] == session
    assert "partitioned_leader" in rule_catalog.RULES_BY_NAME["delivery_timeout_shorter_than_failover"].scenarios


def test_retries_zero_loses_sends_refused_as_a_leader_moves():
    p = found({"producer": {"acks": "all", "retries": "0"}})["retries_zero"]
    assert (p.rule.kind, p.rule.guarantee) == ("lost_unacked", "delivery") and "leader_kill" in p.rule.scenarios
    assert "retries_zero" not in found({"producer": {"acks": "0", "retries": "0"}}), "acks=0's own finding says it"


def test_acks_zero_names_every_fault_that_moves_a_leader():
    assert set(rule_catalog.RULES_BY_NAME["acks_zero"].scenarios) >= {
        "leader_kill",
        "partitioned_leader",
        "isolated_leader",
        "rolling_restart",
    }


def test_a_connector_is_a_source_or_a_sink_never_assumed():
    with pytest.raises(rule_catalog.RuleError, match=r"connector\.class is needed"):
        rule_catalog.predict({"connector": {"errors.tolerance": "all"}})
    # A dead-letter queue is a sink's: a source that tolerates errors loses them all the same.
    dlq = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}
    assert "errors_tolerated_without_a_dead_letter_queue" in found({"connector": {"connector.class": SOURCE, **dlq}})
    assert "errors_tolerated_without_a_dead_letter_queue" not in found({"connector": {"connector.class": SINK, **dlq}})
    # Exactly-once source support (a worker's setting, given with the connector's) only for sources.
    assert "source_without_exactly_once" not in found({"connector": {"connector.class": SINK}})


def test_a_jdbc_sinks_primary_key_decides_what_a_redelivery_does():
    def sink(**kw) -> dict:
        return {"connector": {"connector.class": SINK, **kw}}

    assert "jdbc_sink_insert" in found(sink(**{"insert.mode": "insert", "primary.key.mode": "none"}))
    assert "jdbc_sink_insert" in found(sink(**{"insert.mode": "insert", "pk.mode": "kafka"}))  # Confluent's key
    # Keyed by the record: a redelivered row fails the task on its key, it is not written twice.
    assert "jdbc_sink_insert" not in found(sink(**{"insert.mode": "insert", "primary.key.mode": "record_key"}))
    # Upsert by Kafka coordinates: a source's second copy has its own offset, so its own row.
    keyed = found(sink(**{"insert.mode": "upsert", "primary.key.mode": "kafka"}))
    assert keyed["jdbc_sink_keyed_by_kafka_coordinates"].rule.kind == "duplicate"
    assert not found(sink(**{"insert.mode": "upsert", "primary.key.mode": "record_value"}))


def test_retention_by_time_size_and_compaction_each_from_the_topic_or_its_broker():
    hour = 3_600_000
    window = {"app.audit.window.ms": str(2 * hour)}
    # The broker's log.retention.hours when the topic sets no retention.ms.
    p = found({"topic": dict(window), "broker": {"log.retention.hours": "1"}})["retention_shorter_than_the_audit"]
    assert p.settings["broker.log.retention.hours"] == "1"
    assert "retention_shorter_than_the_audit" not in found({"topic": dict(window), "broker": {}}), "168 h by default"
    assert "retention_shorter_than_the_audit" not in found(
        {"topic": {**window, "retention.ms": str(3 * hour)}, "broker": {"log.retention.hours": "1"}}
    ), "the topic's own retention wins"
    assert "retention_shorter_than_the_audit" not in found({"topic": {**window, "retention.ms": "-1"}}), "no time limit"
    assert "retention_by_size" in found({"topic": dict(window), "broker": {"log.retention.bytes": "1000000"}})
    assert "retention_by_size" not in found({"topic": {"retention.bytes": "1000000"}}), "no audit window given"
    assert "compacted_topic" in found({"topic": {}, "broker": {"log.cleanup.policy": "compact"}})
    assert "compacted_topic" in found({"topic": {"cleanup.policy": "compact,delete"}})
    assert "compacted_topic" not in found(
        {"topic": {"cleanup.policy": "delete"}, "broker": {"log.cleanup.policy": "compact"}}
    )


@pytest.mark.parametrize(
    "consumer, client, loses",
    [
        ({"enable.auto.commit": "true"}, "librdkafka", True),
        ({"enable.auto.commit": "true", "enable.auto.offset.store": "false"}, "librdkafka", False),
        ({"enable.auto.commit": "true"}, "java", False),  # committed in poll(): what the previous poll returned
        ({"enable.auto.commit": "false"}, "librdkafka", False),
    ],
)
def test_auto_commit_loses_only_where_the_client_commits_what_was_not_processed(consumer, client, loses):
    assert ("auto_commit" in found({"consumer": consumer}, client)) is loses


def test_a_new_group_at_latest_loses_the_earlier_records_with_no_fault():
    assert rule_catalog.RULES_BY_NAME["auto_offset_reset_latest"].scenarios[0] == "none"


def test_a_continuous_audits_window_is_its_schedules_longest_interval():
    assert budgets.longest_interval("@hourly") == timedelta(hours=1)
    assert budgets.longest_interval("@monthly") == timedelta(days=31)
    assert budgets.longest_interval("0 */6 * * *") == timedelta(hours=6)
    assert budgets.longest_interval("0 9 * * 1-5") == timedelta(days=3)  # Friday to Monday
    assert budgets.longest_interval(None) is None


def test_predict_refuses_a_topic_without_a_connection(capsys):
    assert cli.main(["predict", "--topic", "orders", "--set", "producer.acks=1"]) == 2
    assert "give --kafka CONN_ID" in capsys.readouterr().err


def _response(features: dict[str, int], correlation_id: int = 1, error: int = 0) -> bytes:
    """An ApiVersions v3 response body as a broker sends it: two API keys, then the tagged fields
    with the finalized features (tag 2) after the supported ones (tag 0)."""

    def cstr(s: str) -> bytes:
        return bytes([len(s) + 1]) + s.encode()

    body = struct.pack(">ih", correlation_id, error)
    body += bytes([3]) + struct.pack(">hhh", 0, 0, 12) + b"\x00" + struct.pack(">hhh", 18, 0, 4) + b"\x00"
    body += struct.pack(">i", 0)
    supported = bytes([2]) + cstr("metadata.version") + struct.pack(">hh", 1, 27) + b"\x00"
    finalized = bytes([len(features) + 1]) + b"".join(
        cstr(name) + struct.pack(">hh", level, 1) + b"\x00" for name, level in features.items()
    )
    body += bytes([2]) + bytes([0, len(supported)]) + supported + bytes([2, len(finalized)]) + finalized
    return body


def test_the_feature_levels_are_read_from_an_api_versions_v3_response():
    levels = {"metadata.version": 27, "eligible.leader.replicas.version": 1, "transaction.version": 2}
    assert kafka_features.parse(_response(levels)) == levels
    assert kafka_features.parse(_response({})) == {}
    with pytest.raises(kafka_features.FeatureError, match="error code 35"):
        kafka_features.parse(_response({}, error=35))
    with pytest.raises(kafka_features.FeatureError, match="correlation id"):
        kafka_features.parse(_response(levels, correlation_id=7))
    with pytest.raises(kafka_features.FeatureError, match="cut short"):
        kafka_features.parse(_response(levels)[:-3])
    # The request: its size, then ApiVersions (18) v3 with a client id, then the software's name.
    req = kafka_features.request()
    assert struct.unpack(">i", req[:4])[0] == len(req) - 4
    assert struct.unpack(">hhi", req[4:12]) == (18, 3, 1)


def test_a_sasl_listener_is_not_asked_for_its_features():
    assert kafka_features.finalized_features({"security.protocol": "SASL_SSL", "bootstrap.servers": "x:1"}) is None
