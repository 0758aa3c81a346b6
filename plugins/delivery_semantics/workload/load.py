"""The load runner: producer load under a delivery mode, with every event in the ledger before it
is produced. Called by the Airflow tasks, the fault scenarios and the CLI (`cli.py`: `load run`,
`load resume`).

Bad input is refused before any side effect: nothing is written to Kafka or the ledger for a run
that fails validation or cannot reach its broker or database.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from delivery_semantics import budgets, catalog, client_settings, clients, locations, modes
from delivery_semantics.faults.nemesis import crash_here
from delivery_semantics.history.ledger import Ledger, Outcome, Reports
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import (
    Database,
    child_process_env,
    kafka_config,
    ledger_database,
    mask_secrets,
)
from delivery_semantics.records.layouts import RECORD_FORMATS
from delivery_semantics.workload import readback, settings
from delivery_semantics.workload.client import (
    ABORTED_BEHIND,
    ABORTED_BY_THE_APPLICATION,
    FENCED_AT_RESTART,
    ProducerClient,
    ProducerFenced,
    few_collections,
    runtime,
)
from delivery_semantics.workload.generator import Generator, new_run_id, slices

BROKER_MESSAGE_MAX_BYTES = 1048588
# Key, the event's fields in the value and record framing, generously: what a record adds to its
# payload.
RECORD_OVERHEAD_BYTES = 512
# The free disk a run needs, where SEMANTICS_DATA_DISKS (os.pathsep-separated folders; the local
# stack names var/) says the cluster's, the ledger's and the lakehouse's data live: each event on
# three replicas with its key and event fields (about 60 bytes), its ledger and copy rows (about
# 200 bytes), and a margin that no run may eat, since a full disk stops brokers halfway.
DISK_MARGIN_BYTES = 2 << 30
DISK_BYTES_PER_EVENT = 200


def require_free_disk(spec: LoadSpec) -> None:
    """Refuses a run the disks cannot hold (SEMANTICS_DATA_DISKS, else no check), in one line."""
    folders = [f for f in (locations.setting("data_disks") or "").split(os.pathsep) if f]
    needed = spec.messages * (3 * (spec.payload_bytes + 60) + DISK_BYTES_PER_EVENT) + DISK_MARGIN_BYTES
    for folder in folders:
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue  # a folder not made yet is on a disk another folder names
        if free < needed:
            raise LoadError(
                f"not enough disk for {spec.messages:,} events: {folder} has {free / 2**30:.1f} GiB free, the run "
                f"needs about {needed / 2**30:.1f} GiB with a {DISK_MARGIN_BYTES >> 30} GiB margin; "
                "`local/semantics gc` frees the platform's old topics"
            )


RESEND_ROUNDS = 3
# A producer in a fatal state (fenced, or its transaction aborted by the coordinator past
# transaction.timeout.ms: librdkafka's INVALID_TXN_STATE) can send nothing more; the application
# opens a new one, as after a crash, this many times in one drive of its slice.
FATAL_RESTARTS = 3


class LoadError(ValueError):
    """The load cannot start as asked; the message says why. Nothing was written."""


class RunBudgetExceeded(RuntimeError):
    """A load went past its deadline: it ends, failed, with what it recorded kept."""


@dataclass
class LoadSpec:
    mode: str
    messages: int
    partitions: int = 3
    keys: int = 16
    payload_bytes: int = 200
    rate: int = 0  # target records/s; 0 = as fast as possible
    txn_size: int | None = None  # None: catalog.default_txn_size(messages)
    abort_ratio: float = 0.0
    seed: int = 0
    overrides: dict = field(default_factory=dict)  # producer settings over the mode's, in the client's keys
    topic: str | None = None
    scenario: str = "none"
    run_id: str | None = None
    batch_size: int = 10_000
    airflow_run_id: str | None = None
    producers: int = catalog.DEFAULT_PRODUCERS
    client: str | None = None  # librdkafka or java; None: a mode file's own, or librdkafka
    record_format: str = "text"  # layouts.RECORD_FORMATS: the text value layout, or Avro
    # Whether the load sends again what was not acked (an application that retries its failures);
    # None: the mode's (every mode but at_most_once does). prove's `producer.app.resends_failed`.
    resends_failed: bool | None = None


@dataclass
class RunSummary:
    run_id: str
    mode: str
    topic: str
    status: str
    messages: int
    produced: int
    acked: int
    sent_unacked: int
    failed: int
    unknown: int
    pending: int
    aborted_attempts: int
    records_per_sec: float | None
    ack_p50_ms: float | None
    ack_p99_ms: float | None
    sessions: int
    producers: int = 1
    # Set when the summary is one producer's session: `status` is then that producer's, and the
    # counts are the run's as far as it knows (other producers may still be running).
    producer: int | None = None

    def line(self) -> str:
        rps = f"{self.records_per_sec:,.0f}" if self.records_per_sec else "-"
        p50 = f"{self.ack_p50_ms:.1f}" if self.ack_p50_ms is not None else "-"
        p99 = f"{self.ack_p99_ms:.1f}" if self.ack_p99_ms is not None else "-"
        return (
            f"run {self.run_id}{'' if self.producer is None else f' producer {self.producer}'} "
            f"[{self.mode}] {self.status}: messages {self.messages}, produced {self.produced}, "
            f"acked {self.acked}, sent(no ack) {self.sent_unacked}, failed {self.failed}, unknown {self.unknown}, "
            f"pending {self.pending}, aborted attempts {self.aborted_attempts}; {rps} records/s, "
            f"ack p50 {p50} ms, p99 {p99} ms; topic {self.topic}"
        )


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class RunRequest:
    """A load's spec once checked as a whole, its producer settings by the client itself (for
    Java, a JVM): what `create` takes, so that a run's settings are checked once on its way down."""

    spec: LoadSpec
    mode: catalog.DeliveryMode
    resolved: settings.Resolved


