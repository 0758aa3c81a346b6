"""Reports: the matrix as a text table, and an HTML page with plots kept as an artifact.

local/semantics report [--runs R1,R2 ... | --matrix-run ID] [--html PATH]
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jinja2
import psycopg2
import psycopg2.extras

from delivery_semantics import catalog, modes
from delivery_semantics.plumbing.db import query  # report.query: the name the reports' readers know

MATRIX_COLUMNS = (
    "mode",
    "client",
    "scenario",
    "run_id",
    "messages",
    *catalog.summary_columns(in_matrix=True),
    "verdict",
    "broken_by",
    "broken_settings",
    "settings",
    "expectation",
    "meets_expectation",
    "records_per_sec",
)


# Rows in this order: producer modes, then consumer strategies; scenarios likewise.
ROW_ORDER = [*catalog.MODES, *catalog.STRATEGIES]
SCENARIO_ORDER = list(catalog.SCENARIOS)


def row_label(r: dict) -> str:
    """A matrix row: the mode or strategy, and the client when it is not the default one, so that
    one mode's clients sit side by side."""
    client = r.get("client") or catalog.DEFAULT_CLIENT
    return r["mode"] if client == catalog.DEFAULT_CLIENT else f"{r['mode']} ({client})"


def _ordered(rows: list[dict]) -> list[dict]:
    rank = {m: i for i, m in enumerate(ROW_ORDER)}
    crank = {c: i for i, c in enumerate(catalog.CLIENTS)}
    srank = {s: i for i, s in enumerate(SCENARIO_ORDER)}
    return sorted(
        rows,
        key=lambda r: (
            rank.get(r["mode"], len(rank)),
            r["mode"],
            crank.get(r.get("client"), 0),
            srank.get(r["scenario"], len(srank)),
            r["scenario"],
        ),
    )


def matrix_rows(run_ids: list[str] | None = None) -> list[dict]:
    """The given runs (a matrix DAG run's), or else the latest run of every pair."""
    cols = ", ".join(MATRIX_COLUMNS)
    if run_ids:
        return _ordered(query(f"SELECT {cols} FROM v_run_results WHERE run_id = ANY(%s)", (run_ids,)))
    return _ordered(query(f"SELECT {cols} FROM v_latest_matrix"))


def matrix_text(rows: list[dict]) -> str:
    kinds = catalog.matrix_columns()
    header = ["mode / strategy", "scenario", *kinds, "verdict", "expected", "as expected"]
    body = [
        [
            row_label(r),
            r["scenario"],
            *(_counts(r, columns) for columns in kinds.values()),
            verdict_text(r),
            r["expectation"] or "-",
            {True: "yes", False: "NO", None: "-"}[r["meets_expectation"]],
        ]
        for r in rows
    ]
    return text_table(header, body)


def _counts(r: dict, columns: tuple[str, ...]) -> str:
    """A kind column's cell: its count, or a/b for two kinds that share it; "-" where not checked."""
    values = [r[c] for c in columns]
    return "-" if None in values else "/".join(map(str, values))


def text_table(header: list[str], body: list[list[str]]) -> str:
    """Columns padded to their widest cell, a rule under the header."""
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=False)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def verdict_text(r: dict) -> str:
    """The verdict, the kinds that broke it, and the settings that contradict what they broke."""
    text = r["verdict"] + (f" ({r['broken_by']})" if r["broken_by"] else "")
    return text + (f" by {r['broken_settings']}" if r.get("broken_settings") else "")


# What a run showed, as the source articles' comparison tables put it: nothing, duplicates, loss,
# or both. Each has its colour in the matrix grid.
OBSERVED_COLOURS = {"clean": "#cdeccd", "duplicates": "#fde2a6", "loss": "#f7b9b3", "both": "#d9b8e8"}
VERDICT_MARKS = {"kept": "\u2713 kept", "broken": "\u2717 broken", "n/a": "\u2013"}


def observed(r: dict) -> str:
    counts = catalog.Counts.from_summary(r)
    return {(False, False): "clean", (False, True): "duplicates", (True, False): "loss"}.get(
        (counts.losses() > 0, counts.of("duplicate") > 0), "both"
    )


