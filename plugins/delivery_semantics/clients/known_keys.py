"""Every configuration key the clients and Kafka know (known_keys.json, made by
local/known_keys/generate from the pinned librdkafka and Kafka: librdkafka's own property table, the
Java client's and the broker's ConfigDefs), and the one-line refusal of a key none of them knows,
with the nearest known one. A misspelt key read as unset would give the findings of its default:
`producer.ack=1` those of acks=all."""

from __future__ import annotations

import difflib
import json
from functools import cache

from delivery_semantics import locations

# The platform's own keys: what an application does around its client (rules.py), per family.
APP_KEYS = {
    "consumer": ("app.commit", "app.dedup", "app.processing.ms"),
    "topic": ("app.transactional", "app.audit.window.ms"),
}
# The families whose keys are the client's, and the ones that are Kafka's whichever client runs.
CLIENT_FAMILIES = ("producer", "consumer")
KAFKA_FAMILIES = ("topic", "broker")


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
    else:
        return None
    return frozenset(keys) | frozenset(APP_KEYS.get(family, ()))


def refusal(family: str, key: str, client: str) -> str | None:
    """Why `family.key` is no setting of `client` (or of Kafka's topics or brokers), with the
    nearest known key; None when it is known, or its family has no one list."""
    names = known(family, client)
    if names is None or key in names:
        return None
    whose = f"{client} {family}" if family in CLIENT_FAMILIES else f"Kafka {family}"
    near = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    hint = f"; did you mean {family}.{near[0]}?" if near else ""
    return f"{family}.{key} is not a {whose} setting{hint}"
