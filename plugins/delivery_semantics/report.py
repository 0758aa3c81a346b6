"""Reports: the matrix as a text table, and an HTML page with plots kept as an artifact.

local/semantics report [--runs R1,R2 ... | --matrix-run ID] [--html PATH]
"""

from __future__ import annotations

import base64
import html
import io
import os
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import psycopg2.extras

from delivery_semantics import catalog
from delivery_semantics.endpoints import ledger_database

MATRIX_COLUMNS = (
    "mode",
    "scenario",
    "run_id",
    "messages",
    "lost_acked",
    "lost_unacked",
    "duplicate_events",
    "aborted_visible",
    "torn_events",
    "inconsistent_offsets",
    "poll_skips",
    "nonmonotonic_polls",
    "stale_overwrites",
    "verdict",
    "broken_by",
    "expectation",
    "meets_expectation",
    "records_per_sec",
)


def query(sql: str, params=()) -> list[dict]:
    with (
        psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c,
        c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur,
    ):
        cur.execute(sql, params)
        return [dict(r) for r in cur.fetchall()]


# Rows in this order: producer modes, then consumer strategies; scenarios likewise.
ROW_ORDER = [*catalog.MODES, *catalog.STRATEGIES]
SCENARIO_ORDER = list(catalog.SCENARIOS)


def _ordered(rows: list[dict]) -> list[dict]:
    rank = {m: i for i, m in enumerate(ROW_ORDER)}
    srank = {s: i for i, s in enumerate(SCENARIO_ORDER)}
    return sorted(
        rows,
        key=lambda r: (rank.get(r["mode"], len(rank)), srank.get(r["scenario"], len(srank)), r["mode"], r["scenario"]),
    )


def matrix_rows(run_ids: list[str] | None = None) -> list[dict]:
    """The given runs (a matrix DAG run's), or else the latest run of every pair."""
    cols = ", ".join(MATRIX_COLUMNS)
    if run_ids:
        return _ordered(query(f"SELECT {cols} FROM v_run_results WHERE run_id = ANY(%s)", (run_ids,)))
    return _ordered(query(f"SELECT {cols} FROM v_latest_matrix"))


