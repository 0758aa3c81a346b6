"""What a producer client is, as data: the settings it may be given (its allowlist, the trust
boundary for settings of docs/SECURITY.md), the tuning every preset adds, its defaults, and where
its runtime lives. Each client is one module beside this one with a `ClientSpec`, and one line in
`clients/__init__.py`'s registry; nothing else names a client.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from delivery_semantics.errors import ModeError
from delivery_semantics.files import control

FORM, FILE = "form", "file"
_KEY = re.compile(r"[a-z][a-z0-9_.]{0,99}")
_INT = re.compile(r"-?[0-9]{1,19}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
INT_MAX = 2_147_483_647
RETRIES_MAX = INT_MAX
CLIENT_ID_PREFIX = "semantics-"  # both clients' default: retry until the delivery timeout


@dataclass(frozen=True)
class Setting:
    """One key a client may be given, with its type: int (bounds), bool, enum (choices) or name."""

    key: str
    value_type: str  # int, bool, enum or name
    low: int = 0
    high: int = INT_MAX
    choices: tuple[str, ...] = ()
    tuning: bool = True  # a form may set it; otherwise only a mode file
    prefix: str = ""  # a name's: what it always starts with

    def parse(self, value) -> str:
        shown = _shown(value)
        if self.value_type == "bool":
            text = str(value).strip().lower() if isinstance(value, (bool, str)) else None
            if text in ("true", "false"):
                return text
            raise ModeError(f"{self.key}={shown} is not a boolean (true/false)")
        if self.value_type == "int":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if not _INT.fullmatch(text):
                raise ModeError(f"{self.key}={shown} is not an integer")
            if not self.low <= int(text) <= self.high:
                raise ModeError(f"{self.key}={shown} must be an integer from {self.low} to {self.high}")
            return str(int(text))
        if self.value_type == "enum":
            text = str(value).strip().lower() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if text not in self.choices:
                raise ModeError(f"{self.key}={shown} must be one of {', '.join(self.choices)}")
            return text
        text = value if isinstance(value, str) else ""
        if not _NAME.fullmatch(text):
            raise ModeError(f"{self.key}={shown} must be a name of letters, digits, '.', '_' and '-' (at most 100)")
        return text if text.startswith(self.prefix) else self.prefix + text


def int_setting(key, low, high=INT_MAX, tuning=True) -> Setting:
    return Setting(key, "int", low, high, tuning=tuning)


def bool_setting(key, tuning=True) -> Setting:
    return Setting(key, "bool", tuning=tuning)


def enum_setting(key, *choices, tuning=True) -> Setting:
    return Setting(key, "enum", choices=choices, tuning=tuning)


MIB = 1 << 20
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

    def refusal(self, key: str) -> str | None:
        return refusal(self.owned, key)

    def keys(self, surface: str) -> list[str]:
        return [k for k, s in self.settings.items() if surface == FILE or s.tuning]

    def check(self, key, value, surface: str) -> tuple[str, str]:
        """(canonical key, value as the client takes it), or ModeError with one line."""
        name = key if isinstance(key, str) else ""
        if not _KEY.fullmatch(name):
            raise ModeError(f"{_shown(key)} is not a setting's name (lower-case letters, digits, '.' and '_')")
        name = self.aliases.get(name, name)
        why = self.refusal(name)
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


def table(*settings: Setting) -> Mapping[str, Setting]:
    return MappingProxyType({s.key: s for s in settings})


# The same key, meaning and bounds in both built-in clients.
SHARED = (
    enum_setting("acks", *_ACKS),
    bool_setting("enable.idempotence"),
    int_setting("retries", 0),
    int_setting("max.in.flight.requests.per.connection", 1, 1_000_000),
    # At most a minute: a run's records wait this long in a batch, each, when its queue holds few.
    int_setting("linger.ms", 0, 60_000),
    enum_setting("compression.type", *_COMPRESSION),
    int_setting("request.timeout.ms", 1, 900_000),
    int_setting("transaction.timeout.ms", 1000, 900_000),
    int_setting("retry.backoff.ms", 1, 300_000),
    int_setting("retry.backoff.max.ms", 1, 300_000),
)
SHARED_FILE = (
    # Under the platform's prefix: a file never takes another application's quota or name in the brokers' logs.
    Setting("client.id", "name", tuning=False, prefix=CLIENT_ID_PREFIX),
    int_setting("reconnect.backoff.ms", 0, 3_600_000, tuning=False),
    int_setting("reconnect.backoff.max.ms", 0, 3_600_000, tuning=False),
    int_setting("socket.connection.setup.timeout.ms", 1000, INT_MAX, tuning=False),
    enum_setting("client.dns.lookup", *_DNS, tuning=False),
)


# Why a key outside the allowlist is refused, for the keys a hostile or mistaken file would try:
# checked before the allowlist, so the refusal names the danger rather than only "not allowed".
_CLUSTER = ("bootstrap.servers", "metadata.broker.list", "test.mock.")
_CONNECTION = ("security.protocol", "sasl.", "ssl.", "ssl_", "enable.ssl.", "enable.sasl.", "https.")
_CODE = ("plugin.library.paths", "interceptor", "security.providers", "config.providers")
_CODE_PARTS = (".class", "callback", "_cb", "oauthbearer")


def refusal(owned: tuple[str, ...], key: str) -> str | None:
    """Why no mode, form or run may set `key` on a client that owns `owned`, or None when the
    allowlist decides."""
    if key in owned:
        return "the platform sets it for every run (topic, transactions and record layout are the platform's)"
    if key.startswith(_CLUSTER):
        return "it names or replaces the cluster, which only the Kafka connection does"
    if key.startswith(_CONNECTION):
        return "the Kafka connection sets it (security settings come from the connection, and are never weakened)"
    if key.startswith(_CODE) or any(part in key for part in _CODE_PARTS):
        return "it loads code (a class, a library or a callback) into the client"
    return None


def _shown(value) -> str:
    """A value as a one-line message may show it: repr, cut."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class ClientSpec:
    """One producer client's facts. Its runtime (`runtime`, "module:Class", a
    `workload.client.ProducerClient`) checks a configuration as the client itself would, turns the
    Kafka connection's librdkafka settings into its own, and sends: it is imported only by a load,
    so that the forms and the DAG files read these facts without the client's library."""

    name: str
    description: str
    policy: ClientPolicy
    tuning: Mapping[str, str]  # what every preset adds to its semantics on this client
    defaults: Mapping[str, str]  # the effective value of each setting a finding reads, when unset
    size_key: str  # the setting that bounds the largest record it sends
    runtime: str
    record_formats: tuple[str, ...] = ("text",)
    transactions: bool = True  # whether it runs the transactional modes
    start_seconds: float = 0.0  # what a run pays before its first record (a JVM's start), for the ETA
    # The setting that bounds how long a record may wait for its outcome (never 0, "forever").
    timeout_key: str = "message.timeout.ms"
    # What one producer may hold, in MiB, from its settings and the records' size: summed over a
    # run's producers against the operator's budget (budgets.check_run_memory).
    memory_mb: Callable[[Mapping[str, str], int], int] = lambda conf, payload_bytes: 256

    def check_bounds(self, conf: Mapping[str, str]) -> None:
        """Settings that are each in bounds, but together would hold a run: a linger that is not
        well below the time a record may wait for its outcome."""
        linger, timeout = int(conf.get("linger.ms", 0)), int(conf.get(self.timeout_key, 0) or 0)
        if timeout and linger * 2 > timeout:
            raise ModeError(
                f"linger.ms={linger} must be at most half of {self.timeout_key}={timeout}: a record would "
                "spend its whole time waiting for a batch"
            )
