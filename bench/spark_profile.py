"""Where a Spark application's time went, from its event log: wall time per driver action (SQL
execution, named by its call site in the application; the driver runs them one after another, so
they add up to the wall time), with the stages that ran inside each.

    bench/run spark_profile var/spark-events/<app-id>        # or the newest log: bench/run spark_profile

Produce the log by running the application with spark.eventLog.enabled=true and
spark.eventLog.dir (bench/reconcile.py --event-log DIR does it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "var" / "spark-events"


def load_events(path: Path) -> list[dict]:
    """A log file, or a rolling log's directory (eventlog_v2_*: events_<n>_<app> files in order)."""
    files = (
        sorted((p for p in path.iterdir() if p.name.startswith("events_")), key=lambda p: int(p.name.split("_")[1]))
        if path.is_dir()
        else [path]
    )
    events = []
    for f in files:
        with open(f) as fh:
            events.extend(json.loads(line) for line in fh if line.strip())
    return events


def profile(events: list[dict]) -> dict:
    app_start = app_end = None
    jobs: dict[int, dict] = {}
    stages: dict[int, dict] = {}
    executions: dict[int, dict] = {}
    for e in events:
        kind = e["Event"]
        if kind.endswith("SparkListenerSQLExecutionStart"):
            executions[e["executionId"]] = {"start": e["time"], "description": e.get("description", "?"), "stages": []}
        elif kind.endswith("SparkListenerSQLExecutionEnd") and e["executionId"] in executions:
            executions[e["executionId"]]["end"] = e["time"]
        if kind == "SparkListenerApplicationStart":
            app_start = e["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            app_end = e["Timestamp"]
        elif kind == "SparkListenerJobStart":
            first = min(e["Stage Infos"], key=lambda s: s["Stage ID"]) if e["Stage Infos"] else {}
            last = max(e["Stage Infos"], key=lambda s: s["Stage ID"]) if e["Stage Infos"] else {}
            exec_id = (e.get("Properties") or {}).get("spark.sql.execution.id")
            if exec_id is not None and int(exec_id) in executions:
                executions[int(exec_id)]["stages"].extend(e["Stage IDs"])
            jobs[e["Job ID"]] = {
                "start": e["Submission Time"],
                "stages": e["Stage IDs"],
                "name": last.get("Stage Name") or first.get("Stage Name", "?"),
                "description": (e.get("Properties") or {}).get("spark.job.description"),
            }
        elif kind == "SparkListenerJobEnd":
            jobs[e["Job ID"]]["end"] = e["Completion Time"]
        elif kind == "SparkListenerStageCompleted":
            info = e["Stage Info"]
            if "Submission Time" in info and "Completion Time" in info:
                metrics = {a["Name"]: a.get("Value") for a in info.get("Accumulables", [])}
                stages[info["Stage ID"]] = {
                    "name": info["Stage Name"],
                    "seconds": (info["Completion Time"] - info["Submission Time"]) / 1000,
                    "tasks": info["Number of Tasks"],
                    "input_records": metrics.get("internal.metrics.input.recordsRead"),
                    "shuffle_write_mb": round(
                        (metrics.get("internal.metrics.shuffle.write.bytesWritten") or 0) / 2**20, 1
                    ),
                    "spill_mb": round((metrics.get("internal.metrics.diskBytesSpilled") or 0) / 2**20, 1),
                }
    total = (app_end - app_start) / 1000 if app_start and app_end else None
    job_rows = sorted(
        ({"job": j, "seconds": (v.get("end", v["start"]) - v["start"]) / 1000, **v} for j, v in jobs.items()),
        key=lambda r: -r["seconds"],
    )
    exec_rows = sorted(
        (
            {"execution": x, "seconds": (v.get("end", v["start"]) - v["start"]) / 1000, **v}
            for x, v in executions.items()
        ),
        key=lambda r: -r["seconds"],
    )
    return {"total": total, "jobs": job_rows, "stages": stages, "executions": exec_rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="?", help="an event log file (default: the newest in var/spark-events)")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    path = Path(args.log) if args.log else max(DEFAULT_DIR.glob("*"), key=lambda p: p.stat().st_mtime)
    p = profile(load_events(path))
    in_actions = sum(r["seconds"] for r in p["executions"])
    # An application stopped before its end (a bench's session left open) logs no end time.
    total = f"{p['total']:.1f} s" if p["total"] else "not ended"
    print(
        f"{path.name}: application {total}, of which {in_actions:.1f} s in {len(p['executions'])} "
        "driver actions (the rest: JVM and session start, driver-side JDBC, planning)"
    )
    print(
        "\n| action (call site) | seconds | share "
        "| its slowest stages: seconds/tasks/input records/shuffle write MB/spilled MB |"
    )
    print("|---|---|---|---|")
    for r in p["executions"][: args.top]:
        slow = sorted((st for st in r["stages"] if st in p["stages"]), key=lambda st: -p["stages"][st]["seconds"])[:3]
        detail = "; ".join(
            f"{p['stages'][st]['name'].split(' at ')[0]} {p['stages'][st]['seconds']:.1f}s"
            f"/{p['stages'][st]['tasks']}t/{p['stages'][st]['input_records'] or 0}r"
            f"/{p['stages'][st]['shuffle_write_mb']}MB/{p['stages'][st]['spill_mb']}MB"
            for st in slow
        )
        share = f"{100 * r['seconds'] / p['total']:.0f}%" if p["total"] else "-"
        print(f"| {r['description'][:70]} | {r['seconds']:.1f} | {share} | {detail} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
