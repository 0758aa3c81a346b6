"""Fault scenarios (DESIGN.md §3): each one is a named timeline applied to a load, deterministic
enough that every mode x scenario outcome can be asserted.

A scenario paces its load so that the fault lands mid-load (it sets the load's target rate from
the number of messages), applies its timeline from a nemesis thread, and always heals, even when
the load fails. The timeline actually applied is stored with the run.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from delivery_semantics import load, modes
from delivery_semantics.endpoints import Database, child_process_env, kafka_config, ledger_database
from delivery_semantics.generator import new_run_id
from delivery_semantics.ledger import Ledger
from delivery_semantics.nemesis import Nemesis, NemesisError, wait_healthy

# How long a paced load runs; fault times below are seconds after the first batch was produced.
LOAD_SECONDS = 30.0


class ScenarioError(ValueError):
    """Unknown scenario, or a mode it cannot be paired with; nothing was started."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    requires_acks: bool = False
    requires_transactions: bool = False
    paced: bool = True

    def incompatible(self, mode: modes.DeliveryMode) -> str | None:
        if self.requires_transactions and not mode.transactional:
            return f"{self.name} needs the transactional mode (it aborts transactions); {mode.name} has none"
        if self.requires_acks and mode.producer["acks"] == "0":
            return f"{self.name} drops acks; {mode.name} (acks=0) never waits for one"
        return None

    def prepare(self, spec: load.LoadSpec) -> load.LoadSpec:
        changes = {"scenario": self.name, "run_id": spec.run_id or new_run_id()}
        if self.paced and not spec.rate:
            changes["rate"] = max(1, int(spec.messages / LOAD_SECONDS))
        return dataclasses.replace(spec, **changes)

    def topic_config(self) -> dict:
        return {}

    def execute(self, spec: load.LoadSpec, nemesis: Nemesis, kafka_conf: dict, db: Database) -> load.RunSummary:
        return _load_with_nemesis(spec, kafka_conf, db, self.topic_config(), lambda started: None)


class NoFault(Scenario):
    pass


class LostAck(Scenario):
    """The partition leader's responses to clients are swallowed by Toxiproxy for longer than
    request.timeout.ms: the produce requests were written, the acks never arrive, the client
    times out and retries."""
    START, WINDOW = 5.0, 15.0

    def execute(self, spec, nemesis, kafka_conf, db):
        def timeline(started: threading.Event):
            started.wait()
            time.sleep(self.START)
            leader = nemesis.leader_of(_topic(spec), 0)
            nemesis.drop_responses(leader)
            time.sleep(self.WINDOW)
            nemesis.restore_responses(leader)
        return _load_with_nemesis(spec, kafka_conf, db, self.topic_config(), timeline)


class LeaderKill(Scenario):
    """The partition leader stalls (SIGSTOP) for 2 s, as before a crash, and is then killed with
    SIGKILL; it is restarted 12 s later. The stall makes the in-flight window deterministic:
    whatever was written to its sockets meanwhile never reaches its log."""
    START, STALL, DOWN = 6.0, 2.0, 12.0

    def execute(self, spec, nemesis, kafka_conf, db):
        def timeline(started: threading.Event):
            started.wait()
            time.sleep(self.START)
            leader = nemesis.leader_of(_topic(spec), 0)
            nemesis.pause(leader)
            time.sleep(self.STALL)
            nemesis.kill(leader)
            time.sleep(self.DOWN)
            nemesis.restart(leader)
        return _load_with_nemesis(spec, kafka_conf, db, self.topic_config(), timeline)


class IsolatedLeader(Scenario):
    """Both followers of the partition are paused (SIGSTOP) for longer than replica.lag.time.max.ms
    while producing goes on against the leader alone; then the leader is killed and the followers
    resumed, with unclean leader election allowed on the run's topic. With the brokers also being
    the 3 KRaft controllers, pausing two of them stalls the quorum, so the ISR cannot shrink; the
    followers come back as the in-sync replicas and one is elected without the leader's last writes."""
    START, ISOLATED, AFTER = 5.0, 12.0, 10.0

    def topic_config(self) -> dict:
        return {"unclean.leader.election.enable": "true"}

    def execute(self, spec, nemesis, kafka_conf, db):
        def timeline(started: threading.Event):
            started.wait()
            time.sleep(self.START)
            leader = nemesis.leader_of(_topic(spec), 0)
            followers = [b for b in nemesis.backend.broker_ids if b != leader]
            for f in followers:
                nemesis.pause(f)
            time.sleep(self.ISOLATED)
            nemesis.kill(leader)
            for f in followers:
                nemesis.resume(f)
            time.sleep(self.AFTER)
            nemesis.restart(leader)
        return _load_with_nemesis(spec, kafka_conf, db, self.topic_config(), timeline)


