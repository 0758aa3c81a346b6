"""Every configuration key the clients and Kafka know (known_keys.json, made by
local/known_keys/generate from the pinned librdkafka and Kafka: librdkafka's own property table, the
Java client's and the broker's ConfigDefs), and the one-line refusal of a key none of them knows,
with the nearest known one. A misspelt key read as unset would give the findings of its default:
`producer.ack=1` those of acks=all."""

from __future__ import annotations

import difflib
import json
import re
from functools import cache

from delivery_semantics import locations
from delivery_semantics.files import control

# The platform's own keys: what an application does around its client (rule_catalog.py), per family.
APP_KEYS = {
    "producer": ("app.resends_failed",),
    "consumer": ("app.commit", "app.dedup", "app.processing.ms"),
    "topic": ("app.transactional", "app.audit.window.ms"),
}
# The families whose keys are the client's, and the ones that are Kafka's whichever client runs.
CLIENT_FAMILIES = ("producer", "consumer")
KAFKA_FAMILIES = ("topic", "broker")
# The cluster's features (KIP-584) a Kafka 4.1 controller finalizes: `predict` reads their levels.
KAFKA_FEATURES = (
    "eligible.leader.replicas.version",
    "group.version",
    "kraft.version",
    "metadata.version",
    "share.version",
    "streams.version",
    "transaction.version",
)


@cache
def _data() -> dict:
    return json.loads(locations.package_text("clients", "known_keys.json"))


def versions() -> dict[str, str]:
    return {"kafka": _data()["kafka"], "librdkafka": _data()["librdkafka"]}


def known(family: str, client: str) -> frozenset[str] | None:
    """The keys of `family` for `client` (librdkafka or java), or None for a family whose keys are no
    one list (a connector's are its plugin's)."""
    data = _data()
    if family in CLIENT_FAMILIES:
        keys = data["java_keys" if client == "java" else "librdkafka_keys"][family]
    elif family in KAFKA_FAMILIES:
        keys = data[family]
    elif family == "cluster":
        keys = KAFKA_FEATURES
    else:
        return None
    return frozenset(keys) | frozenset(APP_KEYS.get(family, ()))


def refusal(family: str, key: str, client: str) -> str | None:
    """Why `family.key` is no setting of `client` (or of Kafka's topics or brokers), with the
    nearest known key; None when it is known, or its family has no one list."""
    names = known(family, client)
    if names is None or key in names:
        return None
    whose = {"cluster": "Kafka feature"}.get(family) or (
        f"{client} {family}" if family in CLIENT_FAMILIES else f"Kafka {family}"
    )
    near = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    hint = f"; did you mean {family}.{near[0]}?" if near else ""
    return f"{family}.{key} is not a {whose}{'' if family == 'cluster' else ' setting'}{hint}"


class SettingRefused(ValueError):
    """A key no client knows, or a value its client would refuse: one line."""


# The words librdkafka holds for the values the rules compare, in the Java client's words.
_LIBRDKAFKA_WORDS = {"auto.offset.reset": {"largest": "latest", "smallest": "earliest"}}


def _librdkafka_name(family: str, key: str) -> str:
    """A librdkafka alias under the name the Java client gives the same setting (the rules read
    Java's names): `request.required.acks` as `acks`, `message.timeout.ms` as `delivery.timeout.ms`."""
    aliases = _data()["librdkafka_aliases"]
    target = aliases.get(key, key)
    group = {target, *(a for a, t in aliases.items() if t == target)}
    java = [name for name in sorted(group) if name in _data()["java_keys"][family]]
    return java[0] if java else key


