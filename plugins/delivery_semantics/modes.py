"""Every mode a run can name, and the verdict on a run: the catalog's presets beside the team's mode
files (modes/*.yaml, mode_files.py), which only this floor sees, so that the catalog stays facts
and never reads a file.

A verdict judges a run against the promise of what it ran: a mode (preset or file), a consumer
strategy or a connector pipeline, on that subject's own isolation level and with the guarantees
the scenario leaves in force.
"""

from __future__ import annotations

import re

from delivery_semantics import catalog, mode_files
from delivery_semantics.catalog import (
    BROKEN_BY,
    MODES,
    OUTBOX_TOPIC,
    PIPELINES,
    STRATEGIES,
    Counts,
    DeliveryMode,
    Scenario,
    Subject,
)
from delivery_semantics.errors import ModeError


def file_modes() -> dict[str, DeliveryMode]:
    """The modes of the valid mode files (modes/*.yaml); an invalid file has its own DAG saying why."""
    return {name: f.mode for name, f in mode_files.discover() if isinstance(f, mode_files.ModeFile)}


def all_modes() -> dict[str, DeliveryMode]:
    """The presets, then the mode files."""
    return {**MODES, **file_modes()}


def get_mode(name: str) -> DeliveryMode:
    """A preset, or a mode file by its name (loaded and validated now)."""
    if isinstance(name, str) and name in MODES:
        return MODES[name]
    if isinstance(name, str) and mode_files.exists(name):
        return mode_files.load(name).mode
    raise ModeError(f"unknown mode {name!r}: choose one of {', '.join(all_modes())}")


def check_pair(mode_name: str, scenario_name: str) -> tuple[DeliveryMode, Scenario]:
    mode = get_mode(mode_name)
    return mode, mode.check(scenario_name)


def parse_pair(text: str) -> tuple[str, str, str]:
    """A form's "MODE x SCENARIO [on CLIENT]" as (mode, scenario, client), each checked."""
    if not isinstance(text, str) or not re.fullmatch(catalog.PAIR_PATTERN, text):
        raise catalog.CatalogError(f"pair {str(text)[:80]!r} is not 'MODE x SCENARIO' or 'MODE x SCENARIO on CLIENT'")
    head, _, client = text.partition(" on ")
    mode, _, scenario = head.partition(" x ")
    client = client or catalog.DEFAULT_CLIENT
    if client not in catalog.CLIENTS:
        raise catalog.CatalogError(
            f"pair {text!r}: unknown client {client!r}: choose from {', '.join(catalog.CLIENTS)}"
        )
    try:
        catalog.get_client(client, check_pair(mode, scenario)[0])
    except ModeError as e:
        raise catalog.CatalogError(f"pair {text!r}: {e}") from None
    return mode, scenario, client


def judged(name: str) -> Subject | None:
    """The judged subject of that name: a mode (a preset or a mode file), a consumer strategy or a
    connector pipeline; None for a name none has."""
    subject = MODES.get(name) or STRATEGIES.get(name) or PIPELINES.get(name)
    if subject is None and name:
        try:
            subject = get_mode(name)
        except ModeError:
            return None
    return subject


def judged_rows() -> list[tuple[str, str, str, str]]:
    """(name, side, isolation, promise) of every mode (mode files too) and strategy: the
    `catalog_judged` table."""
    subjects: list[Subject] = [*all_modes().values(), *STRATEGIES.values(), *PIPELINES.values()]
    return [(s.name, s.side, s.isolation, s.promise.text) for s in subjects]


def guarantees_kept(name: str, scenario: str, broken_by: list[str]) -> list[tuple[str, bool]]:
    """(guarantee, kept) for each guarantee the subject's promise holds in force under the scenario,
    given the kinds that broke it."""
    subject = judged(name)
    if subject is None:
        return []
    return [(g, not set(BROKEN_BY[g]) & set(broken_by)) for g in subject.promise.in_force(scenario)]


def definition(name: str, scenario: str, client: str | None = None) -> catalog.Definition | None:
    """What a run of the mode (a preset or a mode file), strategy or pipeline of that name under the
    scenario is judged against, resolved now; None for a name none has."""
    subject = judged(name)
    return subject.definition(scenario, client) if subject else None


def verdict(
    name: str, scenario: str, isolation: str, counts: Counts, stage: str = OUTBOX_TOPIC
) -> tuple[str, list[str]]:
    """The verdict (catalog.Definition.verdict) of the subject of that name as it is defined now:
    n/a for a name none has."""
    defined = definition(name, scenario)
    return defined.verdict(isolation, counts, stage) if defined else ("n/a", [])