def grid_view(rows: list[dict], run_link: str | None = None) -> dict:
    """The grid's cells: modes and strategies down, scenarios across; each cell coloured by what
    its run showed, with its counts and its verdict's mark, and the expectation (DESIGN.md §3) as
    its tooltip; a run that did not show what was expected is outlined. `run_link` (a format with
    {run_id}) links each cell to its run's page."""
    labels = list(dict.fromkeys(row_label(r) for r in _ordered(rows)))
    scenarios = [s for s in SCENARIO_ORDER if any(r["scenario"] == s for r in rows)]
    by_pair = {(row_label(r), r["scenario"]): r for r in rows}

    def cell(r: dict | None) -> dict | None:
        if r is None:
            return None
        seen = observed(r)
        tip = f"expected: {r['expectation'] or '-'}; observed: {seen}; verdict: {r['verdict']}"
        return {
            "observed": seen,
            "colour": OBSERVED_COLOURS[seen],
            "tip": tip + verdict_text(r).removeprefix(r["verdict"]),
            "lost": catalog.Counts.from_summary(r).losses(),
            "dup": r["duplicate_events"],
            "mark": VERDICT_MARKS.get(r["verdict"], r["verdict"] or "-"),
            "href": run_link.format(run_id=r["run_id"]) if run_link else None,
            "unexpected": r["meets_expectation"] is False,
        }

    return {
        "colours": OBSERVED_COLOURS,
        "scenarios": scenarios,
        "rows": [(m, [cell(by_pair.get((m, s))) for s in scenarios]) for m in labels],
    }


def matrix_grid_html(rows: list[dict], run_link: str | None = None) -> str:
    return render("grid.html", grid=grid_view(rows, run_link))


