"""A run's producer settings: its mode's (a preset's semantics with the client's tuning, or a mode
file's own), then the run's overrides (the forms' `producer_settings`, the CLI's `--set`), in the
client's own key names. Checked before anything runs: first through the client's allowlist
(client_settings: typed, bounded, nothing that loads code or touches the connection), then by the
client itself (its runtime's `check`: librdkafka's configuration check in this process, the Java
client's ProducerConfig in a JVM). Anything refused is one line (ModeError). A
setting that contradicts the mode's promise is not refused: it is a finding, recorded with the run,
and the verdict names it when the guarantee it contradicts is broken."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from delivery_semantics import catalog, client_settings, clients
from delivery_semantics.workload.client import runtime


@dataclass(frozen=True)
class Resolved:
    client: str
    conf: dict[str, str]  # what the client is given, besides the connection and transactional.id
    overrides: dict[str, str]  # what the run asked for over its mode
    effective: dict[str, str]  # the values findings read, the client's defaults filled in
    findings: list[catalog.Finding]

    @property
    def finding_rows(self) -> list[dict]:
        return [{"guarantee": f.guarantee, "setting": f.setting, "why": f.why} for f in self.findings]


def overrides_of(client: str, overrides: Mapping | None) -> dict[str, str]:
    """The run's overrides (a form's producer_settings, the CLI's --set) through the client's
    allowlist of tuning settings, under canonical key names (client_settings)."""
    return client_settings.checked(client, overrides, client_settings.FORM)


def resolve(mode: catalog.DeliveryMode, client: str | None = None, overrides: Mapping | None = None) -> Resolved:
    client = catalog.get_client(client, mode)
    asked = overrides_of(client, overrides)
    conf = {**mode.producer_settings(client), **asked}
    clients.spec(client).check_bounds(conf)
    effective = runtime(client).check(conf, mode)
    if "acks" in conf:
        conf["acks"] = effective.get("acks", conf["acks"])
    return Resolved(client, conf, asked, effective, catalog.contradictions(mode.promise, effective, mode.transactional))