class ProducerCrash(Scenario):
    """The load runs as its own process and is killed with SIGKILL a third of the way in; a new
    producer (same run, same transactional.id) resends every event the ledger does not show as
    acked and completes the run."""
    FRACTION = 1 / 3

    def execute(self, spec, nemesis, kafka_conf, db):
        ledger = Ledger(db)
        try:
            ledger.migrate()
            cmd = [sys.executable, "-m", "delivery_semantics.load", "run", "--mode", spec.mode,
                   "--messages", str(spec.messages), "--partitions", str(spec.partitions), "--keys", str(spec.keys),
                   "--payload-bytes", str(spec.payload_bytes), "--rate", str(spec.rate), "--txn-size",
                   str(spec.txn_size), "--abort-ratio", str(spec.abort_ratio), "--seed", str(spec.seed),
                   "--topic", _topic(spec), "--run-id", spec.run_id, "--recorded-scenario", self.name, "--no-progress"]
            for k, v in spec.overrides.items():
                cmd += ["--set", f"{k}={v}"]
            if spec.airflow_run_id:
                cmd += ["--airflow-run-id", spec.airflow_run_id]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=child_process_env(kafka_conf, db))
            try:
                target = int(spec.messages * self.FRACTION)
                deadline = time.monotonic() + LOAD_SECONDS * 4
                while _outcomes(ledger, spec.run_id) < target:
                    if proc.poll() is not None:
                        raise ScenarioError(f"the load process ended before the crash point: {proc.stderr.read()[-1500:]}")
                    if time.monotonic() > deadline:
                        raise ScenarioError("the load never reached the crash point")
                    time.sleep(0.2)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                nemesis.timeline.record("kill_producer", pid=proc.pid, signal="SIGKILL", outcomes_before=target)
            finally:
                if proc.poll() is None:
                    proc.kill()
            nemesis.timeline.record("resume_producer")
            return load.resume(spec.run_id, kafka_conf=kafka_conf, db=db)
        finally:
            ledger.close()


class TxnAbort(Scenario):
    """The transactional producer aborts a share of its transactions (20% unless set) and sends
    those events again in new ones."""

    def prepare(self, spec):
        spec = super().prepare(spec)
        return spec if spec.abort_ratio else dataclasses.replace(spec, abort_ratio=0.2)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    NoFault("none", "happy path", paced=False),
    LostAck("lost_ack", "responses from the partition leader dropped for 15 s: requests written, acks lost",
            requires_acks=True),
    LeaderKill("leader_kill", "partition leader stalls 2 s, is killed (SIGKILL), restarted 12 s later"),
    IsolatedLeader("isolated_leader", "followers paused past the lag limit, leader killed, followers resumed, "
                   "unclean election allowed"),
    ProducerCrash("producer_crash", "producer process killed (SIGKILL) a third in; a new one resends the unacked"),
    TxnAbort("txn_abort", "a share of transactions aborted and resent", requires_transactions=True, paced=False),
)}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ScenarioError(f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)}") from None


def check_pair(mode_name: str, scenario_name: str) -> tuple[modes.DeliveryMode, Scenario]:
    mode = modes.get_mode(mode_name)
    scenario = get_scenario(scenario_name)
    reason = scenario.incompatible(mode)
    if reason:
        raise ScenarioError(reason)
    return mode, scenario


def valid_pairs() -> list[tuple[str, str]]:
    return [(m, s) for s, sc in SCENARIOS.items() for m, mode in modes.MODES.items() if not sc.incompatible(mode)]


def run(spec: load.LoadSpec, scenario_name: str, *, kafka_conf: dict | None = None, db: Database | None = None,
        nemesis: Nemesis | None = None, health_timeout: float = 180) -> load.RunSummary:
    """Validates, gates on cluster health, runs the load under the scenario, heals, and records the
    timeline with the run."""
    _, scenario = check_pair(spec.mode, scenario_name)
    spec = scenario.prepare(spec)
    load.validate(spec)
    kafka_conf = kafka_conf or kafka_config()
    db = db or ledger_database()
    nemesis = nemesis or Nemesis(kafka_conf)
    wait_healthy(kafka_conf, timeout=health_timeout)
    nemesis.timeline.record("healthy_before", scenario=scenario.name)
    error: BaseException | None = None
    summary = None
    try:
        summary = scenario.execute(spec, nemesis, kafka_conf, db)
    except BaseException as e:
        error = e
    finally:
        try:
            nemesis.heal(timeout=health_timeout)
        finally:
            _store_timeline(db, spec.run_id, scenario.name, nemesis)
    if error is not None:
        raise error
    return summary


def _topic(spec: load.LoadSpec) -> str:
    return spec.topic or f"semantics.{spec.mode}.{spec.run_id}"


def _outcomes(ledger: Ledger, run_id: str) -> int:
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM ledger_outcomes WHERE run_id = %s", (run_id,))
        return cur.fetchone()[0]


def _store_timeline(db: Database, run_id: str, scenario: str, nemesis: Nemesis) -> None:
    ledger = Ledger(db)
    try:
        if ledger.get_run(run_id) is not None:
            ledger.update_run(run_id, timeline={"scenario": scenario, "backend": nemesis.backend.name,
                                                "events": nemesis.timeline.entries})
    finally:
        ledger.close()


def _load_with_nemesis(spec: load.LoadSpec, kafka_conf: dict, db: Database, topic_config: dict,
                       timeline) -> load.RunSummary:
    """The load on this thread, the nemesis timeline on another, started by the first batch."""
    started = threading.Event()
    failure: list[BaseException] = []

    def nemesis_thread():
        try:
            timeline(started)
        except BaseException as e:   # surfaced after the load; the heal runs regardless
            failure.append(e)

    t = threading.Thread(target=nemesis_thread, name="nemesis", daemon=True)
    t.start()
    try:
        summary = load.start(dataclasses.replace(spec, topic=_topic(spec)), kafka_conf=kafka_conf, db=db,
                             on_progress=lambda _run, _n: started.set(), topic_config=topic_config)
    finally:
        started.set()
        t.join(timeout=120)
    if failure:
        raise NemesisError(f"the nemesis timeline failed: {failure[0]}") from failure[0]
    return summary