def validate(spec: LoadSpec, mode: catalog.DeliveryMode | None = None) -> RunRequest:
    """Everything that can be checked without touching Kafka or the ledger: the producer settings
    by the client itself. `mode`: the spec's, when the caller has read it already."""
    try:
        mode = mode or modes.get_mode(spec.mode)
        catalog.get_client(spec.client, mode)
    except catalog.ModeError as e:
        raise LoadError(str(e)) from None
    if spec.run_id is not None and not re.fullmatch(catalog.RUN_ID_PATTERN, str(spec.run_id)):
        raise LoadError(f"run id {spec.run_id!r}: use 1-100 characters of [A-Za-z0-9_.-]")
    for name in ("messages", "partitions", "keys", "txn_size", "batch_size", "producers"):
        v = getattr(spec, name)
        if name == "txn_size" and v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise LoadError(f"{name} must be a positive integer, got {v!r}")
    most = min(catalog.LIMITS["producers"][1], spec.messages)
    if spec.producers > most:
        raise LoadError(f"producers must be at most {most} (one event each at least), got {spec.producers}")
    if not isinstance(spec.payload_bytes, int) or spec.payload_bytes < 0:
        raise LoadError(f"payload_bytes must be >= 0, got {spec.payload_bytes!r}")
    if not isinstance(spec.rate, int) or spec.rate < 0:
        raise LoadError(f"rate must be >= 0 records/s (0 = unthrottled), got {spec.rate!r}")
    if not 0.0 <= float(spec.abort_ratio) < 1.0:
        raise LoadError(f"abort_ratio must be in [0, 1), got {spec.abort_ratio!r}")
    if spec.abort_ratio and not mode.transactional:
        raise LoadError(f"abort_ratio needs the transactional mode; {mode.name} has no transactions")
    if spec.resends_failed not in (None, True, False):
        raise LoadError(f"resends_failed is true, false or the mode's, got {spec.resends_failed!r}")
    if spec.record_format not in RECORD_FORMATS:
        raise LoadError(f"record format {spec.record_format!r}: use one of {', '.join(RECORD_FORMATS)}")
    if spec.topic is not None:
        try:
            topics.validate_topic_name(spec.topic)
        except topics.TopicError as e:
            raise LoadError(str(e)) from None
    try:
        # Memory first, from the settings as asked: before the client's own check starts a JVM.
        name = catalog.get_client(spec.client, mode)
        asked = {**mode.producer_settings(name), **settings.overrides_of(name, spec.overrides)}
        budgets.check_run_memory(spec.producers, clients.spec(name).memory_mb(asked, spec.payload_bytes))
        resolved = settings.resolve(mode, spec.client, spec.overrides)
    except (catalog.ModeError, budgets.BudgetError) as e:
        raise LoadError(str(e)) from None
    client = clients.spec(resolved.client)
    if spec.record_format not in client.record_formats:
        raise LoadError(
            f"record format {spec.record_format}: the {client.name} client writes {', '.join(client.record_formats)} "
            "records only"
        )
    size_key = client.size_key
    limit = min(int(resolved.conf.get(size_key, 1000000)), BROKER_MESSAGE_MAX_BYTES)
    if spec.payload_bytes + RECORD_OVERHEAD_BYTES > limit:
        raise LoadError(
            f"payload_bytes={spec.payload_bytes} does not fit {size_key}={limit} "
            f"(with up to {RECORD_OVERHEAD_BYTES} bytes of key, event fields and framing)"
        )
    return RunRequest(spec, mode, resolved)


