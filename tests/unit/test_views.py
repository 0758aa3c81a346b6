"""Every view has one definition, in sql/R__views.sql (the repeatable file `schema.migrate` applies
after the versioned ones whenever it changes): no later versioned file defines a view, every view
the versioned files made and did not drop for good is there once, and each names its columns."""

from __future__ import annotations

import re

from delivery_semantics.history import schema

LAST_VERSION_WITH_VIEWS = 36  # the files up to it are history, their checksums checked
_CREATE = re.compile(r"(?im)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+([a-z_]+)\s+AS\b")
_DROP = re.compile(r"(?im)^\s*DROP\s+VIEW\s+(?:IF\s+EXISTS\s+)?([a-z_]+)")


def _views_of_the_versioned_files() -> set[str]:
    alive: set[str] = set()
    for _, _, path in schema.migrations():
        text = path.read_text()
        events = sorted(
            [(m.start(), "drop", m.group(1)) for m in _DROP.finditer(text)]
            + [(m.start(), "create", m.group(1)) for m in _CREATE.finditer(text)]
        )
        for _, what, name in events:
            (alive.add if what == "create" else alive.discard)(name.lower())
    return alive


def _repeatable() -> str:
    (path,) = [p for p in schema.repeatables() if p.name == "R__views.sql"]
    return path.read_text()


def test_each_view_is_defined_once_in_the_repeatable_file():
    names = [n.lower() for n in _CREATE.findall(_repeatable())]
    assert len(names) == len(set(names)), "a view defined twice"
    assert set(names) == _views_of_the_versioned_files()


def test_no_versioned_file_after_the_history_defines_a_view():
    late = [p.name for v, _, p in schema.migrations() if v > LAST_VERSION_WITH_VIEWS and _CREATE.search(p.read_text())]
    assert late == [], "define views in sql/R__views.sql; a versioned file may only drop one first"


def test_each_view_names_its_columns():
    text = re.sub(r"count\(\*\)", "count()", re.sub(r"(?m)--.*$", "", _repeatable()))
    assert not re.search(r"(?i)\bSELECT\s+(?:DISTINCT\s+(?:ON\s*\([^)]*\)\s*)?)?(?:[a-z_]+\.)?\*", text)
