"""What the DAGs' tasks do, importable and testable without Airflow's scheduler.

Retries are safe by construction:
- A retried load task finds its run by the Airflow task identity (`airflow_run_id`), then resumes
  that run from the ledger instead of starting a second one.
- A retried reconciliation rewrites the same rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from delivery_semantics import catalog, mode_files, modes
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.matrix import PIPELINE_EVENTS, ConfError
from delivery_semantics.workload import consumer_workload, load, scenarios


def _checked_ints(conf: dict[str, Any], names) -> dict[str, int]:
    out = {}
    for name in names:
        lo, hi = catalog.LIMITS[name]
        if name in conf and conf[name] is not None:
            v = conf[name]
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ConfError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
            out[name] = v
    return out


def validate_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters, checked as a whole (the mode x scenario pair included) before any side
    effect. Returns the normalised parameters. A conf naming a consumer strategy is a consumer run."""
    if "strategy" in conf:
        return validate_consumer_conf(conf)
    return _request(conf)[0]


def _request(conf: dict[str, Any], airflow_run_id: str | None = None) -> tuple[dict[str, Any], load.RunRequest]:
    """A load's parameters normalised, and its request validated (the client's check of its
    settings, once) for the task `airflow_run_id` names."""
    try:
        mode, scenario = conf["mode"], conf.get("scenario", "none")
    except KeyError:
        raise ConfError("mode is required") from None
    try:
        m, checked = modes.check_pair(mode, scenario)
        client = catalog.get_client(conf.get("client") or None, m)
    except catalog.CatalogError as e:
        raise ConfError(str(e)) from None
    out = {
        "mode": mode,
        "scenario": scenario,
        "client": client,
        "overrides": dict(conf.get("producer_settings") or conf.get("overrides") or {}),
        "connection": m.connection,
        "record_format": conf.get("record_format") or "text",
        **_checked_ints(conf, ("messages", "partitions", "keys", "payload_bytes", "txn_size", "seed", "producers")),
    }
    ratio = conf.get("abort_ratio", 0.0) or 0.0
    if not isinstance(ratio, (int, float)) or not 0 <= ratio < 1:
        raise ConfError(f"abort_ratio must be in [0, 1), got {ratio!r}")
    out["abort_ratio"] = float(ratio)
    try:
        request = scenarios.request(dataclasses.replace(_spec(out), airflow_run_id=airflow_run_id), m, checked)
    except (load.LoadError, catalog.CatalogError) as e:
        raise ConfError(str(e)) from None
    return out, request


def validate_consumer_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """A consumer run's parameters: strategy, scenario, crashes and batch size, and either an input
    run (source_run_id) or the messages and seed of a fresh one."""
    out = {
        "strategy": conf["strategy"],
        "scenario": conf.get("scenario") or "consumer_crash",
        "source_run_id": conf.get("source_run_id") or None,
        **_checked_ints(conf, ("messages", "seed", "crashes", "batch_size")),
    }
    try:
        consumer_workload.validate(_consumer_spec(out, out["source_run_id"] or "a fresh input run"))
        if out["source_run_id"]:
            lg = Ledger()
            try:
                consumer_workload.input_run(lg, out["source_run_id"])
            finally:
                lg.close()
    except consumer_workload.WorkloadError as e:
        raise ConfError(str(e)) from None
    return out


def _consumer_spec(
    params: dict, source_run_id: str, airflow_run_id: str | None = None
) -> consumer_workload.ConsumerSpec:
    return consumer_workload.ConsumerSpec(
        strategy=params["strategy"],
        source_run_id=source_run_id,
        scenario=params["scenario"],
        crashes=params.get("crashes", 1),
        batch_size=params.get("batch_size", 500),
        airflow_run_id=airflow_run_id,
    )


def _spec(params: dict) -> load.LoadSpec:
    fields = {f.name for f in dataclasses.fields(load.LoadSpec)}
    return load.LoadSpec(**{k: v for k, v in params.items() if k in fields and k != "scenario"})


def run_pair(params: dict[str, Any], task_key: str) -> dict:
    """Runs (or, on a retry, resumes) one mode x scenario load, or one consumer run; returns the
    run's summary, with its id as run_id."""
    if "strategy" in params:
        return run_consumer(validate_consumer_conf(params), task_key)
    params, request = _request(params, airflow_run_id=task_key)
    existing = _run_for_task(task_key)
    kafka_conf = _kafka(params)
    if existing is not None:
        summary = (
            _summary(existing["run_id"])
            if existing["status"] == "completed"
            else load.resume(existing["run_id"], kafka_conf=kafka_conf)
        )
    else:
        summary = scenarios.run(request, params["scenario"], kafka_conf=kafka_conf)
    return {**dataclasses.asdict(summary), "scenario": params["scenario"]}


