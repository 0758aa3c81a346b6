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
    assert (data["topic"], data["broker"]) == (java["topic"], java["broker"])


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
    ],
)
def test_an_unknown_key_is_refused_with_the_nearest_known_one(argv, message, capsys):
    assert cli.main(["predict", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("predict: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv",
    [
        ["--set", "producer.acks=1"],
        ["--set", "producer.request.required.acks=1"],  # librdkafka's alias
        ["--client", "java", "--set", "producer.max.block.ms=1000"],
        ["--set", "topic.min.insync.replicas=1"],
        ["--set", "broker.log.retention.hours=1"],
        ["--set", "consumer.app.commit=before_process", "--set", "consumer.enable.auto.commit=false"],
        ["--set", "connector.insert.mode=upsert"],  # a connector's keys are its plugin's: not one list
    ],
)
def test_a_known_key_is_read(argv, capsys):
    assert cli.main(["predict", *argv]) in (0, 1), capsys.readouterr().err
