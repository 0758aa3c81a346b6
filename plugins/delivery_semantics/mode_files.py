"""A team's producer as a delivery mode, in a file: `modes/<name>.yaml`, validated against
`mode.schema.json`. A file names its client (librdkafka or java), that client's settings under the
client's own key names, and the catalog promise the team believes the producer keeps; optionally
the Kafka connection, a schedule and the scenarios its DAG runs (`dags/semantics_modes.py`).

What a schema can check is checked here, when the file is read (the DAG file reads the folder).
Each setting goes through the client's allowlist for mode files here (client_settings: no key that
loads code, replaces the cluster or weakens TLS/SASL; typed, bounded values). The client checks the
whole before a run starts (settings.resolve): librdkafka's own configuration check, or the Java
client's ProducerConfig.

This module imports yaml and jsonschema only when a file is read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from delivery_semantics import budgets, catalog, client_settings, locations, teams
from delivery_semantics.files import discover as discover_files
from delivery_semantics.files import field_path, first_error, one_line, read_yaml, total

SCHEMA_FILE = ("mode.schema.json",)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


class ModeFileError(catalog.ModeError):
    """A mode file that cannot be used: the message names the file and the field."""


@dataclass(frozen=True)
class ModeFile:
    name: str
    path: Path
    spec: dict
    mode: catalog.DeliveryMode

    @property
    def dag_id(self) -> str:
        return f"semantics_mode_{self.name}"

    @property
    def connection(self) -> str | None:
        return self.spec.get("connection")

    @property
    def schedule(self) -> str | None:
        return self.spec.get("schedule")

    @property
    def scenarios(self) -> list[str]:
        return list(self.spec.get("scenarios") or ["none"])

    @property
    def load(self) -> dict:
        return dict(self.spec.get("load") or {})


def modes_dir() -> Path:
    return locations.modes_dir()


def _message(error) -> str:
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, dict) else {}
        extra = sorted(map(str, set(error.instance) - set(schema.get("properties", {}))))
        return f"unknown field {', '.join(map(repr, extra))}; allowed: {', '.join(schema.get('properties', {}))}"
    return error.message


def validate(spec, where: str) -> None:
    """Raises ModeFileError naming `where` (the file) and the first bad field."""
    if not isinstance(spec, dict):
        raise ModeFileError(f"{where}: a mode is a mapping of fields, not {type(spec).__name__}")
    e = first_error(json.loads(locations.package_text(*SCHEMA_FILE)), spec)
    if e is not None:
        raise ModeFileError(one_line(f"{where}: {field_path(e)}: {_message(e)}"))
    if "connection" in spec:
        try:
            teams.check_connection(Path(where), spec["connection"], "kafka", f"{where}: connection")
        except teams.TeamError as e:
            raise ModeFileError(str(e)) from None
    try:
        budgets.check_schedule(spec.get("schedule"), where)
    except budgets.BudgetError as e:
        raise ModeFileError(one_line(str(e))) from None
    mode = _mode(spec, Path(where).stem, where)
    for scenario in spec.get("scenarios") or ():
        if scenario not in catalog.PRODUCER_SCENARIOS:
            raise ModeFileError(
                f"{where}: scenarios: {scenario!r} is not a producer scenario; use "
                f"{', '.join(catalog.PRODUCER_SCENARIOS)}"
            )
        reason = catalog.SCENARIOS[scenario].incompatible(mode)
        if reason:
            raise ModeFileError(f"{where}: scenarios: {reason}")


def _mode(spec: dict, name: str, where: str) -> catalog.DeliveryMode:
    promise = catalog.PROMISES[spec["promise"]]
    transactional = bool(spec.get("transactional", False))
    if promise.name == "exactly_once" and not transactional:
        raise ModeFileError(
            f"{where}: promise: exactly_once is kept by transactions: add transactional: true "
            "(the platform writes the events in transactions under its own transactional.id)"
        )
    settings = {}
    for key, value in spec["settings"].items():
        try:
            k, v = client_settings.file_setting(spec["client"], key, value)
        except catalog.ModeError as e:
            raise ModeFileError(f"{where}: settings.{key}: {e}") from None
        settings[k] = v
    return catalog.DeliveryMode(
        name,
        spec.get("description") or f"{spec['client']} producer of {where}",
        MappingProxyType(settings),
        catalog.READ_COMMITTED if transactional else catalog.READ_UNCOMMITTED,
        promise,
        transactional=transactional,
        resends_unacked=str(settings.get("acks", "all")) != "0",
        client=spec["client"],
        source=where,
        connection=spec.get("connection"),
    )


def load(name_or_path: str | Path) -> ModeFile:
    """A mode file by name (modes/<name>.yaml) or by path. Any failure is ModeFileError, one line
    naming the file."""
    return total(Path(name_or_path), ModeFileError, _load)


def _load(name_or_path: str | Path) -> ModeFile:
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        if not _NAME.fullmatch(str(name_or_path)):
            raise ModeFileError(f"{name_or_path!r} is neither a mode name ([A-Za-z0-9_-]) nor a .yaml file")
        p = modes_dir() / f"{name_or_path}.yaml"
    name = p.stem
    if not _NAME.fullmatch(name):
        raise ModeFileError(f"{p}: the file name makes the mode's name, and {name!r} is not [A-Za-z0-9_-]")
    if name in catalog.MODES or name in catalog.STRATEGIES:
        raise ModeFileError(f"{p}: {name!r} is a built-in mode or strategy of the catalog: name the file otherwise")
    spec = read_yaml(p, ModeFileError)
    validate(spec, str(p))
    return ModeFile(name, p, spec, _mode(spec, name, str(p)))


def exists(name: str) -> bool:
    return bool(_NAME.fullmatch(str(name))) and (modes_dir() / f"{name}.yaml").is_file()


def connection_of(mode: str) -> str | None:
    """The Kafka connection a mode file names, or None (a preset's runs, and a file's without one,
    use kafka_default)."""
    return load(mode).connection if mode not in catalog.MODES and exists(mode) else None


def discover(directory: Path | None = None) -> list[tuple[str, ModeFile | ModeFileError]]:
    """Every modes/*.yaml, each loaded or its error: one bad file does not hide the others."""
    return discover_files(directory or modes_dir(), ModeFileError, load)
