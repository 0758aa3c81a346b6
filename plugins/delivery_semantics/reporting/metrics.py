"""A judged result as metrics, through Airflow's `Stats` (StatsD or OpenTelemetry, as Airflow's
[metrics] section says; nothing is sent when metrics are off). Names and tags are in
docs/OPERATIONS.md, with an alert rule:

- `semantics.audit.<audit>.<kind>`: the events of each of the catalog's kinds (lost_acked, duplicate,
  late, unexpected, malformed, ...), the outbox-to-topic stage and the sink's summed;
- `semantics.audit.<audit>.guarantee.<guarantee>`: 1 kept, 0 broken, for each guarantee in force;
- `semantics.audit.<audit>.sink_kept`: the sink's promise, 1 or 0, where the audit has a sink;
- `semantics.audit.<audit>.delay.<stage>_<p50|p99>_ms`: a continuous audit window's end-to-end delays.

Tags: `audit`, `judged_as`, `isolation`, and `window_end` for a window.
"""

from __future__ import annotations

from collections.abc import Callable

from delivery_semantics import catalog, modes

PREFIX = "semantics.audit"
DELAYS = ("outbox_topic", "topic_sink", "outbox_sink")


def gauges(result: dict, delays: dict | None = None) -> list[tuple[str, float, dict]]:
    """(name, value, tags) of one result of the results file."""
    name = result["subject"]["name"]
    judged_as = result["subject"]["judged_as"]
    tags = {"audit": name, "judged_as": judged_as or "", "isolation": result["isolation"] or ""}
    if result["window"]:
        tags["window_end"] = result["window"]["end"]
    out = []
    counts = result["counts"]
    for kind in catalog.KINDS.values():
        values = [counts[c] for c in {kind.summary, *kind.windows.values()} if c and counts.get(c) is not None]
        if values:
            out.append((f"{PREFIX}.{name}.{kind.name}", sum(values), tags))
    if result["verdict"] != "n/a":
        for guarantee, kept in modes.guarantees_kept(judged_as or "", result["scenario"] or "", result["broken_by"]):
            out.append((f"{PREFIX}.{name}.guarantee.{guarantee}", int(kept), tags))
    if result["sink"]:
        out.append((f"{PREFIX}.{name}.sink_kept", int(result["sink"]["verdict"] != "broken"), tags))
    for stage in DELAYS:
        for p in ("p50", "p99"):
            value = (delays or {}).get(f"{stage}_{p}_ms")
            if value is not None:
                out.append((f"{PREFIX}.{name}.delay.{stage}_{p}_ms", float(value), tags))
    return out


def emit(doc: dict, delays: Callable[[dict], dict | None] = lambda r: None, stats=None) -> int:
    """Every result's gauges, through `stats` (Airflow's Stats unless given); how many were sent."""
    if stats is None:
        from airflow.stats import Stats as stats
    sent = 0
    for result in doc["results"]:
        for metric, value, tags in gauges(result, delays(result)):
            stats.gauge(metric, value, tags=tags)
            sent += 1
    return sent