def open_endpoints(kafka_conf: dict, db: Database, error: type[Exception] | None = None) -> Ledger:
    """The ledger, opened once Kafka answers too; an endpoint that does not is `error` (LoadError
    by default) naming it, before anything is written."""
    error = error or LoadError
    try:
        ledger = Ledger(db)
    except ConnectionError as e:
        raise error(str(e)) from None
    try:
        topics.check_reachable(kafka_conf, timeout=10)
    except ConnectionError as e:
        ledger.close()
        raise error(str(e)) from None
    return ledger


# --------------------------------------------------------------------------- running

ProgressCallback = Callable[[str, int], None]  # (run_id, events produced so far in this session)


def create(
    request: RunRequest | LoadSpec,
    *,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    topic_config: dict | None = None,
) -> str:
    """Makes the run's topic and its row in the ledger, after validating the spec unless it comes
    validated (a RunRequest); returns the run id. Every parameter a producer session needs is in
    that row, so `resume` can run it."""
    request = request if isinstance(request, RunRequest) else validate(request)
    spec, mode, resolved = request.spec, request.mode, request.resolved
    require_free_disk(spec)
    kafka_conf = kafka_conf or kafka_config()
    ledger = open_endpoints(kafka_conf, db or ledger_database())
    try:
        ledger.migrate()
        run_id = spec.run_id or new_run_id()
        topic = spec.topic or default_topic(mode.name, run_id)
        topics.ensure_topic(kafka_conf, topic, partitions=spec.partitions, config=topic_config)
        transactional_id = f"semantics-{run_id}" if mode.transactional else None
        defined = catalog.Definition.of(mode, spec.scenario, mask_secrets(mode.run_settings(resolved.client)))
        ledger.create_run(
            {
                "run_id": run_id,
                "mode": mode.name,
                "scenario": spec.scenario,
                "topic": topic,
                "partitions": spec.partitions,
                "messages": spec.messages,
                "keys": spec.keys,
                "payload_bytes": spec.payload_bytes,
                "record_layout": RECORD_FORMATS[spec.record_format],
                "target_rate": spec.rate,
                "txn_size": (spec.txn_size or catalog.default_txn_size(spec.messages)) if mode.transactional else None,
                "abort_ratio": spec.abort_ratio if mode.transactional else None,
                "seed": spec.seed,
                "transactional_id": transactional_id,
                "producer_config": mask_secrets(resolved.conf),
                "client": resolved.client,
                "settings": mask_secrets(resolved.overrides),
                "topic_config": dict(topic_config or {}),
                "resends_failed": spec.resends_failed,
                "findings": resolved.finding_rows,
                "airflow_run_id": spec.airflow_run_id,
                "definition": defined.to_json(),
                "definition_hash": defined.digest,
            },
            [
                {
                    "producer": i,
                    "n_start": start,
                    "n_stop": stop,
                    # Its own id per producer: two producers sharing one would fence each other.
                    "transactional_id": transactional_id
                    and (transactional_id if spec.producers == 1 else f"{transactional_id}-p{i}"),
                }
                for i, (start, stop) in enumerate(slices(spec.messages, spec.producers))
            ],
        )
        return run_id
    finally:
        ledger.close()


def default_topic(mode: str, run_id: str) -> str:
    return f"semantics.{mode}.{run_id}"


def start(
    spec: LoadSpec,
    *,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    progress: bool = False,
    on_progress: ProgressCallback | None = None,
    topic_config: dict | None = None,
) -> RunSummary:
    run_id = create(spec, kafka_conf=kafka_conf, db=db, topic_config=topic_config)
    return resume(run_id, kafka_conf=kafka_conf, db=db, progress=progress, on_progress=on_progress)


