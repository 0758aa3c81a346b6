"""Which producer settings a run may take: the one place the trust boundary for settings is crossed
(docs/SECURITY.md). Every path goes through it once, before any client is made or any process
starts: a form's `producer_settings` and the CLI's `--set` (`form_setting`), and a mode file's
`settings` (`file_setting`). Each client's allowlist is its own (clients/: `ClientSpec.policy`).
Pure Python, standard library: the DAG files import it.
"""

from __future__ import annotations

from collections.abc import Mapping

from delivery_semantics import clients
from delivery_semantics.clients import FILE, FORM
from delivery_semantics.errors import ModeError

POLICIES = {name: spec.policy for name, spec in clients.REGISTRY.items()}


def refusal(client: str, key: str) -> str | None:
    """Why no mode, form or run may set `key` on `client`, or None when the allowlist decides."""
    return clients.spec(client).policy.refusal(key)


def form_setting(client: str, key, value) -> tuple[str, str]:
    """A form's or `--set`'s setting checked: (canonical key, value)."""
    return clients.spec(client).policy.check(key, value, FORM)


def file_setting(client: str, key, value) -> tuple[str, str]:
    """A mode file's setting checked: (canonical key, value)."""
    return clients.spec(client).policy.check(key, value, FILE)


def checked(client: str, settings: Mapping | None, surface: str) -> dict[str, str]:
    """Every setting of a mapping checked on `surface`, under canonical names."""
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise ModeError(f"producer settings are a mapping of setting to value, not {type(settings).__name__}")
    policy = clients.spec(client).policy
    return dict(policy.check(k, v, surface) for k, v in settings.items())


def form_keys() -> list[str]:
    """Every key a form may name, on any client, aliases included: the form's JSON schema."""
    keys = {k for p in POLICIES.values() for k in p.keys(FORM)}
    keys |= {a for p in POLICIES.values() for a, k in p.aliases.items() if p.settings[k].tuning}
    return sorted(keys)


__all__ = ["FILE", "FORM", "POLICIES", "checked", "file_setting", "form_keys", "form_setting", "refusal"]
