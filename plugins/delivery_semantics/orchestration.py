"""What the DAGs' tasks do, importable and testable without Airflow's scheduler.

Retries are safe by construction:
- A retried load task finds its run by the Airflow task identity (`airflow_run_id`), then resumes
  that run from the ledger instead of starting a second one.
- A retried reconciliation rewrites the same rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from delivery_semantics import load, modes, scenarios
from delivery_semantics.ledger import Ledger

# The Param limits of the single-run form, shared with validation so the two cannot drift.
LIMITS = {
    "messages": (1, 10_000_000),
    "partitions": (1, 64),
    "keys": (1, 100_000),
    "payload_bytes": (0, 1_000_000),
    "txn_size": (1, 100_000),
    "seed": (0, 2**31 - 1),
}


class ConfError(ValueError):
    pass


def validate_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters, checked as a whole (the mode x scenario pair included) before any side
    effect. Returns the normalised parameters."""
    try:
        mode, scenario = conf["mode"], conf.get("scenario", "none")
    except KeyError:
        raise ConfError("mode is required") from None
    try:
        scenarios.check_pair(mode, scenario)
    except (modes.ModeError, scenarios.ScenarioError) as e:
        raise ConfError(str(e)) from None
    out = {"mode": mode, "scenario": scenario}
    for name, (lo, hi) in LIMITS.items():
        if name in conf and conf[name] is not None:
            v = conf[name]
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ConfError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
            out[name] = v
    ratio = conf.get("abort_ratio", 0.0) or 0.0
    if not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        raise ConfError(f"abort_ratio must be in [0, 1), got {ratio!r}")
    out["abort_ratio"] = float(ratio)
    spec = _spec(out)
    try:
        load.validate(scenarios.get_scenario(scenario).prepare(spec))
    except load.LoadError as e:
        raise ConfError(str(e)) from None
    return out


def _spec(params: dict) -> load.LoadSpec:
    fields = {f.name for f in dataclasses.fields(load.LoadSpec)}
    return load.LoadSpec(**{k: v for k, v in params.items() if k in fields and k != "scenario"})


def run_pair(params: dict[str, Any], task_key: str) -> dict:
    """Runs (or, on a retry, resumes) one mode x scenario load; returns the run's summary."""
    params = validate_conf(params)
    existing = _run_for_task(task_key)
    if existing is not None:
        if existing["status"] == "completed":
            summary = _summary(existing["run_id"])
        else:
            summary = load.resume(existing["run_id"])
    else:
        spec = dataclasses.replace(_spec(params), airflow_run_id=task_key)
        summary = scenarios.run(spec, params["scenario"])
    return {**dataclasses.asdict(summary), "scenario": params["scenario"]}


def _run_for_task(task_key: str) -> dict | None:
    lg = Ledger()
    try:
        lg.migrate()
        with lg.conn, lg.conn.cursor() as cur:
            cur.execute("SELECT run_id, status FROM runs WHERE airflow_run_id = %s ORDER BY created_at DESC LIMIT 1",
                        (task_key,))
            row = cur.fetchone()
        return {"run_id": row[0], "status": row[1]} if row else None
    finally:
        lg.close()


def _summary(run_id: str) -> load.RunSummary:
    lg = Ledger()
    try:
        return load.summary(lg, run_id)
    finally:
        lg.close()


def matrix_pairs(modes_filter: list[str] | None = None, scenarios_filter: list[str] | None = None) -> list[list[str]]:
    return [[m, s] for m, s in scenarios.valid_pairs()
            if (not modes_filter or m in modes_filter) and (not scenarios_filter or s in scenarios_filter)]