def resume(
    run_id: str,
    *,
    producer: int | None = None,
    kafka_conf: dict | None = None,
    db: Database | None = None,
    progress: bool = False,
    on_progress: ProgressCallback | None = None,
    crash_before_commit_at: int | None = None,
) -> RunSummary:
    """Producer sessions for a run: the first ones, or new ones after a crash, each of which sends
    every event of its slice the ledger does not show as acked, then the events never written.
    One producer (`producer`, or a run's only one) runs in this process; several run as local
    processes side by side, one for each slice not yet completed.

    `crash_before_commit_at` (a transactional run's one producer): this process kills itself
    between the flush and the commit of the transaction holding the slice's event of that index
    (the producer_crash scenario's fault, catalog.Step.in_open_transaction)."""
    kafka_conf = kafka_conf or kafka_config()
    ledger = open_endpoints(kafka_conf, db or ledger_database())
    try:
        if ledger.get_run(run_id) is None:
            raise LoadError(f"no run {run_id!r} in the ledger")
        producers = ledger.producers(run_id)
        if producer is not None and not 0 <= producer < len(producers):
            raise LoadError(f"run {run_id} has producers 0 to {len(producers) - 1}, not {producer}")
        if crash_before_commit_at is not None:
            mode = ledger.get_run(run_id)["mode"]
            if not modes.get_mode(mode).transactional:
                raise LoadError(f"a crash before a commit needs the transactional mode; run {run_id} is {mode}")
            if crash_before_commit_at < 0:
                raise LoadError(f"the crash point must be >= 0, got {crash_before_commit_at}")
        todo = [p["producer"] for p in producers if p["status"] != "completed"]
        if crash_before_commit_at is not None and (producer is None and len(producers) > 1):
            raise LoadError("a crash point needs one producer: name it with --producer")
        if producer is not None:
            _drive(ledger, run_id, producer, kafka_conf, progress, on_progress, crash_before_commit_at)
            return summary(ledger, run_id, producer)
        if len(producers) == 1 or len(todo) == 1:
            _drive(ledger, run_id, (todo or [0])[0], kafka_conf, progress, on_progress, crash_before_commit_at)
        elif todo:
            wait_producers(ledger, run_id, spawn_producers(run_id, todo, kafka_conf, ledger.db), progress, on_progress)
        return summary(ledger, run_id)
    finally:
        ledger.close()


def spawn_producers(
    run_id: str, producers: list[int], kafka_conf: dict, db: Database, crash_before_commit_at: int | None = None
) -> dict[int, subprocess.Popen]:
    """One local process per producer slice (`cli load resume --producer P`), each writing its
    stderr to a file of its own for the error a failure reports (and, armed with a crash point,
    its `CRASH` line to stdout)."""
    procs = {}
    armed = [] if crash_before_commit_at is None else ["--crash-before-commit-at", str(crash_before_commit_at)]
    for p in producers:
        stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed once the process has been waited for)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "delivery_semantics.entry.cli",
                "load",
                "resume",
                "--run-id",
                run_id,
                "--producer",
                str(p),
                "--no-progress",
                *armed,
            ],
            stdout=subprocess.PIPE if armed else subprocess.DEVNULL,
            stderr=stderr,
            text=True,
            env=child_process_env(kafka_conf, db),
        )
        proc.stderr_file = stderr
        procs[p] = proc
    return procs


def wait_producers(
    ledger: Ledger,
    run_id: str,
    procs: dict[int, subprocess.Popen],
    progress: bool = False,
    on_progress: ProgressCallback | None = None,
) -> None:
    """Waits for every producer process, reporting the run's outcomes so far; a producer that
    fails is an error naming it, after the others have ended."""
    run = ledger.get_run(run_id)
    bar = _progress_bar(run["messages"], progress)
    done = 0
    try:
        while any(p.poll() is None for p in procs.values()):
            time.sleep(1.0)
            if bar is not None or on_progress is not None:
                now = ledger.outcome_count(run_id)
                if bar is not None:
                    bar.update(min(now, run["messages"]) - done)
                done = min(now, run["messages"])
                if on_progress is not None:
                    on_progress(run_id, now)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        if bar is not None:
            bar.close()
    failed = {n: p for n, p in procs.items() if p.returncode != 0}
    tails = {n: stderr_tail(p) for n, p in failed.items()}
    for p in procs.values():
        p.stderr_file.close()
    if failed:
        n = next(iter(failed))
        raise RuntimeError(
            f"producer {n} of run {run_id} failed ({len(failed)} of {len(procs)}): {tails[n].splitlines()[-1]}"
        )


