"""Runs a load under a fault scenario (DESIGN.md §3). What each scenario does is data in the
catalog: a timeline of nemesis steps. This module applies it.

A paced scenario spreads its load over `catalog.LOAD_SECONDS` so that the timeline lands mid-load;
the timeline runs on a nemesis thread from the load's first batch. A scenario that forks its load
(producer_crash) runs producer 0's first session as a child process (`cli load resume
--producer 0`), kills it where the timeline says, and completes that producer's slice with a new
session. The scenario rides on producer 0; a run's other producers load beside it.
Every scenario heals, even when the load fails, and the timeline actually applied is stored with
the run.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import threading
import time

from delivery_semantics import catalog, modes
from delivery_semantics.catalog import DeliveryMode, Scenario, ScenarioError, Step, get_scenario
from delivery_semantics.faults.nemesis import Nemesis, NemesisError, backend_from_env, wait_healthy
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing.endpoints import Database, kafka_config, ledger_database
from delivery_semantics.workload import load
from delivery_semantics.workload.generator import new_run_id, slices


def prepare(spec: load.LoadSpec, scenario: Scenario) -> load.LoadSpec:
    """The spec as the scenario runs it: its name recorded, a run id, its pace and abort ratio."""
    changes = {"scenario": scenario.name, "run_id": spec.run_id or new_run_id()}
    if scenario.paced and not spec.rate:
        changes["rate"] = max(1, int(spec.messages / catalog.LOAD_SECONDS))
    if scenario.abort_ratio and not spec.abort_ratio:
        changes["abort_ratio"] = scenario.abort_ratio
    return dataclasses.replace(spec, **changes)


def validate(spec: load.LoadSpec | load.RunRequest, scenario_name: str) -> tuple[load.RunRequest, Scenario]:
    """The pair and the prepared spec, checked before anything starts, once: a RunRequest was
    checked when it was made (its pair, and its producer settings by the client) and passes as it is."""
    if isinstance(spec, load.RunRequest):
        if spec.spec.scenario != scenario_name:
            raise ScenarioError(f"the request was prepared for {spec.spec.scenario}, not {scenario_name}")
        return spec, get_scenario(scenario_name)
    mode, scenario = modes.check_pair(spec.mode, scenario_name)
    return request(spec, mode, scenario), scenario


def request(spec: load.LoadSpec, mode: DeliveryMode, scenario: Scenario) -> load.RunRequest:
    """The request of a spec whose mode x scenario pair is checked: the nemesis's backend able to
    inject the scenario's faults, then the spec prepared and validated with the mode given (not read
    again)."""
    try:
        backend = backend_from_env()
        if any(step.action == "partition" for step in scenario.timeline):
            backend.link_proxies(1)
    except NemesisError as e:
        raise ScenarioError(f"{scenario.name}: {e}") from None
    return load.validate(prepare(spec, scenario), mode)


def run(
    spec: load.LoadSpec | load.RunRequest,
    scenario_name: str,
    *,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    nemesis: Nemesis | None = None,
    health_timeout: float = 180,
    topic_config: dict | None = None,
) -> load.RunSummary:
    """A whole run from this process: `begin`, then every producer side by side, the first here
    under the scenario and the others as local processes."""
    request, _ = validate(spec, scenario_name)  # bad input is refused before any endpoint is looked up
    kafka_conf = kafka_conf or kafka_config()
    db = db or ledger_database()
    run_id = begin(
        request, scenario_name, kafka_conf=kafka_conf, db=db, health_timeout=health_timeout, topic_config=topic_config
    )
    ledger = Ledger(db)
    try:
        others = load.spawn_producers(run_id, list(range(1, request.spec.producers)), kafka_conf, db)
        try:
            produce(run_id, 0, kafka_conf=kafka_conf, db=db, nemesis=nemesis, health_timeout=health_timeout)
        finally:
            load.wait_producers(ledger, run_id, others)
        return load.summary(ledger, run_id)  # totalled by whichever producer ended last
    finally:
        ledger.close()


def begin(
    spec: load.LoadSpec | load.RunRequest,
    scenario_name: str,
    *,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    health_timeout: float = 180,
    topic_config: dict | None = None,
) -> str:
    """Validates, gates on cluster health and creates the run (its topic, with the scenario's
    settings and then `topic_config`'s, its row, its producers' slices); returns its id. Nothing
    is produced yet."""
    request, scenario = validate(spec, scenario_name)
    kafka_conf = kafka_conf or kafka_config()
    wait_healthy(kafka_conf, timeout=health_timeout)
    config = {**scenario.topic_config, **(topic_config or {})}
    return load.create(request, kafka_conf=kafka_conf, db=db, topic_config=config)


def produce(
    run_id: str,
    producer: int,
    *,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    nemesis: Nemesis | None = None,
    health_timeout: float = 180,
) -> load.RunSummary:
    """One producer's slice of a run made by `begin`, resumed if it ran before. The scenario rides
    on producer 0: its timeline runs beside that producer's load (or, for a forked load, kills that
    producer's first process), then the cluster is healed and the timeline recorded with the run."""
    kafka_conf = kafka_conf or kafka_config()
    db = db or ledger_database()
    ledger = Ledger(db)
    try:
        run = ledger.get_run(run_id)
        if run is None:
            raise load.LoadError(f"no run {run_id!r} in the ledger")
        mine = ledger.producers(run_id)[producer] if 0 <= producer < run["producers"] else None
    finally:
        ledger.close()
    if mine is None:
        raise load.LoadError(f"run {run_id} has producers 0 to {run['producers'] - 1}, not {producer}")
    scenario = catalog.SCENARIOS[run["scenario"]]
    if producer != 0 or mine["sessions"] > 0:  # a retry resumes: the faults were applied once
        return load.resume(run_id, producer=producer, kafka_conf=kafka_conf, db=db)
    nemesis = nemesis or Nemesis(kafka_conf, backend_from_env())
    wait_healthy(kafka_conf, timeout=health_timeout)
    nemesis.timeline.record("healthy_before", scenario=scenario.name)
    error: BaseException | None = None
    summary = None
    try:
        if scenario.forks_load:
            summary = _forked_load(run, scenario, nemesis, kafka_conf, db)
        else:
            summary = _load_with_timeline(run, scenario, nemesis, kafka_conf, db)
    except BaseException as e:
        error = e
    finally:
        try:
            nemesis.heal(timeout=health_timeout)
        finally:
            _store_timeline(db, run_id, scenario.name, nemesis)
    if error is not None:
        raise error
    return summary


