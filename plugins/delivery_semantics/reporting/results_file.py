"""The results file: one JSON document per command that judges (`audit run`, `reconcile`,
`pipeline run`, `report --json`, and the DAGs' check tasks as an XCom), in the versioned schema
`results.schema.json` that ships with the package, and the exit code the same judgement gives.

Exit codes, the same for every command that judges (docs/OPERATIONS.md):
0 every promise kept; 1 a promise broken, or a kind named in --fail-on seen; 2 bad input; 75 transient.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from delivery_semantics import catalog, locations

# A continuous audit's window is judged under the audit scenario (audits.AUDIT_SCENARIO), as a batch
# audit's summary says.
AUDIT_SCENARIO = "audit"
SCHEMA = "delivery-semantics/results"
VERSION = 1
KEPT, BROKEN_PROMISE, BAD_INPUT, TRANSIENT = 0, 1, 2, 75
# Summary fields that are numbers and no count.
_NOT_COUNTS = frozenset({"grace_seconds", "dedup_horizon_seconds", "loss_rate", "duplicate_rate"})
# What each subject's rows are keyed by in the results database (docs/SQL.md).
_ROWS = {
    "run": ("v_run_results", "reconcile_summary", "reconcile_discrepancies"),
    "audit": ("v_audit_results", "reconcile_summary", "reconcile_discrepancies"),
    "window": ("v_audit_window_kinds", "audit_windows", "audit_discrepancies"),
    "pipeline": ("v_pipeline_matrix", "pipeline_runs", "audit_discrepancies"),
}


class ResultsFileError(ValueError):
    """An --output or --fail-on that cannot be honoured; refused before anything runs."""


def schema() -> dict:
    return json.loads(locations.package_text("reporting", "results.schema.json"))


def kind_columns(kind: str) -> set[str]:
    """The count fields of a catalog kind: its summary column and its window columns."""
    k = catalog.KINDS.get(kind)
    if k is None:
        raise ResultsFileError(f"--fail-on {kind!r}: not a kind; one of {', '.join(sorted(catalog.KINDS))}")
    return {c for c in (k.summary, *k.windows.values()) if c}


def check_output(path: str | None) -> Path | None:
    """The results file's path, refused in one line when its folder does not exist or it is a folder."""
    if path is None:
        return None
    p = Path(path)
    if p.is_dir() or not p.parent.is_dir():
        raise ResultsFileError(f"--output {path}: not a file in an existing folder")
    return p


def subject_of(s: dict) -> str:
    """What a checker's summary judges: a continuous audit's window, a batch audit, or a platform run."""
    return "window" if s.get("window_end") else "audit" if s.get("audit") else "run"


def _subject(s: dict, subject: str) -> dict:
    name = s.get("audit") if subject in ("audit", "window") else s.get("run_id") or s.get("reconciliation_id")
    return {"kind": subject, "name": name, "judged_as": s.get("judged_as") or s.get("mode") or s.get("pipeline")}


def _counts(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in _NOT_COUNTS and (v is None or type(v) is int) and _is_count(k)}


def _is_count(key: str) -> bool:
    return not key.endswith(("_id", "_at", "_ms", "_seconds", "_offsets")) and key not in ("window_end", "window_start")


def result(s: dict, subject: str) -> dict:
    """One judged result of a summary row (a run's or audit's isolation level, a window, a pipeline run)."""
    view, summary_table, discrepancies = _ROWS[subject]
    key = (
        {"audit": s.get("audit"), "window_end": s.get("window_end")}
        if subject == "window"
        else {"reconciliation_id": s.get("reconciliation_id")}
        if s.get("reconciliation_id")
        else {"run_id": s.get("run_id")}
    )
    sink = None
    if s.get("sink_verdict") is not None:
        sink = {
            "table": s.get("sink_table"),
            "strategy": s.get("sink_strategy"),
            "promise": s.get("sink_promise"),
            "verdict": s["sink_verdict"],
            "broken_by": _list(s.get("sink_broken_by")),
        }
    return {
        "subject": _subject(s, subject),
        "topic": s.get("topic"),
        "scenario": s.get("scenario") or (AUDIT_SCENARIO if subject == "window" else None),
        "window": {"start": s.get("window_start"), "end": s["window_end"]} if subject == "window" else None,
        "isolation": s.get("isolation"),
        "reconciliation_id": s.get("reconciliation_id"),
        "counts": _counts(s),
        "promise": s.get("promise"),
        "verdict": s.get("verdict") or "n/a",
        "broken_by": _list(s.get("broken_by")),
        "expectation": s.get("expectation"),
        "meets_expectation": s.get("meets_expectation"),
        "sink": sink,
        "rows": {"view": view, "summary": summary_table, "discrepancies": discrepancies, "key": key},
    }


def _list(text: str | None) -> list[str]:
    return [x for x in (text or "").split(",") if x]


def _seen(r: dict, fail_on: Iterable[str]) -> list[str]:
    return [k for k in fail_on if any((r["counts"].get(c) or 0) > 0 for c in kind_columns(k))]


def document(command: str, results: list[dict], fail_on: Iterable[str] = ()) -> dict:
    """The whole document: its results, the kinds named in --fail-on that were seen, its verdict and
    the exit code they give."""
    fail_on = list(fail_on)
    broken = [r for r in results if r["verdict"] == "broken" or (r["sink"] or {}).get("verdict") == "broken"]
    seen = sorted({k for r in results for k in _seen(r, fail_on)})
    verdict = "broken" if broken else ("kept" if any(r["verdict"] == "kept" for r in results) else "n/a")
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "command": command,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "verdict": verdict,
        "fail_on": fail_on,
        "fail_on_seen": seen,
        "exit_code": BROKEN_PROMISE if broken or seen else KEPT,
        "results": results,
    }


def write(path: Path | None, doc: dict) -> None:
    """The document at `path`, whole or not at all (written beside it, then renamed)."""
    if path is None:
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")
    os.replace(tmp, path)