def matrix_text(rows: list[dict]) -> str:
    header = [
        "mode / strategy",
        "scenario",
        "lost acked",
        "lost unacked",
        "dup events",
        "aborted vis",
        "torn",
        "incons. offs",
        "poll skip/back",
        "stale",
        "verdict",
        "expected",
        "as expected",
    ]
    body = [
        [
            r["mode"],
            r["scenario"],
            str(r["lost_acked"]),
            str(r["lost_unacked"]),
            str(r["duplicate_events"]),
            str(r["aborted_visible"]),
            "-" if r["torn_events"] is None else str(r["torn_events"]),
            "-" if r["inconsistent_offsets"] is None else str(r["inconsistent_offsets"]),
            "-" if r["poll_skips"] is None else f"{r['poll_skips']}/{r['nonmonotonic_polls']}",
            "-" if r["stale_overwrites"] is None else str(r["stale_overwrites"]),
            r["verdict"] + (f" ({r['broken_by']})" if r["broken_by"] else ""),
            r["expectation"] or "-",
            {True: "yes", False: "NO", None: "-"}[r["meets_expectation"]],
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=False)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def latency_histogram(run_ids: list[str]) -> list[dict]:
    """Ack latency buckets (log2 ms) per mode, computed in PostgreSQL."""
    return query(
        """
        SELECT r.mode, greatest(0, floor(log(2, greatest(o.latency_us, 1) / 1000.0 + 1)))::int AS bucket, count(*) AS n
        FROM ledger_outcomes o JOIN runs r USING (run_id)
        WHERE o.run_id = ANY(%s) AND o.status IN ('acked', 'sent') AND o.latency_us IS NOT NULL
        GROUP BY 1, 2 ORDER BY 1, 2""",
        (run_ids,),
    )


def html_report(rows: list[dict], path: Path, title: str = "Delivery-semantics matrix") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mode_names = [m for m in ROW_ORDER if any(r["mode"] == m for r in rows)]
    scen_names = [s for s in SCENARIO_ORDER if any(r["scenario"] == s for r in rows)]
    by_pair = {(r["mode"], r["scenario"]): r for r in rows}
    images = []
    if rows:
        fig, ax = plt.subplots(figsize=(1.9 * max(3, len(scen_names)), 0.8 * max(3, len(mode_names)) + 1))
        colour = {"kept": 0.0, "broken": 1.0, "n/a": 0.5}
        grid = [
            [colour.get(by_pair[(m, s)]["verdict"], 0.5) if (m, s) in by_pair else float("nan") for s in scen_names]
            for m in mode_names
        ]
        ax.imshow(grid, cmap="RdYlGn_r", vmin=0, vmax=1, aspect="auto")
        for i, m in enumerate(mode_names):
            for j, s in enumerate(scen_names):
                r = by_pair.get((m, s))
                if r:
                    ax.text(
                        j,
                        i,
                        f"lost {r['lost_acked'] + r['lost_unacked']}\ndup {r['duplicate_events']}\n{r['verdict']}",
                        ha="center",
                        va="center",
                        fontsize=8,
                    )
        ax.set_xticks(range(len(scen_names)), scen_names, rotation=20)
        ax.set_yticks(range(len(mode_names)), mode_names)
        ax.set_title("verdict per mode x scenario (green kept, red broken)")
        images.append(("Matrix", _png(fig)))
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 3.5))
        labels = [f"{r['mode']}\n{r['scenario']}" for r in rows]
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r["lost_acked"] + r["lost_unacked"] for r in rows], 0.4, label="lost")
        ax.bar([x + 0.2 for x in xs], [r["duplicate_events"] for r in rows], 0.4, label="duplicated")
        ax.set_xticks(list(xs), labels, rotation=90, fontsize=7)
        ax.set_yscale("symlog")
        ax.legend()
        ax.set_title("lost and duplicated events per run")
        images.append(("Loss and duplicates", _png(fig)))
        plt.close(fig)

        hist = latency_histogram([r["run_id"] for r in rows])
        if hist:
            fig, ax = plt.subplots(figsize=(7, 3.5))
            for m in mode_names:
                pts = [(h["bucket"], h["n"]) for h in hist if h["mode"] == m]
                if pts:
                    ax.plot([2**b for b, _ in pts], [n for _, n in pts], marker="o", label=m)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("ack latency (ms, log2 buckets)")
            ax.set_ylabel("events")
            ax.legend(fontsize=7)
            ax.set_title("ack latency histogram")
            images.append(("Ack latency", _png(fig)))
            plt.close(fig)

    table_rows = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(str(r[c]) if r[c] is not None else '-')}</td>" for c in MATRIX_COLUMNS)
        + "</tr>"
        for r in rows
    )
    body = "".join(
        f"<h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{b}'>" for t, b in images
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px}}th{{background:#eee}}</style></head><body>
<h1>{html.escape(title)}</h1><p>Generated {generated}; {len(rows)} runs.</p>
<table><tr>{"".join(f"<th>{c}</th>" for c in MATRIX_COLUMNS)}</tr>{table_rows}</table>{body}</body></html>"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def reports_dir() -> Path:
    base = os.environ.get("SEMANTICS_REPORTS_DIR") or Path(__file__).resolve().parents[2] / "var" / "reports"
    return Path(base)


def matrix_run_ids(matrix_run: str) -> list[str]:
    """The producer and consumer runs of one semantics_matrix DAG run (its Airflow run id)."""
    return [
        r["run_id"]
        for r in query(
            "SELECT run_id FROM runs WHERE airflow_run_id LIKE %(p)s "
            "UNION ALL SELECT consumer_run_id FROM consumer_runs WHERE airflow_run_id LIKE %(p)s",
            {"p": f"semantics_matrix/{matrix_run}/%"},
        )
    ]


class BrokenPromise(RuntimeError):
    """An audit run whose mode's promise is broken: it fails the audit's check task, so Airflow's
    own alerting (on_failure_callback, notifiers) fires."""


def audit_verdict(reconciliation_id: str) -> dict:
    """An audit run's row of v_audit_results (at its mode's isolation level), printed; raises
    BrokenPromise when the verdict is broken."""
    rows = query("SELECT * FROM v_audit_results WHERE reconciliation_id = %s", (reconciliation_id,))
    if not rows:
        raise RuntimeError(f"no results for {reconciliation_id!r}: did the reconcile task run?")
    row = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in rows[0].items()}
    counts = ", ".join(
        f"{k}={row[k]}"
        for k in ("outbox_events", "records_read", "delivered_once", "lost_acked", "lost_unacked", "duplicate_events")
    )
    print(f"{row['audit']} {reconciliation_id}: {row['verdict']} ({counts})")
    if row["verdict"] == "broken":
        raise BrokenPromise(f"{row['audit']}: the {row['mode']} promise is broken by {row['broken_by']} ({counts})")
    return row


WINDOW_COUNTS = (
    "records_read",
    "outbox_due",
    "delivered",
    "lost_acked",
    "duplicate_events",
    "late",
    "unexpected",
    "pending_outbox",
    "pending_records",
    "sink_lost",
    "sink_duplicates",
    "stale_overwrites",
    "end_to_end_lost",
    "open_discrepancies",
)


def window_verdict(audit: str, window_end: str, max_open: int | None = None) -> dict:
    """A continuous audit window's row of audit_windows, printed; raises BrokenPromise when the
    mode's or the sink's promise is broken, or when more discrepancies are open than `max_open`.
    Pending events alone never fail it: they are not yet past the grace."""
    rows = query("SELECT * FROM audit_windows WHERE audit = %s AND window_end = %s::timestamptz", (audit, window_end))
    if not rows:
        raise RuntimeError(f"no window of {audit} ends at {window_end}: did the reconcile task run?")
    row = {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in rows[0].items()}
    counts = ", ".join(f"{k}={row[k]}" for k in WINDOW_COUNTS if row[k] is not None)
    print(f"{audit} window ending {row['window_end']}: {row['verdict']}, sink {row['sink_verdict'] or '-'} ({counts})")
    broken = []
    if row["verdict"] == "broken":
        broken.append(f"the {row['mode']} promise is broken by {row['broken_by']}")
    if row["sink_verdict"] == "broken":
        broken.append(f"the sink's {row['sink_strategy']} promise is broken by {row['sink_broken_by']}")
    if max_open is not None and row["open_discrepancies"] > max_open:
        broken.append(f"{row['open_discrepancies']} discrepancies are open (alerts.max_open_discrepancies {max_open})")
    if broken:
        raise BrokenPromise(f"{audit}, window ending {row['window_end']}: {'; '.join(broken)} ({counts})")
    return row
