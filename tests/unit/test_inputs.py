"""Bad input is refused before any side effect: producer settings, load specs, mappings, and the
CLI's one-line errors with exit 2. None of this needs a running service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from delivery_semantics import catalog, load
from delivery_semantics.client import producer_config


@pytest.mark.parametrize(
    ("mode", "overrides", "message"),
    [
        ("idempotent", {"acks": "1"}, "enable.idempotence=true needs acks=all"),
        ("idempotent", {"max.in.flight": "6"}, "max.in.flight.requests.per.connection <= 5"),
        ("at_most_once", {"retries": "3"}, "at_most_once means acks=0 and retries=0"),
        ("transactional", {"enable.idempotence": "false"}, "transactional mode needs enable.idempotence=true"),
        ("at_least_once", {"bootstrap.servers": "x:1"}, "cannot be overridden"),
        ("at_least_once", {"linger.ms": "-1"}, "linger.ms must be >= 0"),
        ("at_least_once", {"acks": "2"}, "must be 0, 1 or all"),
    ],
)
def test_contradictory_producer_settings_are_refused(mode, overrides, message):
    with pytest.raises(catalog.ModeError, match=message):
        producer_config(mode, overrides)


def test_a_mode_preset_sets_every_key_it_depends_on():
    conf = producer_config("at_least_once", {"request.required.acks": "-1", "compression.codec": "lz4"})
    assert (conf["acks"], conf["compression.type"], conf["enable.idempotence"]) == ("all", "lz4", "false")
    assert producer_config("transactional")["transaction.timeout.ms"] == "60000"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "nope", "messages": 10}, "unknown mode 'nope'"),
        ({"mode": "idempotent", "messages": -1}, "messages must be a positive integer"),
        ({"mode": "idempotent", "messages": 10, "abort_ratio": 0.5}, "abort_ratio needs the transactional mode"),
        ({"mode": "idempotent", "messages": 10, "topic": "bad topic!"}, "topic"),
        ({"mode": "idempotent", "messages": 10, "payload_bytes": 2_000_000}, "does not fit message.max.bytes"),
        ({"mode": "idempotent", "messages": 10, "overrides": {"no.such.key": "1"}}, "librdkafka refused"),
    ],
)
def test_a_load_spec_is_checked_before_anything_is_sent(spec, message):
    with pytest.raises(load.LoadError, match=message):
        load.validate(load.LoadSpec(**spec))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env["PYTHONPATH"] = str(REPO / "plugins")
    return subprocess.run(
        [sys.executable, "-m", "delivery_semantics.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


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
        (["consumer_workload", "run", "--strategy", "yolo", "--source-run", "r1"], "unknown consumer strategy 'yolo'"),
        (
            ["consumer_workload", "run", "--strategy", "process_then_commit", "--source-run", "r1", "--crashes", "0"],
            "crashes must be an integer in [1, 5]",
        ),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(args, message):
    res = _cli(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_mapping_is_validated_before_spark_reads_anything(tmp_path):
    from checker.sources import InputError, mapping_source

    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            {
                "reconciliation_id": "x",
                "topic": "t",
                "event_id": {"header": "id"},
                "ledger": {"table": "outbox", "columns": {"event_id": "id"}},
            }
        )
    )
    src = mapping_source(str(path), "k:9092")
    assert (src.topic, src.ledger["kind"], src.bootstrap_servers) == ("t", "mapped", "k:9092")
    with pytest.raises(InputError, match="no bootstrap servers"):
        mapping_source(str(path), None)
    path.write_text(
        json.dumps(
            {
                "reconciliation_id": "x",
                "topic": "t",
                "event_id": {"header": "id"},
                "ledger": {"table": "outbox", "columns": {}},
            }
        )
    )
    with pytest.raises(InputError, match=r"columns\.event_id"):
        mapping_source(str(path), "k:9092")
    path.write_text("{")
    with pytest.raises(InputError, match=r"m\.json"):
        mapping_source(str(path), "k:9092")