def _java_parse(family: str, key: str, value: str) -> tuple[str, str | None]:
    """The value as Java's ConfigDef parses it (trimmed; its type; its validator's range or
    strings), or why it would refuse it."""
    java_type, validator, words = _data()["java_types"][family].get(key, ("STRING", "", ""))
    text = value.strip()
    if java_type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            return text, "Expected value to be either true or false"
        return text.lower(), None
    if java_type in ("INT", "LONG", "SHORT"):
        bits = {"INT": 31, "LONG": 63, "SHORT": 15}[java_type]
        try:
            number = int(text)
        except ValueError:
            return text, f"Expected value to be a {bits + 1}-bit integer"
        if not -(2**bits) <= number < 2**bits:
            return text, f"Expected value to be a {bits + 1}-bit integer"
        if validator == "Range" and (bounds := re.fullmatch(r"\[(-?\d+)?,\.\.\.(?:,(-?\d+))?\]", words)):
            low, high = bounds.groups()
            if (low is not None and number < int(low)) or (high is not None and number > int(high)):
                return text, f"Value must be in {words}"
        return str(number), None
    if validator in ("ValidString", "CaseInsensitiveValidString") and words.startswith("["):
        choices = [w.strip() for w in words[1:-1].split(",")]
        fold = validator == "CaseInsensitiveValidString"
        if (text.lower() if fold else text) not in ([c.lower() for c in choices] if fold else choices):
            return text, f"String must be one of: {', '.join(choices)}"
        return (text.lower() if fold else text), None
    return text, None


def setting(family: str, key: str, value: str, client: str, read: frozenset[str]) -> tuple[str, str]:
    """A `--set family.key=value` as the client takes it: the key under the name the rules read (a
    librdkafka alias resolved), and its value as the client parses it. SettingRefused, with the
    nearest known key or the client's own words, when the client would not take it. A
    librdkafka value is checked by librdkafka itself, for the keys in `read` ("family.key": what
    the rules read) and their aliases only: no other key, whatever it would load, reaches it."""
    if any(map(control, key + value)):  # data, never a second line or a C string's end
        raise SettingRefused(f"{family}.{key[:80]!r}: a setting holds no control character")
    why = refusal(family, key, client)
    if why:
        raise SettingRefused(why)
    if family not in CLIENT_FAMILIES or key.startswith("app."):
        return key, value
    if client == "java":
        parsed, error = _java_parse(family, key, value)
    else:
        from delivery_semantics.clients import librdkafka_conf

        name = _librdkafka_name(family, key)
        if f"{family}.{name}" not in read:
            return name, value
        held, error = librdkafka_conf.parse(key, value)
        parsed = _LIBRDKAFKA_WORDS.get(name, {}).get(held or "", held or value)
        key = name
    if error:
        raise SettingRefused(f"{family}.{key}={value[:80]!r}: {client} refuses it: {error.strip()}")
    return key, parsed


# Keys a connector passes on under a prefix: to its clients, its transforms and predicates, its
# converters, the topics it creates (Connect's), and a Debezium connector's database and JDBC
# driver (and the JDBC sink's Hibernate).
CONNECTOR_PREFIXES = (
    "producer.override.",
    "consumer.override.",
    "admin.override.",
    "transforms.",
    "predicates.",
    "key.converter.",
    "value.converter.",
    "header.converter.",
    "topic.creation.",
    "database.",
    "driver.",
    "hibernate.",
)


def connector_refusal(settings: dict[str, str]) -> str | None:
    """Why a connector's settings (with their `connector.class`, and the worker's beside them) hold
    a key that neither Connect nor the plugin knows, with the nearest known one; None when each is
    known, or when the plugin is not one whose keys are listed here (its keys are its own)."""
    connect = _data()["connect"]
    cls = str(settings.get("connector.class", ""))
    plugin = connect["plugins"].get(cls)
    if plugin is None:
        return None
    role = "sink" if "sink" in cls.lower() else "source"
    names = sorted({*connect[role], *connect["worker"], *plugin})
    for key in settings:
        if key in names or key.startswith(CONNECTOR_PREFIXES):
            continue
        near = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"; did you mean connector.{near[0]}?" if near else ""
        return f"connector.{key} is not a setting of Kafka Connect's {role}s or of {cls.rsplit('.', 1)[-1]}{hint}"
    return None