class Timeline:
    """Applies a scenario's steps in order. Targets are resolved when first needed: the leader of
    the topic's partition 0, the other brokers as its followers, the coordinator of producer 0's
    transactional.id, the whole cluster, the forked producer process; a connector pipeline adds
    its own (`resolvers`: its source task's worker, its outbox database)."""

    def __init__(
        self,
        steps: tuple[Step, ...],
        nemesis: Nemesis,
        run: dict,
        db: Database | None,
        producer: subprocess.Popen | None = None,
        resolvers: dict | None = None,
    ):
        self.steps, self.nemesis, self.run, self.db, self.producer = steps, nemesis, run, db, producer
        self.resolvers = resolvers or {}
        # The timeline rides on producer 0: a crash point is a share of that producer's own slice,
        # whether the other producers run beside it or (under `airflow dags test`) before it.
        start, stop = slices(run["messages"], run["producers"])[0]
        self.slice_size = stop - start
        self._leader: int | None = None
        self._resolved: dict[str, list] = {}

    def targets(self, target: str) -> list:
        if target in self.resolvers:
            if target not in self._resolved:  # a step and its undo act on the same target
                self._resolved[target] = self.resolvers[target]()
            return self._resolved[target]
        if target == "producer":
            return [self.producer]
        if target == "cluster":
            return [None]
        if target == "coordinator":
            if "coordinator" not in self._resolved:
                self._resolved["coordinator"] = [self.nemesis.coordinator_of(self._transactional_id())]
            return self._resolved["coordinator"]
        if self._leader is None:
            self._leader = self.nemesis.leader_of(self.run["topic"], 0)
        if target == "leader":
            return [self._leader]
        if target == "followers":
            return [b for b in self.nemesis.backend.broker_ids if b != self._leader]
        raise NemesisError(f"unknown step target {target!r}")

    def _transactional_id(self) -> str:
        ledger = Ledger(self.db)
        try:
            tid = ledger.producers(self.run["run_id"])[0]["transactional_id"]
        finally:
            ledger.close()
        if not tid:
            raise NemesisError(f"run {self.run['run_id']} has no transactional.id: no coordinator to kill")
        return tid

    def crashes_itself(self, step: Step) -> bool:
        """The step is a kill the producer process does to itself, armed when it was started."""
        return step.in_open_transaction and modes.get_mode(self.run["mode"]).transactional

    def crash_point(self) -> int | None:
        """The index in producer 0's slice at which its process is armed to kill itself, if any."""
        armed = [s for s in self.steps if self.crashes_itself(s)]
        return int(self.slice_size * armed[0].after_share) if armed else None

    def apply(self, started: threading.Event) -> None:
        started.wait()
        t0 = time.monotonic()
        for step in self.steps:
            if self.crashes_itself(step):
                self._wait_for_own_crash()
                continue
            if step.after_share is not None:
                self._wait_for_outcomes(int(self.slice_size * step.after_share))
            else:
                time.sleep(max(0.0, t0 + step.at - time.monotonic()))
            for target in self.targets(step.target):
                getattr(self.nemesis, step.action)(target)

    def _wait_for_own_crash(self) -> None:
        try:
            out, _ = self.producer.communicate(timeout=catalog.LOAD_SECONDS * 4)
        except subprocess.TimeoutExpired:
            raise ScenarioError("the load never reached its crash point") from None
        crash = next((line[len("CRASH ") :] for line in out.splitlines() if line.startswith("CRASH ")), None)
        if self.producer.returncode != -signal.SIGKILL or crash is None:
            raise ScenarioError(f"the load process exited ({self.producer.returncode}) before its crash point")
        self.nemesis.timeline.record("kill_producer", pid=self.producer.pid, signal="SIGKILL", **json.loads(crash))

    def _wait_for_outcomes(self, target: int) -> None:
        deadline = time.monotonic() + catalog.LOAD_SECONDS * 4
        ledger = Ledger(self.db)
        try:
            while ledger.outcome_count(self.run["run_id"], producer=0) < target:
                if self.producer is not None and self.producer.poll() is not None:
                    raise ScenarioError(f"the load process exited ({self.producer.returncode}) before the crash point")
                if time.monotonic() > deadline:
                    raise ScenarioError("the load never reached the crash point")
                time.sleep(0.2)
        finally:
            ledger.close()


