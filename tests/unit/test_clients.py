"""The producer clients' registry (clients/): each registered ClientSpec holds together, so that a
new client is its module and one line. Its tuning passes its own allowlist, its size key is one of
its settings, its record formats are the generator's, and its runtime is a producer client that
checks a preset's settings on its own."""

import pytest

from delivery_semantics import catalog, client_settings, clients
from delivery_semantics.records.layouts import RECORD_FORMATS
from delivery_semantics.workload.client import ProducerClient, runtime

SPECS = list(clients.REGISTRY.values())


def test_the_catalog_forms_and_allowlists_list_the_registry():
    assert tuple(clients.REGISTRY) == catalog.CLIENTS
    assert catalog.CLIENTS[0] == catalog.DEFAULT_CLIENT
    assert set(client_settings.POLICIES) == set(clients.REGISTRY)
    assert set(catalog.CLIENT_DEFAULTS) == set(clients.REGISTRY)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_a_client_spec_holds_together(spec):
    assert spec.policy.client == spec.name
    for key, value in spec.tuning.items():
        assert client_settings.file_setting(spec.name, key, value) == (key, value)
    assert spec.size_key in spec.policy.settings
    assert "text" in spec.record_formats and set(spec.record_formats) <= set(RECORD_FORMATS)
    assert {"acks", "enable.idempotence", "retries", "max.in.flight.requests.per.connection"} <= set(spec.defaults)
    assert issubclass(runtime(spec.name), ProducerClient)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.name != "java"], ids=lambda s: s.name)
def test_a_client_checks_every_preset_on_its_own(spec):
    """Java's check starts a JVM: the integration suite checks it (test_java_client.py)."""
    for mode in (m for m in catalog.MODES.values() if spec.name in m.clients):
        effective = runtime(spec.name).check(mode.producer_settings(spec.name), mode)
        assert effective["acks"] == {"-1": "all"}.get(mode.semantics["acks"], mode.semantics["acks"])


def test_an_unknown_client_is_one_line():
    with pytest.raises(catalog.ModeError, match="unknown client 'nosuch': choose one of librdkafka, java"):
        clients.spec("nosuch")
