"""The consumer-side workload: a consumer run reads a completed producer run's topic with one
strategy (see consumers.py), is killed at the strategy's crash point and restarted in the same
group until it reaches the end, and is then reconciled against that producer run's ledger.

    local/semantics consumer_workload run --strategy process_then_commit \\
        --source-run r20261122t171000_3f9a2c --scenario consumer_crash [--crashes 2]
    local/semantics consumer_workload resume --consumer-run-id c20261122t171500_9e01aa

Each consumer session is its own process (`cli consumer_session`, consumers.py); a crash is a
real SIGKILL of that process at the crash point, and the next session is a new process. With n
crashes, session k is armed to crash after (input events) / (n + 1) records. The sessions, the
crashes and where they fell are stored with the run (consumer_runs.timeline).

Bad input is refused before any side effect: no consumer run, group or topic is created for an
unknown strategy, a bad count, a source run that is missing or incomplete, or an endpoint that
cannot be reached.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from delivery_semantics import catalog
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import Database, child_process_env, kafka_config, ledger_database
from delivery_semantics.workload import load, readback
from delivery_semantics.workload.generator import new_run_id


class WorkloadError(ValueError):
    """The consumer run cannot start as asked; the message says why. Nothing was written."""


@dataclass
class ConsumerSpec:
    strategy: str
    source_run_id: str
    scenario: str = "none"
    crashes: int = 1  # with consumer_crash; none has no crash
    batch_size: int = 500
    consumer_run_id: str | None = None
    airflow_run_id: str | None = None
    settings: dict[str, str] = field(default_factory=dict)  # over the strategy's own (Strategy.settings)


@dataclass
class ConsumerRunSummary:
    consumer_run_id: str
    strategy: str
    scenario: str
    source_run_id: str
    status: str
    sessions: int
    crashes: int
    processed: int
    records_per_sec: float | None
    output: str

    def line(self) -> str:
        rps = f"{self.records_per_sec:,.0f}" if self.records_per_sec else "-"
        return (
            f"consumer run {self.consumer_run_id} [{self.strategy} x {self.scenario}] {self.status}: "
            f"input run {self.source_run_id}, {self.sessions} sessions, {self.crashes} crashes, "
            f"{self.processed} records processed, {rps} records/s; wrote {self.output}"
        )


def validate(spec: ConsumerSpec) -> int:
    """Everything checkable without touching Kafka or the database; returns the crashes to plan."""
    try:
        catalog.get_strategy(spec.strategy).check(spec.scenario)
    except catalog.CatalogError as e:
        raise WorkloadError(str(e)) from None
    for name in ("crashes", "batch_size"):
        lo, hi = catalog.LIMITS[name]
        v = getattr(spec, name)
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise WorkloadError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")
    if not isinstance(spec.source_run_id, str) or not spec.source_run_id.strip():
        raise WorkloadError("a source run id is required: the producer run whose topic is consumed")
    run_settings(spec)
    return spec.crashes if spec.scenario == "consumer_crash" else 0


def run_settings(spec: ConsumerSpec) -> dict[str, str]:
    """The strategy's settings with the spec's over them: only the keys the strategy reads, each an
    integer in catalog.CONSUMER_RUN_SETTINGS' bounds."""
    strategy = catalog.get_strategy(spec.strategy)
    for key, value in (spec.settings or {}).items():
        if key not in strategy.settings:
            takes = ", ".join(strategy.settings) or "no settings"
            raise WorkloadError(f"consumer setting {str(key)[:60]!r}: strategy {spec.strategy} takes {takes}")
        lo, hi = catalog.CONSUMER_RUN_SETTINGS[key]
        text = str(value)
        if not text.isascii() or not text.isdigit() or not lo <= int(text) <= hi:
            raise WorkloadError(f"consumer setting {key}={text[:40]!r}: an integer in [{lo}, {hi}]")
    settings = {**strategy.settings, **{k: str(int(v)) for k, v in (spec.settings or {}).items()}}
    if strategy.stalls and int(settings["app.processing.ms"]) <= int(settings["max.poll.interval.ms"]):
        raise WorkloadError(
            f"app.processing.ms={settings['app.processing.ms']} must exceed max.poll.interval.ms="
            f"{settings['max.poll.interval.ms']}: {spec.strategy} stalls past its poll interval"
        )
    return settings


def input_run(ledger: Ledger, source_run_id: str) -> dict:
    """The producer run a consumer run reads: it must exist and be completed."""
    source = ledger.get_run(source_run_id)
    if source is None:
        raise WorkloadError(f"no producer run {source_run_id!r} in the ledger")
    if source["status"] != "completed":
        raise WorkloadError(
            f"producer run {source_run_id} is {source['status']}, not completed: a consumer run reads a finished topic"
        )
    return source