def stderr_tail(proc: subprocess.Popen, chars: int = 1500) -> str:
    """The end of what a producer process spawned by spawn_producers wrote to stderr."""
    proc.stderr_file.seek(0)
    return proc.stderr_file.read()[-chars:].strip() or f"exit {proc.returncode}"


def _drive(
    ledger: Ledger,
    run_id: str,
    producer: int,
    kafka_conf: dict,
    progress: bool,
    on_progress: ProgressCallback | None = None,
    crash_before_commit_at: int | None = None,
) -> None:
    """The producer's slice, session after session: a session whose producer went fatal is
    followed by a new one (its init fences the old and ends its open transaction), which resolves
    and resends what was not acked when the application resends, and goes on with the rest."""
    for restart in range(FATAL_RESTARTS + 1):
        try:
            _drive_session(ledger, run_id, producer, kafka_conf, progress, on_progress, crash_before_commit_at)
            return
        except Exception as e:
            if restart == FATAL_RESTARTS or not _fatal(e):
                raise
            print(f"producer {producer}: {type(e).__name__}: {e}; a new producer takes over", file=sys.stderr)


def _fatal(e: BaseException) -> bool:
    """Whether the producer can send no more (a new one could)."""
    from confluent_kafka import KafkaError, KafkaException

    return isinstance(e, ProducerFenced) or (
        isinstance(e, KafkaException) and bool(e.args) and isinstance(e.args[0], KafkaError) and e.args[0].fatal()
    )


def _drive_session(
    ledger: Ledger,
    run_id: str,
    producer: int,
    kafka_conf: dict,
    progress: bool,
    on_progress: ProgressCallback | None = None,
    crash_before_commit_at: int | None = None,
) -> None:
    ledger.claim_run(run_id, producer)
    run = ledger.get_run(run_id)
    mine = ledger.producers(run_id)[producer]
    mode = modes.get_mode(run["mode"])
    session = mine["sessions"] + 1
    # The stored settings cross the allowlist again: a row of the ledger is data, and a rewritten
    # one must not reach the client with a key no file or form could give.
    stored = {k: v for k, v in run["producer_config"].items() if v != "****"}
    conf = {
        **runtime(run["client"]).connection(kafka_conf),
        **client_settings.checked(run["client"], stored, client_settings.FILE),
    }
    if mine["transactional_id"]:
        conf["transactional.id"] = mine["transactional_id"]
    started = time.monotonic()
    now = datetime.now(UTC)
    ledger.update_producer(
        run_id, producer, status="running", sessions=session, started_at=mine["started_at"] or now, error=None
    )
    ledger.update_run(run_id, status="running", started_at=run["started_at"] or now, error=None)
    gen = Generator(
        run_id,
        run["keys"],
        run["payload_bytes"],
        run["seed"],
        key_base=producer * run["keys"],
        layout=run["record_layout"],
    )
    start, stop = mine["n_start"], mine["n_stop"]
    bar = _progress_bar(stop - start, progress)
    session_runner = _Session(
        ledger,
        run,
        mine,
        mode,
        session,
        open_client(run["client"], conf, run["topic"], gen, mode.transactional),
        gen,
        bar,
        on_progress,
        crash_before_commit_at,
    )
    resends = session_runner.resends
    try:
        with few_collections():
            if session > 1:
                # What the last session was committing is settled whether or not it is sent again:
                # the ledger then says the coordinator aborted it (or that it committed).
                session_runner.resolve_in_doubt(kafka_conf)
            if session > 1 and resends:
                # at_most_once never resends: an event the ledger has no outcome for may have been sent.
                session_runner.resend_unacked()
            session_runner.send_new(ledger.next_n(run_id, start, stop), stop)
            if resends:
                for _ in range(RESEND_ROUNDS):
                    if not session_runner.resend_unacked():
                        break
            session_runner.close()
        status, error = "completed", None
    except BaseException as e:
        status, error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        session_runner.close()
        if bar is not None:
            bar.close()
        ledger.update_producer(
            run_id,
            producer,
            status=status,
            error=error,
            produced=mine["produced"] + session_runner.client.produced,
            active_seconds=mine["active_seconds"] + (time.monotonic() - started),
            ended_at=datetime.now(UTC),
        )
        total(ledger, run_id)


def open_client(client: str, conf: dict, topic: str, gen: Generator, transactional: bool) -> ProducerClient:
    """The producer client of a run's session, given its whole configuration."""
    return runtime(client)(conf, topic, gen, transactional=transactional)