def _load_with_timeline(
    run: dict, scenario: Scenario, nemesis: Nemesis, kafka_conf: dict, db: Database
) -> load.RunSummary:
    """Producer 0's load on this thread, the timeline on a nemesis thread, started by its first batch."""
    started = threading.Event()
    failure: list[BaseException] = []
    timeline = Timeline(scenario.timeline, nemesis, run, db)

    def nemesis_thread():
        try:
            timeline.apply(started)
        except BaseException as e:  # surfaced after the load; the heal runs regardless
            failure.append(e)

    t = threading.Thread(target=nemesis_thread, name="nemesis", daemon=True)
    t.start()
    try:
        summary = load.resume(
            run["run_id"], producer=0, kafka_conf=kafka_conf, db=db, on_progress=lambda _run, _n: started.set()
        )
    finally:
        started.set()
        # A rolling restart waits for every partition to be in sync after each broker: minutes on
        # a cluster with many topics.
        t.join(timeout=600)
    if failure:
        raise NemesisError(f"the nemesis timeline failed: {failure[0]}") from failure[0]
    return summary


def _forked_load(run: dict, scenario: Scenario, nemesis: Nemesis, kafka_conf: dict, db: Database) -> load.RunSummary:
    """Producer 0's first session as a child process that the timeline kills (or that kills itself
    at its crash point); then a new session here (same slice, same transactional.id) fences it,
    resends what the ledger lacks and completes it."""
    timeline = Timeline(scenario.timeline, nemesis, run, db)
    proc = timeline.producer = load.spawn_producers(
        run["run_id"], [0], kafka_conf, db, crash_before_commit_at=timeline.crash_point()
    )[0]
    try:
        started = threading.Event()
        started.set()
        timeline.apply(started)
    except ScenarioError as e:
        raise ScenarioError(f"{e}: {load.stderr_tail(proc)}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stderr_file.close()
    nemesis.timeline.record("resume_producer")
    return load.resume(run["run_id"], producer=0, kafka_conf=kafka_conf, db=db)


def _store_timeline(db: Database, run_id: str, scenario: str, nemesis: Nemesis) -> None:
    ledger = Ledger(db)
    try:
        if ledger.get_run(run_id) is not None:
            ledger.update_run(
                run_id,
                timeline={"scenario": scenario, "backend": nemesis.backend.name, "events": nemesis.timeline.entries},
            )
    finally:
        ledger.close()
