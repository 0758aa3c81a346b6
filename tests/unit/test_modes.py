"""Modes as files and the producer's settings: a mode file is validated field by field, each
client checks its own settings (librdkafka in process, the Java client's ProducerConfig in a JVM),
owned settings are refused, and a setting that contradicts the declared promise is a finding."""

from __future__ import annotations

import json
import re

import pytest
from conftest import REPO

from delivery_semantics import catalog, forms, locations, mode_files, modes
from delivery_semantics.workload import load, settings

GOOD = {
    "client": "java",
    "settings": {"acks": "all", "enable.idempotence": True, "linger.ms": 20},
    "promise": "no_duplicates_within_session",
    "scenarios": ["lost_ack", "leader_kill"],
}


def write(tmp_path, name: str, spec) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(json.dumps(spec))  # JSON is YAML
    return str(p)


def test_the_shipped_mode_files_load_and_name_their_client_and_promise():
    found = mode_files.discover(REPO / "modes")
    assert found and all(isinstance(f, mode_files.ModeFile) for _, f in found), found
    for _, f in found:
        assert f.mode.client in catalog.CLIENTS and f.mode.promise.name in catalog.PROMISES


def test_the_schema_offers_what_the_catalog_has():
    schema = json.loads(locations.package_text(*mode_files.SCHEMA_FILE))["properties"]
    assert schema["promise"]["enum"] == list(catalog.PROMISES)
    assert schema["client"]["enum"] == list(catalog.CLIENTS)


def test_a_mode_file_becomes_a_mode_of_its_client(tmp_path):
    f = mode_files.load(write(tmp_path, "orders", GOOD))
    assert (f.name, f.mode.client, f.mode.clients, f.mode.isolation) == (
        "orders",
        "java",
        ("java",),
        "read_uncommitted",
    )
    assert f.mode.producer_settings() == {"acks": "all", "enable.idempotence": "true", "linger.ms": "20"}
    assert f.scenarios == ["lost_ack", "leader_kill"] and f.dag_id == "semantics_mode_orders"
    with pytest.raises(catalog.ModeError, match="declared for the java client; it cannot run on librdkafka"):
        catalog.get_client("librdkafka", f.mode)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client": "go"}, "client: 'go' is not one of ['librdkafka', 'java']"),
        ({"promise": "never_wrong"}, "promise: 'never_wrong' is not one of"),
        ({"colour": "red"}, "unknown field 'colour'"),
        (
            {"settings": {"transactional.id": "mine"}},
            "settings.transactional.id: transactional.id cannot be set by a mode or a run: the platform",
        ),
        (
            {"settings": {"value.serializer": "x"}},
            "settings.value.serializer: value.serializer cannot be set by a mode or a run: the platform",
        ),
        (
            {"settings": {"ssl.truststore.location": "/x"}},
            "cannot be set by a mode or a run: the Kafka connection sets it",
        ),
        ({"settings": {"acks": [1]}}, "settings.acks: [1] is not of type"),
        ({"promise": "exactly_once"}, "promise: exactly_once is kept by transactions: add transactional: true"),
        ({"scenarios": ["txn_abort"]}, "scenarios: txn_abort needs the transactional mode"),
        ({"scenarios": ["consumer_crash"]}, "scenarios: 'consumer_crash' is not a producer scenario"),
        ({"load": {"messages": 0}}, "load.messages: 0 is less than the minimum of 1"),
    ],
)
def test_a_bad_mode_file_is_refused_naming_the_file_and_field(tmp_path, change, message):
    path = write(tmp_path, "orders", {**GOOD, **change})
    with pytest.raises(mode_files.ModeFileError) as e:
        mode_files.load(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value), str(e.value)


def test_a_mode_file_cannot_take_a_presets_name(tmp_path):
    with pytest.raises(mode_files.ModeFileError, match="'idempotent' is a built-in mode"):
        mode_files.load(write(tmp_path, "idempotent", GOOD))


@pytest.mark.parametrize("client", catalog.CLIENTS)
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no.such.setting": "1"}, "no.such.setting is not a setting a form or --set may give the"),
        ({"acks": "2"}, "acks"),
        ({"enable.idempotence": "true", "acks": "1"}, "acks"),
        ({"transactional.id": "mine"}, "transactional.id cannot be set by a mode or a run: the platform sets it"),
        ({"sasl.password": "x"}, "sasl.password cannot be set by a mode or a run: the Kafka connection sets it"),
    ],
)
def test_each_client_checks_its_own_settings(client, overrides, message):
    with pytest.raises(catalog.ModeError, match=re.escape(message)):
        settings.resolve(modes.get_mode("idempotent"), client, overrides)


