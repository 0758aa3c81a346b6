"""A run's producer settings: its mode's (a preset's semantics with the client's tuning, or a mode
file's own), then the run's overrides (the forms' `producer_settings`, the CLI's `--set`), in the
client's own key names. Checked before anything runs: first through the client's allowlist
(client_settings: typed, bounded, nothing that loads code or touches the connection), then by the
client itself: librdkafka's configuration check in this process, or the Java client's
ProducerConfig in a JVM. Anything refused is one line (ModeError). A
setting that contradicts the mode's promise is not refused: it is a finding, recorded with the run,
and the verdict names it when the guarantee it contradicts is broken."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from delivery_semantics import catalog, client_settings
from delivery_semantics.catalog import ModeError


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
    if client == catalog.LIBRDKAFKA:
        effective = _librdkafka_check(conf, mode)
        if "acks" in conf:
            conf["acks"] = effective["acks"]
    else:
        from delivery_semantics.workload import java_client

        effective = java_client.check(conf, mode.transactional)
    return Resolved(client, conf, asked, effective, catalog.contradictions(mode.promise, effective, mode.transactional))


def _bool(key: str, v) -> bool:
    s = str(v).strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    raise ModeError(f"{key}={v!r} is not a boolean (true/false)")


def _int(key: str, v) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        raise ModeError(f"{key}={v!r} is not an integer") from None


def _librdkafka_check(conf: dict[str, str], mode: catalog.DeliveryMode) -> dict[str, str]:
    """librdkafka's own check (it refuses unknown keys and bad values; no connection is opened),
    after the rules it applies only once connected, said in one line. Returns the effective values."""
    from confluent_kafka import KafkaException, Producer

    eff = {**catalog.CLIENT_DEFAULTS[catalog.LIBRDKAFKA], **conf}
    eff["acks"] = {"-1": "all"}.get(str(eff["acks"]).strip().lower(), str(eff["acks"]).strip().lower())
    if eff["acks"] not in ("0", "1", "all"):
        raise ModeError(f"acks={eff['acks']!r} must be 0, 1 or all")
    idempotent = _bool("enable.idempotence", eff["enable.idempotence"])
    retries = _int("retries", eff["retries"])
    in_flight = _int("max.in.flight.requests.per.connection", eff["max.in.flight.requests.per.connection"])
    for key in ("message.timeout.ms", "request.timeout.ms", "linger.ms"):
        if key in eff and _int(key, eff[key]) < 0:
            raise ModeError(f"{key} must be >= 0")
    if retries < 0 or in_flight < 1:
        raise ModeError("retries must be >= 0 and max.in.flight.requests.per.connection >= 1")
    if idempotent:
        if eff["acks"] != "all":
            raise ModeError(
                f"enable.idempotence=true needs acks=all, got acks={eff['acks']}: "
                "the broker can only de-duplicate what all in-sync replicas acknowledged"
            )
        if in_flight > 5:
            raise ModeError(
                f"enable.idempotence=true needs max.in.flight.requests.per.connection <= 5, got {in_flight}"
            )
        if retries == 0:
            raise ModeError("enable.idempotence=true needs retries > 0: idempotence exists to make retries safe")
    if mode.transactional and not idempotent:
        raise ModeError("a transactional producer needs enable.idempotence=true (transactions are built on it)")
    probe = {**conf, "bootstrap.servers": "127.0.0.1:1", "log_level": 0, "error_cb": lambda _e: None}
    try:
        Producer({**probe, "transactional.id": "validate"} if mode.transactional else probe)
    except KafkaException as e:
        raise ModeError(f"librdkafka refused the producer settings: {e.args[0].str()}") from None
    except (TypeError, ValueError) as e:
        raise ModeError(f"librdkafka refused the producer settings: {e}") from None
    return eff