def _kafka(params: dict) -> dict | None:
    """The Kafka connection a run names (a mode file's), or None: kafka_default."""
    if not params.get("connection"):
        return None
    from delivery_semantics.plumbing.endpoints import kafka_config

    return kafka_config(params["connection"])


def start_run(params: dict[str, Any], task_key: str) -> list[dict]:
    """The first task of a run whose producers are mapped tasks: the run made (or, on a retry,
    found) under this task's key; returns each producer's task arguments."""
    params, request = _request(params, airflow_run_id=task_key)
    existing = _run_for_task(task_key)
    if existing is not None:
        run_id = existing["run_id"]
    else:
        run_id = scenarios.begin(request, params["scenario"], kafka_conf=_kafka(params))
    lg = Ledger()
    try:
        return [{"ledger_run": run_id, "producer": p["producer"]} for p in lg.producers(run_id)]
    finally:
        lg.close()


def produce(run_id: str, producer: int) -> dict:
    """One producer's slice: a retry resumes it from the ledger."""
    lg = Ledger()
    try:
        mode = lg.get_run(run_id)["mode"]
    finally:
        lg.close()
    kafka_conf = _kafka({"connection": mode_files.connection_of(mode)})
    return dataclasses.asdict(scenarios.produce(run_id, producer, kafka_conf=kafka_conf))


def finish_run(run_id: str) -> dict:
    """The run's totals once its producers have ended; an error unless it completed."""
    lg = Ledger()
    try:
        if lg.get_run(run_id)["status"] != "completed":  # the last producer to end has totalled it
            load.total(lg, run_id)
        summary, scenario = load.summary(lg, run_id), lg.get_run(run_id)["scenario"]
    finally:
        lg.close()
    if summary.status != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {summary.line()}")
    return {**dataclasses.asdict(summary), "scenario": scenario}


def run_consumer(params: dict[str, Any], task_key: str) -> dict:
    """A consumer run, resumed on a retry. Without a given input run it first makes one (keyed by
    this task too, so a retry reuses it): a fault-free run of CONSUMER_INPUT_MODE."""
    existing = _run_for_task(task_key, table="consumer_runs", id_column="consumer_run_id")
    if existing is not None:
        summary = consumer_workload.resume(existing["run_id"])
    else:
        source_run_id = params["source_run_id"]
        if source_run_id is None:
            # Not under this task's key: a matrix report lists the task's consumer run, not its input.
            source_run_id = run_pair(
                {
                    "mode": catalog.CONSUMER_INPUT_MODE,
                    "scenario": "none",
                    **{k: params[k] for k in ("messages", "seed") if k in params},
                },
                f"input-of:{task_key}",
            )["run_id"]
        summary = consumer_workload.start(_consumer_spec(params, source_run_id, airflow_run_id=task_key))
    return {**dataclasses.asdict(summary), "run_id": summary.consumer_run_id}


def task_key(ti) -> str:
    """Stable across retries of the same task instance (no try number): a retry finds its run."""
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"


def _run_for_task(task_key: str, table: str = "runs", id_column: str = "run_id") -> dict | None:
    lg = Ledger()
    try:
        lg.migrate()
        with lg.conn, lg.conn.cursor() as cur:
            cur.execute(
                f"SELECT {id_column}, status FROM {table} WHERE airflow_run_id = %s ORDER BY created_at DESC LIMIT 1",
                (task_key,),
            )
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


def run_pipeline(conf: dict[str, Any], task_key: str) -> dict:
    """One pipeline x scenario run; a retry of a task whose run was reconciled returns that run."""
    from delivery_semantics.entry import pipeline
    from delivery_semantics.workload import connector_pipeline

    existing = _run_for_task(task_key, table="pipeline_runs")
    if existing is not None and existing["status"] == "reconciled":
        lg = Ledger()
        try:
            return lg.get_pipeline_run(existing["run_id"])
        finally:
            lg.close()
    spec = connector_pipeline.PipelineSpec(
        conf["pipeline"], conf["scenario"], int(conf.get("events") or PIPELINE_EVENTS), airflow_run_id=task_key
    )
    try:
        connector_pipeline.validate(spec)
    except catalog.CatalogError as e:
        raise ConfError(str(e)) from None
    return pipeline.run(spec)