def test_each_clients_allowlist_is_its_own():
    with pytest.raises(catalog.ModeError, match=re.escape("queue.buffering.max.messages is not a setting a form")):
        settings.resolve(modes.get_mode("at_least_once"), "java", {"queue.buffering.max.messages": "5"})
    with pytest.raises(
        catalog.ModeError, match=re.escape("key.serializer is not a setting a form or --set may give the librdkafka")
    ):
        settings.resolve(modes.get_mode("at_least_once"), "librdkafka", {"key.serializer": "x"})
    with pytest.raises(catalog.ModeError, match=re.escape("key.serializer cannot be set by a mode or a run")):
        settings.resolve(modes.get_mode("at_least_once"), "java", {"key.serializer": "x"})


def test_presets_run_on_both_clients_with_the_same_semantics_and_no_finding():
    for mode in catalog.MODES.values():
        by_client = {c: settings.resolve(mode, c) for c in catalog.CLIENTS}
        for key in ("acks", "enable.idempotence", "retries"):
            assert len({r.effective[key] for r in by_client.values()}) == 1, (mode.name, key)
        assert all(r.findings == [] for r in by_client.values()), mode.name


def test_java_defaults_are_the_java_clients_own():
    """A Java mode file with acks=1 alone: the client turns idempotence off itself (Java's default
    is on), and both contradictions of the promise are findings."""
    mode = catalog.DeliveryMode(
        "team",
        "t",
        {"acks": "1"},
        catalog.READ_UNCOMMITTED,
        catalog.PROMISES["no_duplicates_within_session"],
        client="java",
    )
    r = settings.resolve(mode)
    assert (r.effective["acks"], r.effective["enable.idempotence"]) == ("1", "false")
    assert [f.setting for f in r.findings] == ["acks=1", "enable.idempotence=false"]
    assert catalog.broken_settings(r.finding_rows, ["lost_acked"]) == ["acks=1"]
    assert catalog.broken_settings(r.finding_rows, ["duplicate"]) == ["enable.idempotence=false"]
    assert catalog.broken_settings(r.finding_rows, ["aborted_visible"]) == []


def test_validate_refuses_before_anything_runs():
    with pytest.raises(load.LoadError, match="unknown client 'go'"):
        load.validate(load.LoadSpec(mode="idempotent", messages=10, client="go"))


def test_the_matrix_runs_a_mode_file_on_its_own_client_beside_the_presets_on_each(tmp_path, monkeypatch):
    from delivery_semantics import matrix

    monkeypatch.setenv("SEMANTICS_MODES_DIR", str(tmp_path))
    write(tmp_path, "orders", GOOD)
    confs = matrix.matrix_confs(
        {
            "messages": 100,
            "seed": 0,
            "modes": ["idempotent", "orders"],
            "scenarios": ["lost_ack"],
            "clients": ["librdkafka", "java"],
            "consumer_strategies": [],
        }
    )
    assert [(c["mode"], c["client"]) for c in confs] == [
        ("idempotent", "librdkafka"),
        ("idempotent", "java"),
        ("orders", "java"),
    ]
    assert "orders" in forms.matrix_form()["modes"]["items"]["enum"]
    assert forms.matrix_form()["modes"]["default"] == list(catalog.MODES)


def test_a_run_request_reads_its_mode_file_and_checks_its_pair_once(tmp_path, monkeypatch):
    from delivery_semantics.entry import orchestration

    monkeypatch.setenv("SEMANTICS_MODES_DIR", str(tmp_path))
    spec = {
        "client": "librdkafka",
        "settings": {"acks": "all"},
        "promise": "no_acked_loss",
        "connection": "kafka_orders",
    }
    write(tmp_path, "orders", spec)
    calls = {"check_pair": 0, "load": 0}

    def counted(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    counted(modes, "check_pair")
    counted(mode_files, "load")
    params, request = orchestration._request({"mode": "orders", "scenario": "lost_ack", "messages": 100})
    assert calls == {"check_pair": 1, "load": 1}
    assert (params["connection"], params["client"], request.mode.name) == ("kafka_orders", "librdkafka", "orders")
    # The request passes on as it is: the run it begins checks neither again.
    from delivery_semantics.workload import scenarios

    assert scenarios.validate(request, "lost_ack")[0] is request
    assert calls == {"check_pair": 1, "load": 1}
