"""Every view has one definition, in sql/R__views.sql (the repeatable file `schema.migrate` applies
after the versioned ones whenever it changes, and again after any versioned file, which it runs with
the views dropped): no versioned file makes or drops a view, each view is made once, and each names
its columns."""

from __future__ import annotations

import re

from delivery_semantics.history import schema

_CREATE = re.compile(r"(?im)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+([a-z_]+)\s+AS\b")
_DROP = re.compile(r"(?im)^\s*DROP\s+VIEW\b")


def _repeatable() -> str:
    (path,) = [p for p in schema.repeatables() if p.name == "R__views.sql"]
    return path.read_text()


def test_each_view_is_defined_once_in_the_repeatable_file():
    names = [n.lower() for n in _CREATE.findall(_repeatable())]
    assert len(names) == len(set(names)), "a view defined twice"
    assert names == schema.view_names()
    assert {"v_run_results", "v_latest_matrix", "v_pipeline_matrix", "ledger_events", "platform_topics"} <= set(names)


def test_no_versioned_file_makes_or_drops_a_view():
    found = [p.name for _, _, p in schema.migrations() if _CREATE.search(p.read_text()) or _DROP.search(p.read_text())]
    assert found == [], "define views in sql/R__views.sql: migrate drops them before a versioned file and remakes them"


def test_the_checksums_from_before_the_views_moved_name_files_that_are_there():
    versions = {v for v, _, _ in schema.migrations()}
    assert set(schema._BEFORE_VIEWS_MOVED) <= versions


def test_each_view_names_its_columns():
    text = re.sub(r"count\(\*\)", "count()", re.sub(r"(?m)--.*$", "", _repeatable()))
    assert not re.search(r"(?i)\bSELECT\s+(?:DISTINCT\s+(?:ON\s*\([^)]*\)\s*)?)?(?:[a-z_]+\.)?\*", text)