def start(spec: ConsumerSpec, *, kafka_conf: dict | None = None, db: Database | None = None) -> ConsumerRunSummary:
    crashes = validate(spec)
    kafka_conf = kafka_conf or kafka_config()
    db = db or ledger_database()
    ledger = load.open_endpoints(kafka_conf, db, WorkloadError)
    try:
        ledger.migrate()
        source = input_run(ledger, spec.source_run_id)
        try:
            # The consumers read what was acked, once the followers have it.
            ends = readback.end_offsets(kafka_conf, source["topic"], covering=source["acked_ends"])
        except RuntimeError as e:
            raise WorkloadError(f"the input topic cannot be read: {e}") from None
        cid = spec.consumer_run_id or new_run_id("c")
        strategy = catalog.get_strategy(spec.strategy)
        output_topic = f"semantics.copy.{cid}" if strategy.transactional else None
        defined = strategy.definition(spec.scenario)
        if output_topic:
            topics.ensure_topic(kafka_conf, output_topic, partitions=len(ends))
        ledger.create_consumer_run(
            {
                "consumer_run_id": cid,
                "source_run_id": spec.source_run_id,
                "strategy": spec.strategy,
                "scenario": spec.scenario,
                "crashes_planned": crashes,
                "batch_size": spec.batch_size,
                "input_topic": source["topic"],
                "input_end_offsets": {str(p): o for p, o in ends.items()},
                "group_id": f"semantics.consumer.{cid}",
                "output_topic": output_topic,
                "transactional_id": f"semantics-copier-{cid}" if strategy.transactional else None,
                "airflow_run_id": spec.airflow_run_id,
                "settings": run_settings(spec),
                "definition": defined.to_json(),
                "definition_hash": defined.digest,
            }
        )
        return _drive(ledger, cid, kafka_conf, db)
    finally:
        ledger.close()


def resume(consumer_run_id: str, *, kafka_conf: dict | None = None, db: Database | None = None) -> ConsumerRunSummary:
    """Goes on with a run whose driver died: new sessions in the same group, the crashes not yet
    made still planned."""
    kafka_conf = kafka_conf or kafka_config()
    ledger = load.open_endpoints(kafka_conf, db or ledger_database(), WorkloadError)
    try:
        run = ledger.get_consumer_run(consumer_run_id)
        if run is None:
            raise WorkloadError(f"no consumer run {consumer_run_id!r}")
        if run["status"] == "completed":
            return summary(ledger, consumer_run_id)
        return _drive(ledger, consumer_run_id, kafka_conf, db or ledger_database())
    finally:
        ledger.close()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _tagged(stdout: str, tag: str) -> dict | None:
    found = [json.loads(ln[len(tag) + 1 :]) for ln in stdout.splitlines() if ln.startswith(tag + " ")]
    return found[-1] if found else None


def _drive(
    ledger: Ledger, cid: str, kafka_conf: dict, db: Database, session_timeout: float = 900
) -> ConsumerRunSummary:
    ledger.claim_run(cid)
    run = ledger.get_consumer_run(cid)
    source = ledger.get_run(run["source_run_id"])
    crash_every = max(1, int(source["acked"] or source["messages"]) // (run["crashes_planned"] + 1))
    timeline = list(run["timeline"] or [])
    sessions, crashes, processed = run["sessions"], run["crashes"], run["processed"] or 0
    started = time.monotonic()
    ledger.update_consumer_run(cid, status="running", started_at=run["started_at"] or datetime.now(UTC), error=None)
    status, error = "failed", None
    try:
        while True:
            sessions += 1
            crash_after = crash_every if crashes < run["crashes_planned"] else None
            ledger.update_consumer_run(cid, sessions=sessions)
            timeline.append({"at": _now(), "action": "start_consumer", "session": sessions, "crash_after": crash_after})
            cmd = [
                sys.executable,
                "-m",
                "delivery_semantics.entry.cli",
                "consumer_session",
                "--consumer-run-id",
                cid,
                "--session",
                str(sessions),
                "--timeout",
                str(session_timeout),
            ]
            if crash_after is not None:
                cmd += ["--crash-after", str(crash_after)]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=session_timeout + 60, env=child_process_env(kafka_conf, db)
            )
            crash, done = _tagged(proc.stdout, "CRASH"), _tagged(proc.stdout, "DONE")
            if proc.returncode == -signal.SIGKILL and crash is not None:
                crashes += 1
                processed += crash["processed_before"] + crash["batch"]
                timeline.append({"at": _now(), "action": "consumer_killed", "signal": "SIGKILL", **crash})
                continue
            if proc.returncode == 0 and done is not None:
                processed += done["processed"]
                timeline.append({"at": _now(), "action": "consumer_done", **done})
                break
            raise RuntimeError(
                f"consumer session {sessions} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"
            )
        status = "completed"
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        active = (run["active_seconds"] or 0) + (time.monotonic() - started)
        ledger.update_consumer_run(
            cid,
            status=status,
            error=error,
            sessions=sessions,
            crashes=crashes,
            processed=processed,
            timeline=timeline,
            active_seconds=active,
            records_per_sec=processed / active if active > 0 else None,
            ended_at=datetime.now(UTC),
        )
    return summary(ledger, cid)


def summary(ledger: Ledger, consumer_run_id: str) -> ConsumerRunSummary:
    r = ledger.get_consumer_run(consumer_run_id)
    return ConsumerRunSummary(
        r["consumer_run_id"],
        r["strategy"],
        r["scenario"],
        r["source_run_id"],
        r["status"],
        r["sessions"],
        r["crashes"],
        r["processed"] or 0,
        r["records_per_sec"],
        r["output_topic"] or "sink_events / sink_state",
    )
