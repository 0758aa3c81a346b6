"""Every key known (issue 70): `predict --set` refuses a key its client, or Kafka's topics or
brokers, does not know, in one line with the nearest known one, and known_keys.json is what the
pinned librdkafka and Kafka say (local/known_keys/generate makes it again)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

from delivery_semantics import catalog
from delivery_semantics.clients import known_keys
from delivery_semantics.entry import cli

sys.path.insert(0, str(REPO / "local" / "known_keys"))
import librdkafka_keys


def test_the_keys_are_the_pinned_librdkafkas_and_kafkas():
    assert known_keys.versions() == {
        "kafka": re.search(r"<kafka.version>(.+)</kafka.version>", (REPO / "local/maven/kafka/pom.xml").read_text())[1],
        "librdkafka": librdkafka_keys.version(),
    }, "a pin moved: run local/known_keys/generate"
    data = json.loads((REPO / "plugins/delivery_semantics/clients/known_keys.json").read_text())
    assert data["librdkafka_keys"] == librdkafka_keys.keys()
    assert data["librdkafka_aliases"] == librdkafka_keys.aliases()
    java = json.loads(
        subprocess.run(
            ["java", "-cp", str(REPO / ".cache/kafka/lib/*"), str(REPO / "local/known_keys/KafkaKeys.java")],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
    )
    assert data["java_keys"] == {"producer": java["producer"], "consumer": java["consumer"]}
    assert data["java_types"] == {"producer": java["producer_types"], "consumer": java["consumer_types"]}
    assert (data["topic"], data["broker"]) == (java["topic"], java["broker"])
    plugins = ":".join(str(REPO / ".cache/connect/plugins" / p / "*") for p in ("debezium-jdbc", "debezium-postgres"))
    program = [
        "java",
        "-cp",
        f"{REPO / '.cache/kafka/lib/*'}:{plugins}",
        str(REPO / "local/known_keys/ConnectKeys.java"),
    ]
    connect = json.loads(
        subprocess.run(
            [*program, catalog.SOURCE_CONNECTOR, catalog.SINK_CONNECTOR],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
    )
    assert data["connect"] == connect


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--set", "producer.ack=1"],
            "--set producer.ack is not a librdkafka producer setting; did you mean producer.acks?",
        ),
        (
            ["--client", "java", "--set", "producer.queue.buffering.max.ms=5"],
            "--set producer.queue.buffering.max.ms is not a java producer setting",
        ),
        (
            ["--set", "topic.min.insync.replica=1"],
            "--set topic.min.insync.replica is not a Kafka topic setting; did you mean topic.min.insync.replicas?",
        ),
        (
            ["--set", "broker.unclean.leader.election=true"],
            "--set broker.unclean.leader.election is not a Kafka broker setting; did you mean "
            "broker.unclean.leader.election.enable?",
        ),
        (["--set", "consumer.enable.auto.comit=true"], "did you mean consumer.enable.auto.commit?"),
        (["--set", "consumer.app.comit=before_process"], "did you mean consumer.app.commit?"),
        (
            ["--set", "cluster.eligible.leader.replica.version=1"],
            "--set cluster.eligible.leader.replica.version is not a Kafka feature; did you mean "
            "cluster.eligible.leader.replicas.version?",
        ),
    ],
)
def test_an_unknown_key_is_refused_with_the_nearest_known_one(argv, message, capsys):
    assert cli.main(["predict", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("predict: ") and message in err and err.count("\n") == 1, err


SINK = "io.debezium.connector.jdbc.JdbcSinkConnector"


@pytest.mark.parametrize(
    "argv",
    [
        ["--set", "producer.acks=1"],
        ["--set", "producer.request.required.acks=1"],  # librdkafka's alias
        ["--client", "java", "--set", "producer.max.block.ms=1000"],
        ["--set", "topic.min.insync.replicas=1"],
        ["--set", "broker.log.retention.hours=1"],
        ["--set", "consumer.app.commit=before_process", "--set", "consumer.enable.auto.commit=false"],
        # a connector's keys are its plugin's: not one list
        ["--set", f"connector.connector.class={SINK}", "--set", "connector.insert.mode=upsert"],
        ["--set", "cluster.eligible.leader.replicas.version=1"],
    ],
)
def test_a_known_key_is_read(argv, capsys):
    assert cli.main(["predict", *argv]) in (0, 1), capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "producer.acks=al"], 'librdkafka refuses it: Invalid value for configuration property "request.'),
        (["--set", "producer.enable.idempotence=yes"], "librdkafka refuses it: Expected bool value"),
        (["--set", "producer.retries=-1"], "outside allowed range 0..2147483647"),
        (["--set", "consumer.max.poll.interval.ms=0"], "outside allowed range 1..86400000"),
        (["--set", "consumer.isolation.level=read_commited"], 'Invalid value "read_commited"'),
        (["--client", "java", "--set", "producer.acks=ALL"], "java refuses it: String must be one of: all, -1, 0, 1"),
        (["--client", "java", "--set", "producer.enable.idempotence=yes"], "true or false"),
        (["--client", "java", "--set", "producer.max.in.flight.requests.per.connection=0"], "Value must be in [1,...]"),
        (["--client", "java", "--set", "consumer.max.poll.interval.ms=5m"], "a 32-bit integer"),
    ],
)
def test_a_value_its_client_would_refuse_is_refused_in_the_clients_words(argv, message, capsys):
    assert cli.main(["predict", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("predict: --set ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv, rule, read",
    [
        # librdkafka's aliases set the same property: the rules read it under the Java client's name.
        (["--set", "producer.request.required.acks=1"], "acks_one", {"producer.acks": "1"}),
        (["--set", "producer.message.timeout.ms=5000"], "delivery_timeout_shorter_than_failover", None),
        (["--set", "producer.message.send.max.retries=0"], "retries_zero", {"producer.retries": "0"}),
        (
            ["--set", "consumer.auto.offset.reset=end"],
            "auto_offset_reset_latest",
            {"consumer.auto.offset.reset": "latest"},
        ),
        (["--set", "producer.enable.idempotence=TRUE"], "idempotence_across_restarts", None),
        (["--client", "java", "--set", "producer.acks= 1 "], "acks_one", {"producer.acks": "1"}),
    ],
)
def test_an_alias_or_a_spelling_the_client_takes_is_read_as_the_client_reads_it(argv, rule, read, capsys):
    assert cli.main(["predict", "--json", *argv]) in (0, 1)
    found = {r["rule"]: r["settings"] for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rule in found, found
    if read:
        assert read.items() <= found[rule].items(), found[rule]


def test_a_key_no_rule_reads_never_reaches_librdkafka(monkeypatch):
    """Only the keys the rules read are handed to librdkafka's parser: a key that loads a library
    when set (plugin.library.paths) is taken as given, never set anywhere."""
    from delivery_semantics.clients import librdkafka_conf

    def refuse(*_):
        raise AssertionError("reached librdkafka")

    monkeypatch.setattr(librdkafka_conf, "parse", refuse)
    read = frozenset({"producer.acks"})
    assert known_keys.setting("producer", "plugin.library.paths", "/tmp/x.so", "librdkafka", read) == (
        "plugin.library.paths",
        "/tmp/x.so",
    )


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"connector.class": catalog.SINK_CONNECTOR, "insert.mod": "upsert"},
            "connector.insert.mod is not a setting of Kafka Connect's sinks or of JdbcSinkConnector; "
            "did you mean connector.insert.mode?",
        ),
        (
            {"connector.class": catalog.SOURCE_CONNECTOR, "errors.tolerence": "all"},
            "did you mean connector.errors.tolerance?",
        ),
        # A sink's dead-letter queue is no source's setting.
        (
            {"connector.class": catalog.SOURCE_CONNECTOR, "errors.deadletterqueue.topic.name": "dlq"},
            "Connect's sources",
        ),
    ],
)
def test_a_connector_key_neither_connect_nor_its_plugin_knows_is_refused(settings, message):
    assert message in known_keys.connector_refusal(settings)


@pytest.mark.parametrize(
    "settings",
    [
        {
            "connector.class": catalog.SINK_CONNECTOR,
            "insert.mode": "upsert",
            "primary.key.mode": "kafka",
            "errors.deadletterqueue.topic.name": "dlq",
            "consumer.override.isolation.level": "read_committed",
            "hibernate.c3p0.max_size": "5",
        },
        # The worker's setting, given beside the connector's (as a pipeline's are).
        {"connector.class": catalog.SOURCE_CONNECTOR, "exactly.once.source.support": "enabled", "slot.name": "s"},
        # A plugin whose keys are not listed here: its keys are its own.
        {"connector.class": "com.example.OrdersSink", "orders.batch": "10"},
    ],
)
def test_connect_and_its_plugins_keys_are_taken(settings):
    assert known_keys.connector_refusal(settings) is None
