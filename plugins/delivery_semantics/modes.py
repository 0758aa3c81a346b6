"""Delivery modes: named presets of librdkafka producer settings, the isolation level their topic
is read with, and the promise the checker holds them to (DESIGN.md §2).

librdkafka's defaults differ from the Java client's (enable.idempotence is false there, acks is
all), so every preset sets each key it depends on explicitly. Overrides use librdkafka's own key
names and are validated before anything is sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

RETRIES_MAX = 2147483647
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

# Keys every preset sets; the rest of librdkafka's keys may still be overridden.
_COMMON = {
    "linger.ms": "5",
    "batch.num.messages": "10000",
    "compression.type": "none",
    "request.timeout.ms": "10000",
    "message.timeout.ms": "60000",
    "retry.backoff.ms": "100",
    "queue.buffering.max.messages": "200000",
}


@dataclass(frozen=True)
class Promise:
    """What the checker holds a mode to."""
    no_duplicates: bool
    no_acked_loss: bool
    text: str


@dataclass(frozen=True)
class DeliveryMode:
    name: str
    producer: MappingProxyType
    isolation: str
    transactional: bool
    resends_unacked: bool
    promise: Promise
    description: str = field(default="")


def _mode(name, settings, isolation, promise, description, transactional=False, resends=True):
    return DeliveryMode(name, MappingProxyType({**_COMMON, **settings}), isolation, transactional, resends,
                        promise, description)


MODES: dict[str, DeliveryMode] = {m.name: m for m in (
    _mode("at_most_once",
          {"acks": "0", "retries": "0", "enable.idempotence": "false",
           "max.in.flight.requests.per.connection": "5"},
          READ_UNCOMMITTED,
          Promise(no_duplicates=True, no_acked_loss=False, text="never a duplicate; loss allowed"),
          "fire and forget: acks=0, no retries; a delivery report only means handed to the socket",
          resends=False),
    _mode("at_least_once",
          {"acks": "1", "retries": str(RETRIES_MAX), "enable.idempotence": "false",
           "max.in.flight.requests.per.connection": "5"},
          READ_UNCOMMITTED,
          Promise(no_duplicates=False, no_acked_loss=True,
                  text="no loss of acked events while the leader survives; duplicates allowed"),
          "leader ack, retries without idempotence: a retried batch whose ack was lost is written twice"),
    _mode("at_least_once_all",
          {"acks": "all", "retries": str(RETRIES_MAX), "enable.idempotence": "false",
           "max.in.flight.requests.per.connection": "5"},
          READ_UNCOMMITTED,
          Promise(no_duplicates=False, no_acked_loss=True,
                  text="no loss of acked events with min.insync.replicas=2 and one broker down; duplicates allowed"),
          "all in-sync replicas ack, retries without idempotence"),
    _mode("idempotent",
          {"acks": "all", "retries": str(RETRIES_MAX), "enable.idempotence": "true",
           "max.in.flight.requests.per.connection": "5"},
          READ_UNCOMMITTED,
          Promise(no_duplicates=True, no_acked_loss=True,
                  text="no duplicates from retries within one producer session (a restart gets a new PID)"),
          "idempotent producer: the broker drops retried batches by producer id and sequence"),
    _mode("transactional",
          {"acks": "all", "retries": str(RETRIES_MAX), "enable.idempotence": "true",
           "max.in.flight.requests.per.connection": "5", "transaction.timeout.ms": "60000"},
          READ_COMMITTED,
          Promise(no_duplicates=True, no_acked_loss=True,
                  text="exactly once for read_committed readers, across restarts that reuse the transactional.id"),
          "transactions with a stable transactional.id per run; aborted batches are resent",
          transactional=True),
)}


class ModeError(ValueError):
    """A mode or an override that cannot be used; the message gives the reason."""


def get_mode(name: str) -> DeliveryMode:
    try:
        return MODES[name]
    except KeyError:
        raise ModeError(f"unknown mode {name!r}: choose one of {', '.join(MODES)}") from None


# librdkafka aliases, so an override under either name is checked against the same rules.
_ALIASES = {
    "request.required.acks": "acks",
    "message.send.max.retries": "retries",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "delivery.timeout.ms": "message.timeout.ms",
    "queue.buffering.max.ms": "linger.ms",
    "compression.codec": "compression.type",
}
# Set by the runner or the connection, never by a mode override.
_RESERVED = {"bootstrap.servers", "transactional.id", "on_delivery", "error_cb", "stats_cb"}


def _norm_acks(v: str) -> str:
    return {"-1": "all", "all": "all"}.get(str(v).strip().lower(), str(v).strip())


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


def effective_producer_config(mode: DeliveryMode | str, overrides: dict | None = None) -> dict[str, str]:
    """The mode's preset merged with overrides, normalised and checked for contradictions."""
    mode = get_mode(mode) if isinstance(mode, str) else mode
    conf = dict(mode.producer)
    for key, value in (overrides or {}).items():
        key = _ALIASES.get(key, key)
        if key in _RESERVED:
            raise ModeError(f"{key} cannot be overridden: the runner sets it from the connection and run")
        conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
    conf["acks"] = _norm_acks(conf["acks"])
    if conf["acks"] not in ("0", "1", "all"):
        raise ModeError(f"acks={conf['acks']!r} must be 0, 1 or all")
    idempotent = _bool("enable.idempotence", conf["enable.idempotence"])
    retries = _int("retries", conf["retries"])
    in_flight = _int("max.in.flight.requests.per.connection", conf["max.in.flight.requests.per.connection"])
    for key in ("message.timeout.ms", "request.timeout.ms", "linger.ms"):
        if _int(key, conf[key]) < 0:
            raise ModeError(f"{key} must be >= 0")
    if retries < 0 or in_flight < 1:
        raise ModeError("retries must be >= 0 and max.in.flight.requests.per.connection >= 1")
    if idempotent:
        if conf["acks"] != "all":
            raise ModeError(f"enable.idempotence=true needs acks=all, got acks={conf['acks']}: "
                            "the broker can only de-duplicate what all in-sync replicas acknowledged")
        if in_flight > 5:
            raise ModeError(f"enable.idempotence=true needs max.in.flight.requests.per.connection <= 5, got {in_flight}")
        if retries == 0:
            raise ModeError("enable.idempotence=true needs retries > 0: idempotence exists to make retries safe")
    if mode.transactional and not idempotent:
        raise ModeError("the transactional mode needs enable.idempotence=true (transactions are built on it)")
    if mode.name == "at_most_once" and (retries > 0 or conf["acks"] != "0"):
        raise ModeError("at_most_once means acks=0 and retries=0; a retrying or acking producer is at_least_once")
    return conf


def mask_secrets(conf: dict) -> dict:
    """The config as stored with a run: secret values replaced."""
    return {k: ("****" if any(s in k for s in ("password", "secret", "sasl.oauthbearer", "ssl.key")) else v)
            for k, v in conf.items()}