# The HTML report and the Airflow UI page render from the same templates (templates/), with
# autoescaping: every value from the ledger or a user is escaped.
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("delivery_semantics.reporting", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def render(template: str, **context) -> str:
    return _TEMPLATES.get_template(template).render(**context)


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


# A fault and the step that ends it: drawn as a band between the two.
NEMESIS_SPANS = {
    "pause": "resume",
    "drop_responses": "restore_responses",
    "kill": "restart",
    "stop": "restart",
    "partition": "heal_partition",
    "kill_worker": "start_worker",
    "stop_worker": "start_worker",
}


def run_timeline(run_id: str) -> dict:
    """What a run's timeline plot shows, from the ledger and the checker's results: events
    produced per second, ack latency per second (p50 and max), the nemesis steps, and the publish
    times of the events lost and duplicated at the run's own isolation level."""
    run = query("SELECT run_id, mode, scenario, timeline, definition FROM runs WHERE run_id = %s", (run_id,))
    if not run:
        return {}
    # The run's own isolation level: the one its definition recorded (its mode file may be gone).
    mode = modes.judged(run[0]["mode"])
    isolation = (run[0]["definition"] or {}).get("isolation") or (mode.isolation if mode else catalog.READ_COMMITTED)
    events = """SELECT publish_at, n_hi - n_lo AS events FROM ledger_event_ranges WHERE run_id = %(r)s
                UNION ALL SELECT publish_at, 1 FROM ledger_event_rows WHERE run_id = %(r)s"""
    [span] = query(
        f"SELECT extract(epoch FROM max(publish_at) - min(publish_at)) AS s FROM ({events}) AS e", {"r": run_id}
    )
    # About 60 bins over the run, a second at most and a tenth of one at least.
    step = min(1.0, max(0.1, round(float(span["s"] or 0) / 60, 1)))
    binned = {"r": run_id, "step": f"{step} seconds"}
    produced = query(
        f"""SELECT date_bin(%(step)s::interval, publish_at, 'epoch') AS t, sum(events)::float8 / {step} AS n
            FROM ({events}) AS e GROUP BY 1 ORDER BY 1""",
        binned,
    )
    latency = query(
        """SELECT date_bin(%(step)s::interval, b.recorded_at, 'epoch') AS t,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY l) / 1000.0 AS p50_ms, max(l) / 1000.0 AS max_ms
           FROM ledger_batches b, unnest(b.latencies_us) AS l
           WHERE b.run_id = %(r)s AND b.status IN ('acked', 'sent') GROUP BY 1 ORDER BY 1""",
        binned,
    )
    marked = query(
        """SELECT d.kind, e.publish_at FROM reconcile_discrepancies d
           JOIN ledger_events e ON e.run_id = %(r)s AND e.event_id = d.event_id
           WHERE d.reconciliation_id = %(r)s AND d.isolation = %(iso)s
             AND d.kind IN ('lost_acked', 'lost_unacked', 'duplicate')""",
        {"r": run_id, "iso": isolation},
    )
    return {
        "run": run[0],
        "produced": produced,
        "latency": latency,
        "nemesis": ((run[0]["timeline"] or {}).get("events") or []),
        "lost": [m["publish_at"] for m in marked if m["kind"] in catalog.LOSSES],
        "duplicated": [m["publish_at"] for m in marked if m["kind"] == "duplicate"],
    }


def timeline_png(data: dict) -> str | None:
    """A run's timeline as Jepsen draws one: produce rate and ack latency over time, the nemesis's
    faults as bands (single steps as lines), each lost or duplicated event marked where it was
    produced. A base64 PNG, or None for a run with nothing recorded."""
    if not data or not data["produced"]:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = data["produced"][0]["t"]

    def at(when) -> float:
        if isinstance(when, str):
            when = datetime.fromisoformat(when)
        return (when - t0).total_seconds()

    fig, (rate, lat) = plt.subplots(2, 1, sharex=True, figsize=(9, 4.2), height_ratios=(3, 2))
    rate.step(
        [at(p["t"]) for p in data["produced"]],
        [p["n"] for p in data["produced"]],
        where="post",
        marker=".",
        label="produced/s",
    )
    what = data.get("latency_of", "ack")
    if data["latency"]:
        xs = [at(p["t"]) for p in data["latency"]]
        lat.plot(xs, [p["p50_ms"] for p in data["latency"]], marker=".", label=f"{what} p50")
        lat.plot(xs, [p["max_ms"] for p in data["latency"]], marker=".", label=f"{what} max", alpha=0.6)
        lat.set_yscale("log")
    lat.set_ylabel("ms")
    lat.set_xlabel("seconds since the first event")
    rate.set_ylabel("events/s")
    top = max(p["n"] for p in data["produced"])
    for times, colour, label in ((data["lost"], "red", "lost"), (data["duplicated"], "orange", "duplicated")):
        if times:
            xs = [at(x) for x in times]
            rate.plot(xs, [top * 1.05] * len(xs), "|", color=colour, markersize=10, label=f"{label} ({len(xs)})")
    opened: dict[tuple, float] = {}
    labels: dict[float, list[str]] = {}  # steps at one time share one label
    for step in data["nemesis"]:
        action, x, target = step["action"], at(step["at"]), step.get("broker") or step.get("worker")
        began = next((k for k in opened if k[1] == target and NEMESIS_SPANS[k[0]] == action), None)
        if action in NEMESIS_SPANS:
            opened[(action, target)] = x
        elif began is not None:
            start = opened.pop(began)
            for ax in (rate, lat):
                ax.axvspan(start, x, color="grey", alpha=0.18)
            labels.setdefault(round(start, 1), []).append(f"{began[0]} {target or ''}".strip())
        elif action not in ("healthy_before", "healthy", "heal"):
            for ax in (rate, lat):
                ax.axvline(x, color="purple", linestyle="--", linewidth=1)
            labels.setdefault(round(x, 1), []).append(action)
    for x, names in labels.items():
        rate.text(x, top * 1.12, ", ".join(names), fontsize=7)
    run = data["run"]
    rate.set_title(f"{run['mode']} x {run['scenario']} ({run['run_id']})", fontsize=9)
    rate.set_ylim(0, top * 1.25)
    rate.legend(fontsize=7, loc="lower right")
    if data["latency"]:
        lat.legend(fontsize=7, loc="upper right")
    png = _png(fig)
    plt.close(fig)
    return png


# --------------------------------------------------------------------------- connector pipelines

PIPELINE_COLUMNS = (
    "pipeline",
    "scenario",
    "run_id",
    "outbox_rows",
    "records_read",
    "duplicate_events",
    "lost",
    "late",
    "sink_rows",
    "sink_duplicates",
    "sink_lost",
    "end_to_end_lost",
    "throughput_eps",
    "latency_p50_ms",
    "latency_p99_ms",
    "verdict",
    "broken_by",
    "sink_verdict",
    "expectation",
    "meets_expectation",
)


def pipeline_rows(run_ids: list[str] | None = None, matrix_run: str | None = None) -> list[dict]:
    """Pipeline runs: the given ones, a matrix DAG run's, or else the latest of every pair."""
    cols = ", ".join(PIPELINE_COLUMNS)
    if run_ids is not None:
        rows = query(f"SELECT {cols} FROM pipeline_runs WHERE run_id = ANY(%s) AND status = 'reconciled'", (run_ids,))
    elif matrix_run is not None:
        rows = query(
            f"SELECT {cols} FROM pipeline_runs WHERE airflow_run_id LIKE %s AND status = 'reconciled'",
            (f"semantics_matrix/{matrix_run}/%",),
        )
    else:
        rows = query(f"SELECT {cols} FROM v_pipeline_matrix")
    prank = {p: i for i, p in enumerate(catalog.PIPELINES)}
    srank = {s: i for i, s in enumerate(catalog.PIPELINE_SCENARIOS)}
    return sorted(rows, key=lambda r: (prank.get(r["pipeline"], 99), srank.get(r["scenario"], 99), r["run_id"]))


def pipeline_text(rows: list[dict]) -> str:
    header = ["pipeline", "scenario", "outbox", "dup events", "lost", "sink dup", "sink lost", "e2e lost"]
    header += ["events/s", "p50 ms", "p99 ms", "verdict", "expected", "as expected"]
    body = [
        [
            r["pipeline"],
            r["scenario"],
            str(r["outbox_rows"]),
            str(r["duplicate_events"]),
            str(r["lost"]),
            str(r["sink_duplicates"]),
            str(r["sink_lost"]),
            str(r["end_to_end_lost"]),
            "-" if r["throughput_eps"] is None else f"{r['throughput_eps']:.0f}",
            "-" if r["latency_p50_ms"] is None else f"{r['latency_p50_ms']:.0f}",
            "-" if r["latency_p99_ms"] is None else f"{r['latency_p99_ms']:.0f}",
            verdict_text(r),
            r["expectation"] or "-",
            {True: "yes", False: "NO", None: "-"}[r["meets_expectation"]],
        ]
        for r in rows
    ]
    return text_table(header, body)


def pipeline_timeline(run_id: str) -> dict:
    """A pipeline run's timeline, drawn like a producer run's: outbox rows written per second,
    end-to-end latency per second (outbox created_at to the first sink apply), the nemesis's steps,
    and the rows the audit found lost or duplicated, where they were written."""
    from delivery_semantics.plumbing.endpoints import database

    run = query(
        "SELECT run_id, pipeline AS mode, scenario, timeline, outbox_table, sink_table, audit "
        "FROM pipeline_runs WHERE run_id = %s",
        (run_id,),
    )
    if not run:
        return {}
    r = run[0]
    with psycopg2.connect(**database(catalog.PIPELINE_CONNECTIONS["outbox"]).psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(f"SELECT id::text, created_at FROM {_identifier(r['outbox_table'])}")
        created = dict(cur.fetchall())
    with psycopg2.connect(**database(catalog.PIPELINE_CONNECTIONS["sink"]).psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(f"SELECT event_id, min(applied_at) FROM {_identifier(r['sink_table'])} GROUP BY 1")
        applied = dict(cur.fetchall())
    if not created:
        return {}
    t0 = min(created.values())
    step = min(1.0, max(0.1, round((max(created.values()) - t0).total_seconds() / 60, 1)))
    bins: dict[float, list] = {}
    for e, t in created.items():
        b = bins.setdefault(((t - t0).total_seconds() // step) * step, [0, []])
        b[0] += 1
        if e in applied:
            b[1].append((applied[e] - t).total_seconds() * 1000)
    at = lambda k: t0 + timedelta(seconds=k)
    marked = query(
        "SELECT kind, event_id FROM audit_discrepancies WHERE audit = %s AND stage = 'outbox_topic' "
        "AND kind IN ('lost_acked', 'duplicate')",
        (r["audit"],),
    )
    return {
        "run": r,
        "latency_of": "end-to-end",
        "produced": [{"t": at(k), "n": n / step} for k, (n, _) in sorted(bins.items())],
        "latency": [
            {"t": at(k), "p50_ms": sorted(ls)[len(ls) // 2], "max_ms": max(ls)}
            for k, (_, ls) in sorted(bins.items())
            if ls
        ],
        "nemesis": ((r["timeline"] or {}).get("events") or []),
        "lost": [created[m["event_id"]] for m in marked if m["kind"] == "lost_acked" and m["event_id"] in created],
        "duplicated": [created[m["event_id"]] for m in marked if m["kind"] == "duplicate" and m["event_id"] in created],
    }


def _identifier(name: str) -> str:
    """A table the platform named itself (pipeline.Names), checked all the same."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"{name!r} is not a pipeline table")
    return f'"{name}"'


TREND_DAYS = 30


def trend_points(days: int = TREND_DAYS) -> dict[str, list[dict]]:
    """The trend plots' points over the last `days` days: every reconciled run, as its mode (or
    strategy, or pipeline) x scenario, and every check of an audit, batch or window (a pipeline
    run's own audit is its run's point)."""
    runs = query(
        """SELECT mode AS subject, scenario AS series, created_at AS at, loss_rate, duplicate_rate
           FROM v_run_results WHERE created_at > now() - make_interval(days => %(d)s)
           UNION ALL
           SELECT pipeline, scenario, created_at, lost::float8 / greatest(outbox_rows, 1),
                  duplicate_copies::float8 / greatest(outbox_rows, 1)
           FROM pipeline_runs WHERE status = 'reconciled' AND created_at > now() - make_interval(days => %(d)s)
           ORDER BY 3""",
        {"d": days},
    )
    audits = query(
        """SELECT audit AS subject, source AS series, at, loss_rate, duplicate_rate
           FROM v_audit_trends WHERE at > now() - make_interval(days => %s)
             AND audit NOT IN (SELECT audit FROM pipeline_runs) ORDER BY at""",
        (days,),
    )
    return {"runs": runs, "audits": audits}


def trend_series(points: list[dict]) -> dict[str, dict[str, list[tuple]]]:
    """{subject: {series: [(at, loss_rate, duplicate_rate), ...]}}: modes and strategies in the
    catalog's order, then any other subject (an audit) by name; series in the scenarios' order."""
    rank = {m: i for i, m in enumerate(ROW_ORDER)}
    srank = {s: i for i, s in enumerate(SCENARIO_ORDER)}
    out: dict[str, dict[str, list[tuple]]] = {}
    for p in sorted(points, key=lambda p: p["at"]):
        out.setdefault(p["subject"], {}).setdefault(p["series"], []).append(
            (p["at"], p["loss_rate"], p["duplicate_rate"])
        )
    return {
        subject: dict(sorted(out[subject].items(), key=lambda kv: (srank.get(kv[0], len(srank)), kv[0])))
        for subject in sorted(out, key=lambda m: (rank.get(m, len(rank)), m))
    }


def trends_png(points: list[dict]) -> str | None:
    """Loss and duplicate rates over time: a row of two panels per subject, a line per series. A
    base64 PNG, or None with no points."""
    series = trend_series(points)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    fig, axes = plt.subplots(len(series), 2, figsize=(11, 2.0 * len(series)), squeeze=False, sharex=True)
    for (subject, lines), (loss, dup) in zip(series.items(), axes, strict=True):
        for name, pts in lines.items():
            xs = [p[0] for p in pts]
            loss.plot(xs, [p[1] for p in pts], marker=".", label=name)
            dup.plot(xs, [p[2] for p in pts], marker=".", label=name)
        loss.set_title(f"{subject}: loss rate (lost / events)", loc="left", fontsize=8)
        dup.set_title("duplicate rate (extra copies / events)", loc="left", fontsize=8)
        for ax in (loss, dup):
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(bottom=0, top=max(0.01, ax.get_ylim()[1]))
            ax.tick_params(labelsize=7)
        dup.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    times = [p[0] for lines in series.values() for pts in lines.values() for p in pts]
    if max(times) - min(times) < timedelta(hours=1):  # a lone point would get years either side
        axes[0][0].set_xlim(min(times) - timedelta(minutes=30), max(times) + timedelta(minutes=30))
    fig.autofmt_xdate()
    png = _png(fig)
    plt.close(fig)
    return png


def trends_view(days: int = TREND_DAYS) -> dict:
    """The trends section of the report and the UI page: runs, then audits."""
    points = trend_points(days)
    plots = [
        (title, key, trends_png(points[key]))
        for title, key in (("Runs, per mode or strategy and scenario", "runs"), ("Audits, per check", "audits"))
    ]
    return {"days": days, "plots": plots}


# Where the Airflow UI page is mounted (delivery_semantics.entry.airflow_plugin): a failed audit check names
# the page that lists its events.
UI_PREFIX = "/semantics"
MAX_LISTED = 500  # event ids listed per audit


def audit_page(audit: str) -> str:
    return f"{UI_PREFIX}/audits/{audit}"


def audits_view() -> list[dict]:
    """Each audit's latest check, for the Audits section: a continuous audit's latest window (its
    verdicts, what is open and what is pending), else a batch audit's latest run."""
    windows = query(
        """SELECT DISTINCT ON (audit) audit, window_end AS at, verdict, broken_by, sink_verdict, sink_broken_by,
                  open_discrepancies, pending_outbox, pending_records, records_read, malformed, outbox_due,
                  delivered
           FROM audit_windows
           -- a pipeline run's audit shows in the pipeline block
           WHERE audit NOT IN (SELECT audit FROM pipeline_runs)
           ORDER BY audit, window_end DESC"""
    )
    windowed = {w["audit"] for w in windows}
    runs = [
        {**r, "open_discrepancies": None, "pending_outbox": None, "pending_records": None}
        for r in query(
            """SELECT DISTINCT ON (audit) audit, reconciled_at AS at, reconciliation_id, verdict, broken_by,
                      NULL AS sink_verdict, NULL AS sink_broken_by, records_read, malformed,
                      outbox_events AS outbox_due, delivered_once AS delivered
               FROM v_audit_results ORDER BY audit, reconciled_at DESC"""
        )
        if r["audit"] not in windowed
    ]
    found = [{**a, "windowed": "reconciliation_id" not in a} for a in windows + runs]
    return sorted(found, key=lambda a: a["audit"])


def audit_discrepancies(audit: str, latest: dict | None = None) -> tuple[dict | None, list[dict]]:
    """An audit's latest check (`latest`, a row of audits_view, when the caller has it) and the
    event ids behind it: for a continuous audit, its latest window's discrepancies and every loss
    still open from an earlier window, each with the window that raised it; for a batch audit,
    its latest run's, at its mode's isolation level."""
    if latest is None:
        latest = next((a for a in audits_view() if a["audit"] == audit), None)
    if latest is None:
        return None, []
    if latest["windowed"]:
        rows = query(
            """SELECT d.window_end, d.stage, d.kind, d.event_id, d.copies, d."partitions", d."offsets", d.occurred_at
               FROM audit_discrepancies d
               WHERE d.audit = %(a)s AND (d.window_end = %(t)s OR (d.window_end, d.stage, d.kind, d.event_id) IN (
                   SELECT l.lost_in_window, l.stage, l.kind, l.event_id FROM v_audit_losses l
                   WHERE l.audit = %(a)s AND l.resolved_in_window IS NULL))
               ORDER BY d.stage, d.kind, d.window_end, d.event_id LIMIT %(n)s""",
            {"a": audit, "t": latest["at"], "n": MAX_LISTED},
        )
    else:
        rows = query(
            """SELECT NULL AS window_end, d.isolation AS stage, d.kind, d.event_id, d.copies, d."partitions",
                      d."offsets", NULL AS occurred_at
               FROM reconcile_discrepancies d JOIN v_audit_results r
                 ON r.reconciliation_id = d.reconciliation_id AND r.isolation = d.isolation
               WHERE d.reconciliation_id = %s ORDER BY d.kind, d.event_id LIMIT %s""",
            (latest["reconciliation_id"], MAX_LISTED),
        )
    return latest, rows


# An audit's own page in the UI (reporting/ui.py), which shows its event ids to those who may read its DAG.
AUDIT_PAGE = "/semantics/audits/{audit}"


def html_report(
    rows: list[dict], path: Path, title: str = "Delivery-semantics matrix", pipelines: list[dict] | None = None
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mode_names = [m for m in ROW_ORDER if any(r["mode"] == m for r in rows)]
    images = []
    if rows:
        fig, ax = plt.subplots(figsize=(max(6, 0.45 * len(rows)), 3.5))
        labels = [f"{r['mode']}\n{r['scenario']}" for r in rows]
        xs = range(len(rows))
        counts = [catalog.Counts.from_summary(r) for r in rows]
        ax.bar([x - 0.2 for x in xs], [c.losses() for c in counts], 0.4, label="lost")
        ax.bar([x + 0.2 for x in xs], [c.of("duplicate") for c in counts], 0.4, label="duplicated")
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

    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = render(
        "matrix.html",
        title=title,
        intro=f"Generated {generated}; {len(rows)} runs"
        + (f" and {len(pipelines)} pipeline runs." if pipelines else "."),
        rows=rows,
        grid=grid_view(rows),
        columns=MATRIX_COLUMNS,
        run_link="#{run_id}",
        images=images,
        timelines=[(r, png) for r in rows if (png := timeline_png(run_timeline(r["run_id"])))],
        trends=trends_view(),
        # A report is written for whoever runs it: an audit's event ids are its team's, shown only on
        # the audit's own page to those who may read its DAG.
        audits=[(a, None) for a in audits_view()],
        audit_link=AUDIT_PAGE,
        pipelines=pipelines or [],
        pipeline_columns=PIPELINE_COLUMNS,
        pipeline_timelines=[(r, png) for r in pipelines or [] if (png := timeline_png(pipeline_timeline(r["run_id"])))],
        proofs=proof_rows(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


# --------------------------------------------------------------------------- predict, then prove


def proof_rows() -> list[dict]:
    """The newest proof of each subject and given settings (v_latest_proofs), a row a finding,
    with its settings as text."""
    rows = query("SELECT * FROM v_latest_proofs ORDER BY subject, client NULLS FIRST, given::text, made_at, rule")
    for r in rows:
        r["given_text"] = ", ".join(f"{f}.{k}={v}" for f, s in r["given"].items() for k, v in s.items())
        r["settings_text"] = ", ".join(f"{k}={v}" for k, v in r["settings"].items())
    return rows


def proof_text(rows: list[dict]) -> str:
    header = ["subject", "given", "finding", "predicted", "scenario", "run", "observed", "confirmed"]
    body = [
        [
            r["subject"],
            r["given_text"] or "-",
            r["rule"],
            r["predicted"],
            r["scenario"] or "-",
            r["run_id"] or "-",
            "-" if r["observed"] is None else str(r["observed"]),
            {True: "yes", False: "NO"}.get(r["confirmed"], "-"),
        ]
        for r in rows
    ]
    return text_table(header, body)


def calibration_markdown() -> str:
    """Each rule of the catalog beside its newest proof (v_rule_calibration): its finding, the run
    that proved it or did not, the count seen there, and when; a rule no proof has run yet says so."""
    from delivery_semantics import rule_catalog

    proved = {r["rule"]: r for r in query("SELECT * FROM v_rule_calibration")}
    lines = [
        "| rule | finding | proved on | run | seen | confirmed | of all its proofs | last proven |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rule in rule_catalog.RULES:
        finding = f"{rule.kind} under {' or '.join(rule.scenarios)} ({rule.guarantee})"
        r = proved.get(rule.name)
        if r is None:
            lines.append(f"| `{rule.name}` | {finding} | not proven yet | - | - | - | - | - |")
            continue
        given = ", ".join(f"{f}.{k}={v}" for f, kv in r["given"].items() for k, v in kv.items())
        subject = f"{r['subject']}" + (f" ({r['client']})" if r["client"] else "") + (f", {given}" if given else "")
        confirmed = {True: "yes", False: "**NO**"}.get(r["confirmed"], "-")
        made = r["made_at"].strftime("%Y-%m-%d")
        lines.append(
            f"| `{rule.name}` | {finding} | {subject} x {r['scenario']} | `{r['run_id']}` | {r['observed']} "
            f"| {confirmed} | {r['confirmations']} of {r['proofs']} | {made} |"
        )
    return "\n".join(lines) + "\n"


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


def mapping_line(audit: str, row: dict) -> str | None:
    """The audit's mapping_suspect line (audits.mapping_suspect) for one of its results, when its
    file is among the audits."""
    from delivery_semantics.audit import audits

    try:
        found = audits.load(audit)
    except audits.AuditError:
        return None
    return audits.mapping_suspect(found, row.get("records_read"), row.get("malformed"))


class BrokenPromise(RuntimeError):
    """An audit run whose mode's promise is broken: it fails the audit's check task, so Airflow's
    own alerting (on_failure_callback, notifiers) fires."""


def audit_verdict(reconciliation_id: str, record: Callable[[dict], None] | None = None) -> dict:
    """An audit run's row of v_audit_results (at its mode's isolation level), printed and handed to
    `record` (the results file); raises BrokenPromise when the verdict is broken."""
    row = audit_row(reconciliation_id)
    if row is None:
        raise RuntimeError(f"no results for {reconciliation_id!r}: did the reconcile task run?")
    if record:
        record(row)
    counts = ", ".join(
        f"{k}={row[k]}"
        for k in ("outbox_events", "records_read", "delivered_once", "lost_acked", "lost_unacked", "duplicate_events")
    )
    print(f"{row['audit']} {reconciliation_id}: {row['verdict']} ({counts})")
    suspect = mapping_line(row["audit"], row)
    broken = [f"the {row['mode']} promise is broken by {row['broken_by']}"] if row["verdict"] == "broken" else []
    if suspect:
        print(f"mapping_suspect: {suspect}")
        broken.append(f"mapping_suspect: {suspect}")
    if broken:
        raise BrokenPromise(
            f"{row['audit']}: {'; '.join(broken)} ({counts}); the events: {audit_page(row['audit'])} on the Airflow UI"
        )
    return row


def mode_verdict(run_ids: list[str], record: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """A mode's runs (its DAG's, one per scenario), each printed with its settings and findings, and
    handed to `record` (the results file); raises BrokenPromise naming every broken run and the
    settings that contradict what broke."""
    rows = _ordered(
        query(f"SELECT {', '.join(MATRIX_COLUMNS)}, findings FROM v_run_results WHERE run_id = ANY(%s)", (run_ids,))
    )
    missing = set(run_ids) - {r["run_id"] for r in rows}
    if missing:
        raise RuntimeError(f"no results for {', '.join(sorted(missing))}: did the reconcile task run?")
    if record:
        record(rows)
    broken = []
    for r in rows:
        counts = f"lost acked {r['lost_acked']}, lost unacked {r['lost_unacked']}, duplicates {r['duplicate_events']}"
        print(
            f"{row_label(r)} x {r['scenario']} ({r['run_id']}): {verdict_text(r)}; {counts}; settings {r['settings']}"
        )
        for f in r["findings"] or []:
            print(f"  finding: {f['setting']} contradicts {f['guarantee']}: {f['why']}")
        if r["verdict"] == "broken":
            broken.append(f"{r['scenario']}: {verdict_text(r)}")
    if broken:
        raise BrokenPromise(f"{rows[0]['mode']}: the promise is broken under " + "; ".join(broken))
    return [
        {k: v for k, v in r.items() if k in ("run_id", "scenario", "verdict", "broken_by", "broken_settings")}
        for r in rows
    ]


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


def _row(sql: str, args: tuple) -> dict | None:
    rows = query(sql, args)
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in rows[0].items()} if rows else None


def audit_row(reconciliation_id: str) -> dict | None:
    """An audit run's row of v_audit_results, or None before it is judged."""
    return _row("SELECT * FROM v_audit_results WHERE reconciliation_id = %s", (reconciliation_id,))


def window_row(audit: str, window_end: str) -> dict | None:
    """A continuous audit window's row of audit_windows, or None before it is judged."""
    return _row("SELECT * FROM audit_windows WHERE audit = %s AND window_end = %s::timestamptz", (audit, window_end))


def judged_row(audit, key: str) -> dict | None:
    """An audit's judged row: its run's (`key` its reconciliation id) or its window's (`key` its end)."""
    return window_row(audit.name, key) if audit.windowed else audit_row(key)


def window_delays(result: dict) -> dict | None:
    """A window's end-to-end delay percentiles (v_audit_delays), for its metrics."""
    rows = query(
        "SELECT * FROM v_audit_delays WHERE audit = %s AND window_end = %s::timestamptz",
        (result["subject"]["name"], result["window"]["end"]),
    )
    return rows[0] if rows else None


def window_verdict(
    audit: str, window_end: str, max_open: int | None = None, record: Callable[[dict], None] | None = None
) -> dict:
    """A continuous audit window's row of audit_windows, printed and handed to `record` (the results
    file); raises BrokenPromise when the
    mode's or the sink's promise is broken, or when more discrepancies are open than `max_open`.
    Pending events alone never fail it: they are not yet past the grace."""
    row = window_row(audit, window_end)
    if row is None:
        raise RuntimeError(f"no window of {audit} ends at {window_end}: did the reconcile task run?")
    if record:
        record(row)
    counts = ", ".join(f"{k}={row[k]}" for k in WINDOW_COUNTS if row[k] is not None)
    print(f"{audit} window ending {row['window_end']}: {row['verdict']}, sink {row['sink_verdict'] or '-'} ({counts})")
    broken = []
    if row["verdict"] == "broken":
        broken.append(f"the {row['mode']} promise is broken by {row['broken_by']}")
    if row["sink_verdict"] == "broken":
        broken.append(f"the sink's {row['sink_strategy']} promise is broken by {row['sink_broken_by']}")
    if max_open is not None and row["open_discrepancies"] > max_open:
        broken.append(f"{row['open_discrepancies']} discrepancies are open (alerts.max_open_discrepancies {max_open})")
    suspect = mapping_line(audit, row)
    if suspect:
        print(f"mapping_suspect: {suspect}")
        broken.append(f"mapping_suspect: {suspect}")
    if broken:
        raise BrokenPromise(
            f"{audit}, window ending {row['window_end']}: {'; '.join(broken)} ({counts}); "
            f"the events: {audit_page(audit)} on the Airflow UI"
        )
    return row