def total(ledger: Ledger, run_id: str) -> None:
    """The run's row from its producers' rows. Sessions and produce() calls are summed over every
    producer's sessions. Once no producer is running the run is sealed (when every one completed;
    the index build counts as load time) and counted; its active time is the longest producer's,
    since they run side by side."""
    with ledger.finishing(run_id):
        producers = ledger.producers(run_id)
        statuses = {p["status"] for p in producers}
        errors = [
            p["error"] if len(producers) == 1 else f"producer {p['producer']}: {p['error']}"
            for p in producers
            if p["error"]
        ]
        fields = {
            "sessions": sum(p["sessions"] for p in producers),
            "produced": sum(p["produced"] for p in producers),
            "error": "; ".join(errors) or None,
        }
        if statuses & {"created", "running"}:
            ledger.update_run(run_id, status="running", **fields)
            return
        t0 = time.monotonic()
        if statuses == {"completed"}:
            ledger.seal(run_id)
        active = max(p["active_seconds"] for p in producers) + (time.monotonic() - t0)
        counts = ledger.counts(run_id)
        done = counts["acked"] + counts["sent_unacked"]
        ledger.update_run(
            run_id,
            **fields,
            status="completed" if statuses == {"completed"} else "failed",
            acked=counts["acked"],
            sent_unacked=counts["sent_unacked"],
            failed=counts["failed"],
            unknown=counts["unknown"],
            pending=counts["pending"],
            aborted_attempts=counts["aborted_attempts"],
            ack_p50_ms=counts["ack_p50_ms"],
            ack_p99_ms=counts["ack_p99_ms"],
            acked_ends=counts["acked_ends"],
            active_seconds=active,
            records_per_sec=done / active if active > 0 else None,
            ended_at=max(p["ended_at"] for p in producers),
        )


def summary(ledger: Ledger, run_id: str, producer: int | None = None) -> RunSummary:
    r = ledger.get_run(run_id)
    return RunSummary(
        r["run_id"],
        r["mode"],
        r["topic"],
        r["status"] if producer is None else ledger.producers(run_id)[producer]["status"],
        r["messages"],
        r["produced"],
        r["acked"] or 0,
        r["sent_unacked"] or 0,
        r["failed"] or 0,
        r["unknown"] or 0,
        r["pending"] or 0,
        r["aborted_attempts"] or 0,
        r["records_per_sec"],
        r["ack_p50_ms"],
        r["ack_p99_ms"],
        r["sessions"],
        r["producers"],
        producer,
    )


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="ev", unit_scale=True, desc="produce", file=sys.stderr)


