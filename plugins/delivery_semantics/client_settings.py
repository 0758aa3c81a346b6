"""Which producer settings a run may take, per client: the one place the trust boundary for
settings lives (docs/SECURITY.md). Every path goes through it once, before any client is made or
any process starts: a form's `producer_settings` and the CLI's `--set` (`form_setting`), and a mode
file's `settings` (`file_setting`).

Allowlists, not denylists. A form may set the documented tuning keys: acks, idempotence, retries,
in-flight requests, linger, batching, compression, timeouts and buffering, each typed and bounded.
A mode file may set those and a few more of the same nature (client.id, sockets, metadata,
partitioner). Nothing else passes, and so nothing that loads code (`plugin.library.paths`,
`interceptor.classes`, `*.class`, `security.providers`, `config.providers`, callbacks), replaces
the cluster (`bootstrap.servers`, `metadata.broker.list`, `test.mock.*`), weakens TLS or SASL
(`ssl.*`, `sasl.*`, `enable.ssl.certificate.verification`, `https.*`) or is the platform's own
(`transactional.id`, serializers, delivery callbacks). For those the refusal says why.

A value is parsed to its type, so a value that reaches a client is a number in bounds, a boolean,
one of an enum's words, or a plain name: never a control character, whatever the client's own
parser would make of it. Pure Python, standard library: the DAG files import it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from delivery_semantics.catalog import JAVA, LIBRDKAFKA, ModeError
from delivery_semantics.files import control

FORM, FILE = "form", "file"
_KEY = re.compile(r"[a-z][a-z0-9_.]{0,99}")
_INT = re.compile(r"-?[0-9]{1,19}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
INT_MAX = 2_147_483_647


@dataclass(frozen=True)
class Setting:
    """One key a client may be given, with its type: int (bounds), bool, enum (choices) or name."""

    key: str
    kind: str
    low: int = 0
    high: int = INT_MAX
    choices: tuple[str, ...] = ()
    tuning: bool = True  # a form may set it; otherwise only a mode file

    def parse(self, value) -> str:
        shown = _shown(value)
        if self.kind == "bool":
            text = str(value).strip().lower() if isinstance(value, (bool, str)) else None
            if text in ("true", "false"):
                return text
            raise ModeError(f"{self.key}={shown} is not a boolean (true/false)")
        if self.kind == "int":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if not _INT.fullmatch(text):
                raise ModeError(f"{self.key}={shown} is not an integer")
            if not self.low <= int(text) <= self.high:
                raise ModeError(f"{self.key}={shown} must be an integer from {self.low} to {self.high}")
            return str(int(text))
        if self.kind == "enum":
            text = str(value).strip().lower() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if text not in self.choices:
                raise ModeError(f"{self.key}={shown} must be one of {', '.join(self.choices)}")
            return text
        text = value if isinstance(value, str) else ""
        if not _NAME.fullmatch(text):
            raise ModeError(f"{self.key}={shown} must be a name of letters, digits, '.', '_' and '-' (at most 100)")
        return text


def _int(key, low, high=INT_MAX, tuning=True) -> Setting:
    return Setting(key, "int", low, high, tuning=tuning)


def _bool(key, tuning=True) -> Setting:
    return Setting(key, "bool", tuning=tuning)


def _enum(key, *choices, tuning=True) -> Setting:
    return Setting(key, "enum", choices=choices, tuning=tuning)


_MIB = 1 << 20
_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")
_ACKS = ("0", "1", "all", "-1")
_DNS = ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")


@dataclass(frozen=True)
class ClientPolicy:
    """One client's settings: what it may be given, under which names, and why anything else is
    refused."""

    client: str
    settings: Mapping[str, Setting]
    aliases: Mapping[str, str] = field(default_factory=dict)
    owned: tuple[str, ...] = ()  # the platform's own keys, with a reason of their own

    def keys(self, surface: str) -> list[str]:
        return [k for k, s in self.settings.items() if surface == FILE or s.tuning]

    def check(self, key, value, surface: str) -> tuple[str, str]:
        """(canonical key, value as the client takes it), or ModeError with one line."""
        name = key if isinstance(key, str) else ""
        if not _KEY.fullmatch(name):
            raise ModeError(f"{_shown(key)} is not a setting's name (lower-case letters, digits, '.' and '_')")
        name = self.aliases.get(name, name)
        why = refusal(self.client, name)
        if why:
            raise ModeError(f"{name} cannot be set by a mode or a run: {why}")
        setting = self.settings.get(name)
        if setting is None or (surface == FORM and not setting.tuning):
            if surface == FILE:
                raise ModeError(
                    f"{name} is not a setting a mode file may give the {self.client} client "
                    "(docs/SECURITY.md lists the ones it may)"
                )
            raise ModeError(
                f"{name} is not a setting a form or --set may give the {self.client} client; allowed: "
                f"{', '.join(self.keys(surface))}"
            )
        if value is None or isinstance(value, (dict, list, tuple)):
            raise ModeError(f"{name}={_shown(value)}: a setting's value is a string, a number or a boolean")
        if any(map(control, str(value))):
            raise ModeError(f"{name}={_shown(value)}: a setting's value holds no control character")
        return name, setting.parse(value)


def _table(*settings: Setting) -> Mapping[str, Setting]:
    return MappingProxyType({s.key: s for s in settings})


# The same key, meaning and bounds in both clients.
_SHARED = (
    _enum("acks", *_ACKS),
    _bool("enable.idempotence"),
    _int("retries", 0),
    _int("max.in.flight.requests.per.connection", 1, 1_000_000),
    _int("linger.ms", 0, 900_000),
    _enum("compression.type", *_COMPRESSION),
    _int("request.timeout.ms", 1, 900_000),
    _int("transaction.timeout.ms", 1000, 900_000),
    _int("retry.backoff.ms", 1, 300_000),
    _int("retry.backoff.max.ms", 1, 300_000),
)
_SHARED_FILE = (
    Setting("client.id", "name", tuning=False),
    _int("reconnect.backoff.ms", 0, 3_600_000, tuning=False),
    _int("reconnect.backoff.max.ms", 0, 3_600_000, tuning=False),
    _int("socket.connection.setup.timeout.ms", 1000, INT_MAX, tuning=False),
    _enum("client.dns.lookup", *_DNS, tuning=False),
)

POLICIES = {
    LIBRDKAFKA: ClientPolicy(
        LIBRDKAFKA,
        _table(
            *_SHARED,
            _int("batch.size", 1, 64 * _MIB),
            _int("batch.num.messages", 1, 1_000_000),
            _int("compression.level", -1, 12),
            _int("message.timeout.ms", 0),
            _int("queue.buffering.max.messages", 1, 10_000_000),
            _int("queue.buffering.max.kbytes", 1, 1024 * 1024),
            _int("socket.timeout.ms", 10, 300_000),
            *_SHARED_FILE,
            _int("message.max.bytes", 1000, 100 * _MIB, tuning=False),
            _int("message.copy.max.bytes", 0, 100 * _MIB, tuning=False),
            _bool("enable.gapless.guarantee", tuning=False),
            _enum(
                "partitioner",
                *("random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"),
                tuning=False,
            ),
            _int("sticky.partitioning.linger.ms", 0, 900_000, tuning=False),
            _int("queue.buffering.backpressure.threshold", 1, 1_000_000, tuning=False),
            _bool("socket.keepalive.enable", tuning=False),
            _bool("socket.nagle.disable", tuning=False),
            _int("socket.send.buffer.bytes", 0, 100 * _MIB, tuning=False),
            _int("socket.receive.buffer.bytes", 0, 100 * _MIB, tuning=False),
            _int("metadata.max.age.ms", 1, 86_400_000, tuning=False),
            _int("topic.metadata.refresh.interval.ms", -1, 3_600_000, tuning=False),
            _int("connections.max.idle.ms", 0, INT_MAX, tuning=False),
            _enum("broker.address.family", "any", "v4", "v6", tuning=False),
        ),
        # librdkafka's aliases of the keys above: an override under either name is the same setting.
        MappingProxyType(
            {
                "request.required.acks": "acks",
                "message.send.max.retries": "retries",
                "max.in.flight": "max.in.flight.requests.per.connection",
                "delivery.timeout.ms": "message.timeout.ms",
                "queue.buffering.max.ms": "linger.ms",
                "compression.codec": "compression.type",
            }
        ),
        ("transactional.id", "on_delivery", "delivery.report.only.error", "dr_msg_cb", "dr_cb", "error_cb"),
    ),
    JAVA: ClientPolicy(
        JAVA,
        _table(
            *_SHARED,
            _int("batch.size", 0, 64 * _MIB),
            _int("delivery.timeout.ms", 1),
            # The JVM's heap is sized from it (java_client.command): bounded here, before a JVM starts.
            _int("buffer.memory", _MIB, 1024 * _MIB),
            _int("max.block.ms", 0, 900_000),
            *_SHARED_FILE,
            _int("max.request.size", 1000, 100 * _MIB, tuning=False),
            _int("compression.gzip.level", -1, 9, tuning=False),
            _int("compression.lz4.level", 1, 17, tuning=False),
            _int("compression.zstd.level", -131072, 22, tuning=False),
            _bool("partitioner.ignore.keys", tuning=False),
            _bool("partitioner.adaptive.partitioning.enable", tuning=False),
            _int("partitioner.availability.timeout.ms", 0, 3_600_000, tuning=False),
            _int("send.buffer.bytes", -1, 100 * _MIB, tuning=False),
            _int("receive.buffer.bytes", -1, 100 * _MIB, tuning=False),
            _int("metadata.max.age.ms", 0, 86_400_000, tuning=False),
            _int("metadata.max.idle.ms", 5000, 86_400_000, tuning=False),
            _int("connections.max.idle.ms", -1, INT_MAX, tuning=False),
            _int("socket.connection.setup.timeout.max.ms", 1000, INT_MAX, tuning=False),
            _bool("enable.metrics.push", tuning=False),
        ),
        MappingProxyType({}),
        ("transactional.id", "key.serializer", "value.serializer"),
    ),
}

# Why a key outside the allowlist is refused, for the keys a hostile or mistaken file would try:
# checked before the allowlist, so the refusal names the danger rather than only "not allowed".
_CLUSTER = ("bootstrap.servers", "metadata.broker.list", "test.mock.")
_CONNECTION = ("security.protocol", "sasl.", "ssl.", "ssl_", "enable.ssl.", "enable.sasl.", "https.")
_CODE = ("plugin.library.paths", "interceptor", "security.providers", "config.providers")
_CODE_PARTS = (".class", "callback", "_cb", "oauthbearer")


def refusal(client: str, key: str) -> str | None:
    """Why no mode, form or run may set `key` on `client`, or None when the allowlist decides."""
    if key in POLICIES[client].owned:
        return "the platform sets it for every run (topic, transactions and record layout are the platform's)"
    if key.startswith(_CLUSTER):
        return "it names or replaces the cluster, which only the Kafka connection does"
    if key.startswith(_CONNECTION):
        return "the Kafka connection sets it (security settings come from the connection, and are never weakened)"
    if key.startswith(_CODE) or any(part in key for part in _CODE_PARTS):
        return "it loads code (a class, a library or a callback) into the client"
    return None


def form_setting(client: str, key, value) -> tuple[str, str]:
    """A form's or `--set`'s setting checked: (canonical key, value)."""
    return POLICIES[client].check(key, value, FORM)


def file_setting(client: str, key, value) -> tuple[str, str]:
    """A mode file's setting checked: (canonical key, value)."""
    return POLICIES[client].check(key, value, FILE)


def checked(client: str, settings: Mapping | None, surface: str) -> dict[str, str]:
    """Every setting of a mapping checked on `surface`, under canonical names."""
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise ModeError(f"producer settings are a mapping of setting to value, not {type(settings).__name__}")
    policy = POLICIES[client]
    return dict(policy.check(k, v, surface) for k, v in settings.items())


def form_keys() -> list[str]:
    """Every key a form may name, on either client, aliases included: the form's JSON schema."""
    keys = {k for p in POLICIES.values() for k in p.keys(FORM)}
    keys |= {a for p in POLICIES.values() for a, k in p.aliases.items() if p.settings[k].tuning}
    return sorted(keys)


def _shown(value) -> str:
    """A value as a one-line message may show it: repr, cut."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
