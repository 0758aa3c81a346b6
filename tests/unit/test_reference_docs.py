"""The reference pages the code writes or must match: docs/SETTINGS.md lists every `SEMANTICS_*`
variable the code reads, and docs/EXPECTATIONS.md is the catalog's promises and expected outcomes,
as `local/semantics report --expectations` prints them."""

from __future__ import annotations

import re

from conftest import REPO

READERS = ("plugins", "spark_apps", "dags", "local")
NAME = re.compile(r"SEMANTICS_[A-Z0-9_]*[A-Z0-9]_?")


def _named_in_code() -> set[str]:
    found = set()
    for root in READERS:
        for path in (REPO / root).rglob("*"):
            if path.is_file() and path.suffix in ("", ".py", ".json", ".sh") and "__pycache__" not in path.parts:
                try:
                    text = path.read_text()
                    found |= set(NAME.findall(text))
                    found |= {f"SEMANTICS_{n.upper()}" for n in re.findall(r'setting\("([a-z0-9_]+)"\)', text)}
                except UnicodeDecodeError:
                    continue
    return found


def test_every_variable_the_code_reads_is_in_the_settings_reference():
    doc = (REPO / "docs" / "SETTINGS.md").read_text()
    listed = set(NAME.findall(doc))
    # A prefix the code builds names from (SEMANTICS_JDBC_ + URL) is listed as the prefix's family.
    missing = {n for n in _named_in_code() if n not in listed and not any(d.startswith(n) for d in listed)}
    assert not missing, f"not in docs/SETTINGS.md: {sorted(missing)}"
    assert len(listed) >= 50


def test_every_setting_is_declared_read_by_its_name_and_documented():
    """locations.OPTIONS is the provider's [semantics] section: each option is documented as its
    SEMANTICS_ variable, and the code reads no setting by a name it does not declare."""
    from delivery_semantics import locations

    doc = set(NAME.findall((REPO / "docs" / "SETTINGS.md").read_text()))
    assert {f"SEMANTICS_{n.upper()}" for n in locations.OPTIONS} <= doc
    read = set()
    for path in (REPO / "plugins").rglob("*.py"):
        read |= set(re.findall(r'setting\("([a-z0-9_]+)"\)', path.read_text()))
    assert read and read <= set(locations.OPTIONS), sorted(read - set(locations.OPTIONS))


def test_the_expectations_page_is_the_catalogs():
    from delivery_semantics.matrix import expectations_markdown

    page = (REPO / "docs" / "EXPECTATIONS.md").read_text()
    assert page == expectations_markdown(), "run: local/semantics report --expectations > docs/EXPECTATIONS.md"
