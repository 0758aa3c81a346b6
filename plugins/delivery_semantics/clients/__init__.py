"""The producer clients a load drives, one registered `ClientSpec` each (clients/base.py). A new
client is its module and one line in REGISTRY: the forms, the allowlists, the presets' tuning, the
rules' defaults and the load all read it from here."""

from __future__ import annotations

from delivery_semantics.clients import java, librdkafka
from delivery_semantics.clients.base import FILE, FORM, ClientPolicy, ClientSpec, Setting
from delivery_semantics.errors import ModeError

REGISTRY: dict[str, ClientSpec] = {
    spec.name: spec
    for spec in (
        librdkafka.SPEC,  # the first is the default client
        java.SPEC,
    )
}
DEFAULT = next(iter(REGISTRY))


def spec(name: str) -> ClientSpec:
    if name not in REGISTRY:
        raise ModeError(f"unknown client {name!r}: choose one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


__all__ = ["DEFAULT", "FILE", "FORM", "REGISTRY", "ClientPolicy", "ClientSpec", "Setting", "spec"]