class _Session:
    """One producer session over its slice of the run: events go to the ledger one batch ahead of
    being produced, and outcomes follow each batch. Each has a writer thread and a connection of
    its own, so a batch's write-ahead row never waits behind the outcomes written before it."""

    def __init__(
        self,
        ledger: Ledger,
        run: dict,
        mine: dict,
        mode: catalog.DeliveryMode,
        session: int,
        client: ProducerClient,
        gen: Generator,
        bar,
        on_progress: ProgressCallback | None = None,
        crash_before_commit_at: int | None = None,
    ):
        self.ledger, self.run, self.mode, self.session, self.client, self.gen, self.bar = (
            ledger,
            run,
            mode,
            session,
            client,
            gen,
            bar,
        )
        self.on_progress = on_progress
        self.run_id = run["run_id"]
        self.producer, self.start, self.stop = mine["producer"], mine["n_start"], mine["n_stop"]
        self.crash_before_commit_n = None if crash_before_commit_at is None else self.start + crash_before_commit_at
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer")
        self.ahead, self.ahead_writer = Ledger(ledger.db), ThreadPoolExecutor(1, thread_name_prefix="ledger-ahead")
        # Transactional: the transaction committing beside the next one's writing, and its records;
        # and the transactions to send again, in order, before any new one.
        self.committer = ThreadPoolExecutor(1, thread_name_prefix="committer")
        self._committing: tuple[Future, list[tuple[int, int]]] | None = None
        self._again: deque[list[tuple[int, int]]] = deque()
        # A load told not to resend what failed drops a transaction that failed to commit (one the
        # application aborted is sent again all the same, as are those aborted behind it for order).
        self.resends = mode.resends_unacked if run.get("resends_failed") is None else bool(run["resends_failed"])
        self.rng = random.Random(run["seed"] * 1_000_003 + session + 7919 * self.producer)  # noqa: S311 (abort decisions of a seeded load, not cryptography)
        self.txn_no = ledger.max_txn_no(self.run_id, self.producer)
        self.rate = max(1, run["target_rate"] // run["producers"]) if run["target_rate"] else 0
        self.batch_size = min(10_000, max(1, self.rate // 10)) if self.rate else 10_000
        if mode.transactional:
            self.batch_size = max(run["txn_size"], (self.batch_size // run["txn_size"]) * run["txn_size"])
        self._t0 = time.monotonic()
        # The run's own deadline, from its size: settings that would hold it for longer end it instead.
        self.budget_seconds = budgets.load_seconds(run["messages"], run["target_rate"] or 0)
        self.deadline = self._t0 + self.budget_seconds
        self._counted_before = (mine["produced"], mine["active_seconds"])
        self._sent_this_session = 0
        # A paced load keeps its rate from its first send, not from the session's set-up (the
        # producer's init and the ledger's first batch took seconds, and it then sent all at once).
        self._paced_from: float | None = None
        # Event numbers whose latest outcome in this session is not an ack: when it is empty after a
        # first session, the resend round needs no anti-join over the whole run.
        self.not_acked: set[int] = set()
        self.ledger_has_older_unacked = session > 1
        self._closed = False

    def send_new(self, start: int, stop: int) -> None:
        pending: Future | None = None
        batches = self.gen.batches(start, stop, self.batch_size)
        batch = next(batches, None)
        if batch is not None:
            pending = self._record_events(batch)
        while batch is not None:
            pending.result()  # this batch is in the ledger: now it may be sent
            nxt = next(batches, None)
            if nxt is not None:
                pending = self._record_events(nxt)
            self._send(batch)
            batch = nxt
        self._finish_outcomes()

    def within_budget(self) -> None:
        if time.monotonic() > self.deadline:
            raise RunBudgetExceeded(
                f"the load went past its budget of {self.budget_seconds} s (its size's, or SEMANTICS_RUN_MAX_SECONDS): "
                "its settings hold records too long"
            )

    def _record_events(self, batch) -> Future:
        return self.ahead_writer.submit(
            self.ahead.record_event_range,
            self.run_id,
            batch[0][0],
            batch[-1][0] + 1,
            self.gen.keys,
            batch[0][1],
            self.gen.key_base,
        )

    def resolve_in_doubt(self, kafka_conf: dict) -> None:
        """Settles the transaction a killed producer was committing. The new producer has already
        fenced the old one (init_transactions), so that transaction is now committed or aborted
        for good; a read_committed read of its exact positions tells which."""
        in_doubt = self.ledger.in_doubt(self.run_id, self.producer)
        if not in_doubt:
            return
        visible = readback.committed_positions(kafka_conf, self.run["topic"], {(p, o) for _, p, o, _, _ in in_doubt})
        self.ledger.copy_outcomes(
            self.run_id,
            self.session,
            [
                Outcome(
                    eid,
                    "acked" if (p, o) in visible else "aborted",
                    p,
                    o,
                    None,
                    txn,
                    None if (p, o) in visible else FENCED_AT_RESTART,
                    n,
                )
                for eid, p, o, txn, n in in_doubt
            ],
            self.producer,
        )

    def resend_unacked(self) -> int:
        """Sends again every event of the run that has no ack; returns how many."""
        self._finish_outcomes()
        if not self.not_acked and not self.ledger_has_older_unacked:
            return 0
        self.ledger_has_older_unacked = False
        count = 0
        chunk = []
        for n, publish_at_ms in self.ledger.unacked(self.run_id, self.start, self.stop):
            chunk.append((n, publish_at_ms))
            if len(chunk) >= self.batch_size:
                self._send(chunk)
                count += len(chunk)
                chunk = []
        if chunk:
            self._send(chunk)
            count += len(chunk)
        self._finish_outcomes()
        return count

    def _send(self, records: list[tuple[int, int]]) -> None:
        self.within_budget()
        if self._paced_from is None:
            self._paced_from = time.monotonic()
        if self.mode.transactional:
            self._send_transactions(records)
        else:
            self.client.send(records)
            self._record(self.client.drain())
        self._throttle(len(records))
        if self.bar is not None:
            self.bar.update(len(records))
        if self.on_progress is not None:
            self.on_progress(self.run_id, self.client.produced)

    def _send_transactions(self, records: list[tuple[int, int]]) -> None:
        """The records in transactions of txn_size, after any to send again. A transaction's written
        row and commit run in the committer thread while the next transaction is written under the
        other transactional.id, and the last one is left committing (`_end_transactions`). A
        transaction is committed only after the one before it: if that one was aborted, this one is
        aborted too and both go again at once, in order, so per-key order holds."""
        size = self.run["txn_size"]
        fresh = deque(records[i : i + size] for i in range(0, len(records), size))
        while self._again or fresh:
            if self._again:
                txn, abort = self._again.popleft(), False
            else:
                txn = fresh.popleft()
                abort = self.rng.random() < (self.run["abort_ratio"] or 0.0)
            self.txn_no += 1
            written = self.client.write_transaction(txn, self.txn_no)
            if self._committing is not None:
                before, self._committing = self._committing, None
                if not self._committed(before):
                    self.client.abort(written, ABORTED_BEHIND)
                    self._record(self.client.drain())
                    self._again.extendleft([txn, before[1]] if self.resends else [txn])
                    continue
            if abort:
                self.client.abort(written, ABORTED_BY_THE_APPLICATION)
                self._record(self.client.drain())
                self._again.appendleft(txn)
                continue
            self._committing = (self.committer.submit(self.client.commit, written, self._record_written), txn)

    def _end_transactions(self) -> None:
        """Waits for the transaction still committing, and sends it again if it was aborted."""
        while self._committing is not None:
            before, self._committing = self._committing, None
            if not self._committed(before) and self.resends:
                self._again.append(before[1])
                self._send_transactions([])

    def _committed(self, committing: tuple[Future, list[tuple[int, int]]]) -> bool:
        """Waits for a transaction's commit. Its acks (or aborts) are recorded at once, before the
        next transaction's written row, so a crash leaves at most the committing one in doubt."""
        committed = committing[0].result()
        self._record(self.client.drain())
        return committed

    def _record(self, reports: Reports) -> Future:
        # A drain's failures and aborts come before its acks: an event aborted, then resent and
        # committed, ends acked.
        for o in reports.others:
            if o.status in ("acked", "sent"):
                self.not_acked.discard(o.n)
            elif o.status != "written":
                self.not_acked.add(o.n)
        if self.not_acked:
            for (status, _), group in reports.clean.items():
                if status != "written":
                    self.not_acked.difference_update(r[0] for r in group)
            for group in reports.committed.values():
                self.not_acked.difference_update(r[0] for r in group)
        return self.writer.submit(
            self.ledger.copy_outcomes, self.run_id, self.session, reports, self.producer, self._progress()
        )

    def _progress(self) -> dict:
        """The slice's produce() calls and active time so far, sessions before this one included:
        written with each batch's outcomes, so a killed session's work is counted up to there."""
        produced, active = self._counted_before
        return {"produced": produced + self.client.produced, "active_seconds": active + time.monotonic() - self._t0}

    def _record_written(self, outcomes: Reports) -> None:
        # Synchronous, and after every earlier outcome: the commit must not start before these are durable.
        self.writer.submit(
            self.ledger.copy_outcomes, self.run_id, self.session, outcomes, self.producer, self._progress()
        ).result()
        if self.crash_before_commit_n is not None:
            written = [(txn_no, r[0]) for (_, txn_no), group in outcomes.clean.items() for r in group]
            if written and max(n for _, n in written) >= self.crash_before_commit_n:
                crash_here(
                    "before_commit",
                    run_id=self.run_id,
                    producer=self.producer,
                    session=self.session,
                    txn_no=written[0][0],
                    written=len(written),
                )

    def _throttle(self, n: int) -> None:
        self._sent_this_session += n
        if self.rate:
            ahead = self._sent_this_session / self.rate - (time.monotonic() - self._paced_from)
            if ahead > 0:
                self.client.pause(ahead)

    def _finish_outcomes(self) -> None:
        """All reports in, all transactions ended, all outcomes in the ledger."""
        self._end_transactions()
        conf = self.run["producer_config"]
        timeout_ms = conf.get("message.timeout.ms") or conf.get("delivery.timeout.ms") or 120000
        remaining = self.client.flush(min(float(timeout_ms) / 1000 + 30, max(30.0, self.deadline - time.monotonic())))
        self._record(self.client.drain()).result()
        if remaining:
            raise RuntimeError(f"{remaining} messages still undelivered after flush")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.committer.shutdown(wait=True)  # after a failure, a commit may still be running
            self._record(self.client.drain()).result()
        finally:
            self.writer.shutdown(wait=True)
            self.ahead_writer.shutdown(wait=True)
            self.ahead.close()
            self.client.close()
