"""Predict, then prove: the rule catalog's findings on a producer, its topic and a consumer, or on
a connector pipeline's two connectors, each put to the fewest runs that can show it, then what
the checker observed beside what the rule predicted. A consumer's finding runs as the consumer
strategy that does what its setting does (librdkafka's auto-commit on its timer, a commit before
the write or after it, a new group at `latest`, a poll loop slower than its interval), with the
consumer settings it reads, on a fresh input run, under a consumer crash where the finding needs
one. A connector's
runs as its pipeline under the rule's scenario, its source's findings read in the topic and its
sink's in the sink table.

A finding is confirmed when its run shows the kind it predicts (a count above zero, at the
isolation level that kind is read at), and not confirmed when the run shows none of it: then the
rule or the checker is wrong, and the run says which to look at. A finding no run of the subject
can expose, or of a family its runs do not exercise, is listed as not put to a run, with why.

With `reuse`, a finding is read from the newest run already made of the same mode, client,
producer and topic settings and scenario (or consumer strategy, or pipeline) that the checker
has judged, and a run is made only where there is none: CI proves what its suite already ran.
Every proof is kept in `proofs` (sql/V035__proofs.sql), for the report and the UI.

    local/semantics prove --mode NAME [--set producer.KEY=VALUE | topic.KEY=VALUE | consumer.KEY=VALUE ...]
    local/semantics prove --pipeline NAME
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from delivery_semantics import catalog, modes, rule_catalog

# The one application key of a producer here: whether the run's load sends again what failed (the
# delivery rules' losses are an application's that drops its failures; the platform's modes resend).
RESENDS_FAILED = "app.resends_failed"
# What a run's topic may be made with, from a user's text: the settings the topic rules read.
TOPIC_SETTINGS = {
    "min.insync.replicas": r"[1-3]",
    "unclean.leader.election.enable": r"true|false",
    "replication.factor": r"[1-3]",
    "retention.ms": r"-1|[0-9]{1,12}",
    "retention.bytes": r"-1|[0-9]{1,12}",
    "cleanup.policy": r"delete|compact|compact,delete|delete,compact",
    # How long after the run its checker reads the topic: the audit's window the retention rules read.
    "app.audit.window.ms": r"[0-9]{1,6}",
}
# A run's topic that deletes or compacts rolls a segment a second and cleans at the least dirt, so
# that the broker's retention check and cleaner act within the run (a team's topic rolls weekly and
# is cleaned later: the same records go, days later). The local stack checks retention every 5 s.
CLEANED_TOPIC = {"segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}
# ... and its load is spread over CLEANED_LOAD_S: a segment rolls only when a record arrives after
# segment.ms, and the broker never cleans the active one, so a load done within one segment.ms
# leaves nothing to clean (3,000 transactional events took about 1 s here, and once did in CI).
CLEANED_LOAD_S = 6
# The findings read once the broker has deleted or compacted the run's records, and how long the
# proof waits for that at most.
CLEANUP_RULES = ("retention_shorter_than_the_audit", "retention_by_size", "compacted_topic")
CLEANUP_KEYS = ("cleanup.policy", "retention.ms", "retention.bytes")
CLEANUP_WAIT_S = 180
# What a consumer may be described with: the settings the consumer rules read.
CONSUMER_SETTINGS = {
    "enable.auto.commit": r"true|false",
    "auto.commit.interval.ms": r"[0-9]{1,9}",
    "auto.offset.reset": r"earliest|latest|none",
    "isolation.level": r"read_committed|read_uncommitted",
    "max.poll.interval.ms": r"[0-9]{1,9}",
    "app.commit": r"before_process|after_process|transactional",
    "app.dedup": r"true|false",
    "app.processing.ms": r"[0-9]{1,9}",
}
# The consumer strategy that does what a consumer rule reads, and the scenario its run needs, so
# that the run shows the kind for the rule's reason and no other: librdkafka's auto-commit crashing
# once its timer has committed a polled batch, a consumer that commits before it has written, or
# after without skipping what it already applied, a new group at `latest`, and a poll loop that
# stalls past its interval. The run takes the consumer settings its strategy reads
# (catalog.Strategy.settings) from the request. No strategy reads uncommitted: that finding is not
# put to a run.
CONSUMER_STRATEGY = {
    "auto_commit": ("auto_commit", "consumer_crash"),
    "commit_before_process": ("commit_before_process", "consumer_crash"),
    "commit_after_process_without_dedup": ("process_then_commit", "consumer_crash"),
    "auto_offset_reset_latest": ("start_at_latest", "none"),
    "max_poll_interval_shorter_than_processing": ("slow_poll_loop", "none"),
}
# Where a pipeline run counts what a connector rule predicts: in the topic for a source's setting,
# in the sink table for a sink's.
PIPELINE_STAGES = {"source": catalog.OUTBOX_TOPIC, "sink": catalog.TOPIC_SINK}


class CheckerFailed(RuntimeError):
    """The proof's runs were made, and the Spark application judging them failed (exit 1)."""


class ProveError(ValueError):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True)
class Planned:
    scenario: str
    predictions: tuple[rule_catalog.Prediction, ...]
    strategy: str | None = None  # a consumer run of this strategy; None: a run of the subject

    @property
    def label(self) -> str:
        return f"{self.strategy} x {self.scenario}" if self.strategy else self.scenario


@dataclass
class Outcome:
    prediction: rule_catalog.Prediction
    scenario: str | None = None
    run_id: str | None = None
    isolation: str | None = None
    observed: int | None = None
    why: str = ""
    reused: bool = False

    @property
    def confirmed(self) -> bool | None:
        return None if self.observed is None else self.observed > 0

    def row(self) -> dict:
        r = self.prediction.rule
        return {
            "rule": r.name,
            "family": r.family,
            "settings": self.prediction.settings,
            "predicted": r.kind,
            "scenario": self.scenario,
            "run_id": self.run_id,
            "reused": self.reused,
            "isolation": self.isolation,
            "observed": self.observed,
            "confirmed": self.confirmed,
            "why": self.why,
        }


@dataclass
class Request:
    subject: catalog.Subject  # a mode (a preset or a mode file), or a connector pipeline
    client: str | None  # the mode's producer client; None for a pipeline
    producer: dict[str, str] = field(default_factory=dict)
    topic: dict[str, str] = field(default_factory=dict)
    consumer: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.subject.name

    @property
    def proof(self) -> SubjectProof:
        """How this subject's findings are put to runs."""
        return PROOFS[self.subject.side]

    def given(self) -> dict[str, dict[str, str]]:
        return {f: s for f in ("producer", "topic", "consumer") if (s := getattr(self, f))}

    def overrides(self) -> dict[str, str]:
        """The producer settings the client takes: not the application's."""
        return {k: v for k, v in self.producer.items() if not k.startswith("app.")}

    def resends_failed(self) -> bool | None:
        """Whether the run's load sends again what failed, when said; None: the mode's."""
        said = self.producer.get(RESENDS_FAILED)
        return None if said is None else said == "true"


def request(mode: str | None, sets: list[str], client: str | None = None, pipeline: str | None = None) -> Request:
    """The mode (or pipeline) and the settings over it, checked: `producer.KEY=VALUE` through the
    client's own allowlist, `topic.` and `consumer.` through TOPIC_SETTINGS and CONSUMER_SETTINGS."""
    if (mode is None) == (pipeline is None):
        raise ProveError("prove one subject: --mode NAME or --pipeline NAME")
    if pipeline is not None:
        try:
            subject = catalog.get_pipeline(pipeline)
        except catalog.CatalogError as e:
            raise ProveError(str(e)) from None
        if sets or client:
            raise ProveError("a pipeline is proved with its own connectors' settings: no --set or --client")
        return Request(subject, None)
    try:
        mode_obj = modes.get_mode(mode)
    except catalog.CatalogError as e:
        raise ProveError(str(e)) from None
    req = Request(mode_obj, client or mode_obj.client or catalog.DEFAULT_CLIENT)
    if req.client not in mode_obj.clients:
        raise ProveError(f"mode {mode} runs on {', '.join(mode_obj.clients)}, not {req.client}")
    for pair in sets:
        name, sep, value = pair.partition("=")
        family, dot, key = name.partition(".")
        if not sep or not dot or not key or "\n" in pair or "\r" in pair:
            raise ProveError(f"--set {pair[:80]!r} is not FAMILY.KEY=VALUE")
        if family == "producer":
            if key.startswith("app.") and (key != RESENDS_FAILED or value not in ("true", "false")):
                raise ProveError(
                    f"--set producer.{key[:60]}={value[:40]!r}: a producer's app. key here is {RESENDS_FAILED}=true|false"
                )
            req.producer[key] = value
        elif family in ("topic", "consumer"):
            allowed = TOPIC_SETTINGS if family == "topic" else CONSUMER_SETTINGS
            if key not in allowed or not re.fullmatch(allowed[key], value):
                said = ", ".join(f"{k} ({p})" for k, p in allowed.items())
                raise ProveError(f"--set {family}.{key[:60]}={value[:40]!r}: a {family} here takes {said}")
            if family == "consumer" and key in catalog.CONSUMER_RUN_SETTINGS:
                lo, hi = catalog.CONSUMER_RUN_SETTINGS[key]
                if not lo <= int(value) <= hi:
                    raise ProveError(f"--set consumer.{key}={value}: a consumer run here takes {lo} to {hi}")
            getattr(req, family)[key] = value
        else:
            raise ProveError(
                f"--set {family[:40]}.*: a mode proves producer, topic and consumer settings "
                "(a connector's: --pipeline NAME)"
            )
    from delivery_semantics.workload.settings import overrides_of

    try:
        overrides_of(req.client, req.overrides())  # the client's allowlist, before any run is made
    except catalog.CatalogError as e:
        raise ProveError(str(e)) from None
    return req


def request_of_form(params: dict) -> tuple[Request, bool | str]:
    """`semantics_prove`'s form (forms.prove_form) as a request, checked as the command's is, and
    its reuse."""
    subject = params.get("subject")
    pipeline = subject if subject in catalog.PIPELINES else None
    req = request(None if pipeline else subject, list(params.get("settings") or []), params.get("client"), pipeline)
    return req, {"yes": True, "no": False, "only": ONLY}[params.get("reuse", "yes")]


def predictions(req: Request) -> list[rule_catalog.Prediction]:
    return req.proof.predictions(req)


def plan(found: list[rule_catalog.Prediction], req: Request) -> tuple[list[Planned], list[Outcome]]:
    """The fewest runs of the subject that can show each finding: a scenario at a time, the one that
    exposes the most findings not yet planned (ties to the rule's own order of scenarios); and the
    findings left out, with why."""
    left: list[Outcome] = []
    # By the finding's place in `found` (a Prediction holds a dict): the runs, (scenario, consumer
    # strategy or None), that can show it.
    open_: dict[int, list[tuple[str, str | None]]] = {}
    for i, p in enumerate(found):
        if p.rule.family not in req.subject.rule_families:
            left.append(Outcome(p, why=f"a {p.rule.family} setting: a {req.proof.noun}'s run does not exercise it"))
            continue
        if p.rule.family == "consumer":
            runnable = [CONSUMER_STRATEGY[p.rule.name][::-1]] if p.rule.name in CONSUMER_STRATEGY else []
            why = "no consumer strategy of the platform does what this setting does"
        else:
            runnable = [(s, None) for s in p.rule.scenarios if req.subject.runs_under(s)]
            why = f"no scenario of {', '.join(p.rule.scenarios)} runs with {req.proof.noun} {req.name}"
        if not runnable:
            left.append(Outcome(p, why=why))
            continue
        open_[i] = runnable
    planned: list[Planned] = []
    while open_:
        counts: dict[tuple[str, str | None], int] = {}
        order: dict[tuple[str, str | None], int] = {}
        for runs in open_.values():
            for r in runs:
                counts[r] = counts.get(r, 0) + 1
                order.setdefault(r, len(order))
        best = max(counts, key=lambda r: (counts[r], -order[r]))
        covered = [i for i, rs in open_.items() if best in rs]
        planned.append(Planned(best[0], tuple(found[i] for i in covered), best[1]))
        for i in covered:
            del open_[i]
    return planned, left


def isolation_of(kind: str, judged: catalog.Subject) -> str:
    """Where a kind is read: copies of aborted transactions only by a read_uncommitted reader;
    anything else at the isolation level of the mode (or strategy) judged."""
    return catalog.READ_UNCOMMITTED if kind == "aborted_visible" else judged.isolation


# `reuse`: make every run (False), read a run made the same way where there is one and make the
# rest (True), or make none (ONLY: what no judged run shows is left, with why).
ONLY = "only"
NOTHING_TO_REUSE = "no judged run made this way to reuse, and new runs were not asked for"


@dataclass
class Made:
    """A proof's runs, made or found: one per planned run (its id, and whether it was made before
    the proof), and the findings put to none. What `judge` reads; JSON between a DAG's tasks."""

    planned: list[Planned]
    runs: list[tuple[str, bool]]
    left: list[Outcome]

    def fresh(self, req: Request) -> list[str]:
        """The producer and consumer runs the checker has yet to judge (a pipeline run judges
        itself)."""
        return [r for r, reused in self.runs if not reused] if req.proof.judged_by_the_checker else []

    def to_json(self) -> dict:
        return {
            "planned": [
                {"scenario": p.scenario, "strategy": p.strategy, "rules": [x.rule.name for x in p.predictions]}
                for p in self.planned
            ],
            "runs": [list(r) for r in self.runs],
            "left": [{"rule": o.prediction.rule.name, "scenario": o.scenario, "why": o.why} for o in self.left],
        }

    @classmethod
    def from_json(cls, req: Request, data: dict) -> Made:
        found = {p.rule.name: p for p in predictions(req)}
        planned = [Planned(p["scenario"], tuple(found[n] for n in p["rules"]), p["strategy"]) for p in data["planned"]]
        left = [Outcome(found[o["rule"]], o["scenario"], why=o["why"]) for o in data["left"]]
        return cls(planned, [(r, bool(reused)) for r, reused in data["runs"]], left)


def prove(req: Request, messages: int = 15_000, seed: int = 11, reuse: bool | str = False) -> list[Outcome]:
    """Each planned run made (or, with `reuse`, found), all the new producer and consumer runs
    reconciled by the checker in one Spark application, each finding's observed count read from
    its run's summary, and the whole proof kept in `proofs`."""
    from delivery_semantics.entry import spark_submit

    made = make_runs(req, messages, seed, reuse)
    if fresh := made.fresh(req):
        done = spark_submit.run(run_id=fresh)
        if done.returncode != 0:
            raise CheckerFailed(f"the checker failed on runs {', '.join(fresh)}: {done.error}")
    return judge(req, made)


def make_runs(req: Request, messages: int = 15_000, seed: int = 11, reuse: bool | str = False) -> Made:
    """The plan's runs: found, with `reuse`, or made (a pipeline's reconciled as it runs); with
    ONLY, none made, and the findings no judged run shows left with why. A run that fails leaves
    its findings with why, and the proof goes on."""
    from confluent_kafka import KafkaException

    from delivery_semantics.history import schema
    from delivery_semantics.plumbing.endpoints import EndpointError

    schema.migrate()  # the runs to reuse are read before any run would migrate the ledger
    planned, left = plan(predictions(req), req)
    runs: list[tuple[str, bool]] = []
    kept: list[Planned] = []
    inputs: list[str] = []  # the one fresh input run the proof's consumer runs read
    for p in planned:
        found = req.proof.reusable(req, p) if reuse else None
        if found:
            runs.append((found["id"], True))
            kept.append(p)
            continue
        if reuse == ONLY:
            left += [Outcome(x, p.label, why=NOTHING_TO_REUSE) for x in p.predictions]
            continue
        try:
            run_id, unproved = req.proof.make_run(req, p, messages, seed, inputs)
        except EndpointError:
            raise  # an endpoint unreachable or refusing its credentials is bad input: exit 2
        except (RuntimeError, KafkaException) as e:
            # Proves nothing either way (a fatal producer error, a nemesis or checker that failed, a
            # run past its budget): its findings are left with why.
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            left += [Outcome(x, p.label, why=f"its run failed: {type(e).__name__}: {first}") for x in p.predictions]
            continue
        left += unproved
        if rest := tuple(x for x in p.predictions if x not in [o.prediction for o in unproved]):
            runs.append((run_id, False))
            kept.append(Planned(p.scenario, rest, p.strategy))
    return Made(kept, runs, left)


def judge(req: Request, made: Made) -> list[Outcome]:
    """Each finding's observed count, read from its run's counts, beside its prediction; the proof
    kept in `proofs`."""
    outcomes: list[Outcome] = []
    for p, (run_id, reused) in zip(made.planned, made.runs, strict=True):
        outcomes += req.proof.judge_run(req, p, run_id, reused)
    outcomes += made.left
    store(req, outcomes)
    return outcomes


class SubjectProof:
    """How a subject's findings are put to runs: made, found again, and read. One per side
    (PROOFS), as each subject's facts are its own (catalog.Subject)."""

    noun: str
    # True: a run is judged by the checker after it is made; False: it judges itself as it runs.
    judged_by_the_checker: bool

    def predictions(self, req: Request) -> list[rule_catalog.Prediction]:
        raise NotImplementedError

    def make_run(
        self, req: Request, p: Planned, messages: int, seed: int, inputs: list[str]
    ) -> tuple[str, list[Outcome]]:
        """The planned run, made; its id, and the findings it leaves unproved, with why."""
        raise NotImplementedError

    def reusable(self, req: Request, p: Planned) -> dict | None:
        """The newest run the checker has judged that was made as this one would be: its id (`id`)."""
        raise NotImplementedError

    def judge_run(self, req: Request, p: Planned, run_id: str, reused: bool) -> list[Outcome]:
        raise NotImplementedError


class ModeProof(SubjectProof):
    """A mode's producer and topic findings, each a run of the mode under a scenario with the
    request's settings; its consumer findings, each a run of the strategy that does what the
    setting does, over one fresh input run."""

    noun = "mode"
    judged_by_the_checker = True

    def predictions(self, req: Request) -> list[rule_catalog.Prediction]:
        given, _, tuned = rule_catalog.of_mode(req.name, req.client)
        given["producer"].update(req.producer)
        given["topic"].update(req.topic)
        if req.consumer:
            given["consumer"] = dict(req.consumer)
        return rule_catalog.predict(
            given, req.client, {k: v for k, v in tuned.items() if k.split(".", 1)[1] not in req.producer}
        )

    def make_run(
        self, req: Request, p: Planned, messages: int, seed: int, inputs: list[str]
    ) -> tuple[str, list[Outcome]]:
        from delivery_semantics.workload import load, scenarios

        if p.strategy:
            if not inputs:
                inputs.append(_input_run(messages, seed))
            return _consumer_run(p.strategy, p.scenario, _run_settings(req, p.strategy), inputs[0]), []
        topic = topic_of_run(req, p)
        spec = load.LoadSpec(
            mode=req.name,
            messages=messages,
            seed=seed,
            overrides=req.overrides(),
            client=req.client,
            resends_failed=req.resends_failed(),
            rate=-(-messages // CLEANED_LOAD_S) if CLEANED_TOPIC.items() <= topic.items() else 0,
        )
        run_id = scenarios.run(spec, p.scenario, topic_config=topic).run_id
        cleanup = [x for x in p.predictions if x.rule.name in CLEANUP_RULES]
        if cleanup and not _await_cleanup(run_id, rule_catalog._int(req.topic.get("app.audit.window.ms")) / 1000):
            # Not a refutation: the broker has yet to act (its retention check or cleaner runs later
            # than a proof waits), so what the checker would read says nothing.
            why = f"the broker had deleted or compacted none of run {run_id} within {CLEANUP_WAIT_S} s"
            return run_id, [Outcome(x, p.label, run_id, why=why) for x in cleanup]
        return run_id, []

    def reusable(self, req: Request, p: Planned) -> dict | None:
        from delivery_semantics.plumbing.db import query

        if p.strategy:
            settings = {**catalog.get_strategy(p.strategy).settings, **_run_settings(req, p.strategy)}
            rows = query(
                """SELECT c.consumer_run_id AS id FROM consumer_runs c
                   WHERE c.strategy = %s AND c.scenario = %s AND c.status = 'completed' AND c.settings = %s::jsonb
                     AND EXISTS (SELECT 1 FROM reconcile_summary s WHERE s.reconciliation_id = c.consumer_run_id)
                   ORDER BY c.created_at DESC LIMIT 1""",
                (p.strategy, p.scenario, json.dumps(settings)),
            )
            return rows[0] if rows else None
        from delivery_semantics.workload.settings import overrides_of

        topic = {**catalog.get_scenario(p.scenario).topic_config, **topic_of_run(req, p)}
        # As a run keeps them: under the client's own names (delivery.timeout.ms is librdkafka's
        # message.timeout.ms).
        stored_settings = overrides_of(req.client, req.overrides())
        rows = query(
            """SELECT r.run_id AS id FROM runs r
               WHERE r.mode = %s AND r.client = %s AND r.scenario = %s AND r.status = 'completed'
                 AND r.settings = %s::jsonb AND r.topic_config = %s::jsonb
                 AND r.resends_failed IS NOT DISTINCT FROM %s
                 AND EXISTS (SELECT 1 FROM reconcile_summary s
                             WHERE s.reconciliation_id = r.run_id AND s.audit IS NULL)
               ORDER BY r.created_at DESC LIMIT 1""",
            (req.name, req.client, p.scenario, json.dumps(stored_settings), json.dumps(topic), req.resends_failed()),
        )
        return rows[0] if rows else None

    def judge_run(self, req: Request, p: Planned, run_id: str, reused: bool) -> list[Outcome]:
        """Each finding's count in its run's summary at the isolation level its kind is read at."""
        from delivery_semantics.plumbing.db import query

        judged = catalog.get_strategy(p.strategy) if p.strategy else req.subject
        summaries = {
            s["isolation"]: s
            for s in query("SELECT * FROM reconcile_summary WHERE reconciliation_id = %s AND audit IS NULL", (run_id,))
        }
        outcomes = []
        for pred in p.predictions:
            iso = isolation_of(pred.rule.kind, judged)
            if iso not in summaries:
                seen, why = None, f"run {run_id} has no summary at {iso}: the checker did not judge it"
            else:
                seen = judged.counts(summaries[iso]).observe(pred.rule.kind)
                why = "" if seen is not None else f"run {run_id}'s checker could not count {pred.rule.kind}"
            outcomes.append(Outcome(pred, p.label, run_id, iso, seen, why, reused))
        return outcomes


class PipelineProof(SubjectProof):
    """A pipeline's connector findings, each a run of the pipeline under a scenario; a source's
    finding read in its topic, a sink's in its sink table (PIPELINE_STAGES)."""

    noun = "pipeline"
    judged_by_the_checker = False

    @staticmethod
    def findings(name: str) -> list[tuple[rule_catalog.Prediction, str]]:
        """Each connector's findings with its role (source or sink), each rule once, source first."""
        seen: dict[str, tuple[rule_catalog.Prediction, str]] = {}
        for role, given in rule_catalog.of_pipeline(name).items():
            for p in rule_catalog.predict(given):
                seen.setdefault(p.rule.name, (p, role))
        return list(seen.values())

    def predictions(self, req: Request) -> list[rule_catalog.Prediction]:
        return [p for p, _ in self.findings(req.name)]

    def make_run(
        self, req: Request, p: Planned, messages: int, seed: int, inputs: list[str]
    ) -> tuple[str, list[Outcome]]:
        from delivery_semantics.entry import pipeline
        from delivery_semantics.workload.connector_pipeline import PipelineSpec

        row = pipeline.run(PipelineSpec(req.name, p.scenario))
        if row.get("status") != "reconciled":
            raise RuntimeError(f"pipeline run {row.get('run_id')} ended {row.get('status')}: {row.get('error')}")
        return row["run_id"], []

    def reusable(self, req: Request, p: Planned) -> dict | None:
        from delivery_semantics.plumbing.db import query

        rows = query(
            "SELECT *, run_id AS id FROM pipeline_runs WHERE pipeline = %s AND scenario = %s "
            "AND status = 'reconciled' ORDER BY created_at DESC LIMIT 1",
            (req.name, p.scenario),
        )
        return rows[0] if rows else None

    def judge_run(self, req: Request, p: Planned, run_id: str, reused: bool) -> list[Outcome]:
        from delivery_semantics.plumbing.db import query

        roles = {x.rule.name: role for x, role in self.findings(req.name)}
        [row] = query("SELECT * FROM pipeline_runs WHERE run_id = %s", (run_id,))
        counts = req.subject.counts(row)
        outcomes = []
        for pred in p.predictions:
            role = roles[pred.rule.name]
            seen = counts.observe(pred.rule.kind, PIPELINE_STAGES[role])
            why = "" if seen is not None else f"a pipeline run does not count {pred.rule.kind} at its {role}"
            outcomes.append(Outcome(pred, p.label, run_id, req.subject.isolation, seen, why, reused))
        return outcomes


PROOFS: dict[str, SubjectProof] = {catalog.PRODUCER: ModeProof(), catalog.PIPELINE_SIDE: PipelineProof()}


def topic_of_run(req: Request, p: Planned) -> dict[str, str]:
    """The topic config the planned producer run is made with: the request's Kafka keys (not `app.`
    ones), a min.insync.replicas no higher than a replication factor given without it, and
    CLEANED_TOPIC where records are deleted or compacted. Only a run that proves a cleanup finding
    deletes or compacts: on another, records the broker removed would be counted as the loss the
    run is there to show (a compacted partitioned-leader run read 2,584 acked events lost)."""
    from delivery_semantics.plumbing import topics

    topic = {k: v for k, v in req.topic.items() if not k.startswith("app.")}
    if not any(x.rule.name in CLEANUP_RULES for x in p.predictions):
        topic = {k: v for k, v in topic.items() if k not in CLEANUP_KEYS}
    if "replication.factor" in topic and "min.insync.replicas" not in topic:
        topic["min.insync.replicas"] = str(min(int(topic["replication.factor"]), topics.MIN_INSYNC_REPLICAS))
    cleans = "compact" in topic.get("cleanup.policy", "") or any(
        rule_catalog._int(topic.get(k), -1) >= 0 for k in ("retention.ms", "retention.bytes")
    )
    return {**topic, **CLEANED_TOPIC} if cleans else topic


def _await_cleanup(run_id: str, window_s: float) -> bool:
    """The audit's window, then until the broker has deleted or compacted some of the run's acked
    events (fewer distinct events readable than were acked), at most CLEANUP_WAIT_S: what the
    checker then reads is what an audit would. False when the broker had not by then."""
    import time

    from delivery_semantics.plumbing.db import query
    from delivery_semantics.plumbing.endpoints import kafka_config
    from delivery_semantics.workload import readback

    [run] = query("SELECT topic, acked FROM runs WHERE run_id = %s", (run_id,))
    time.sleep(min(window_s, CLEANUP_WAIT_S))
    deadline = time.monotonic() + CLEANUP_WAIT_S
    while time.monotonic() < deadline:
        if len({r.event_id for r in readback.read_topic(kafka_config(), run["topic"])}) < int(run["acked"] or 0):
            return True
        time.sleep(5)
    return False


def _run_settings(req: Request, strategy: str) -> dict[str, str]:
    """The request's consumer settings that the strategy's run reads."""
    return {k: v for k, v in req.consumer.items() if k in catalog.get_strategy(strategy).settings}


def _input_run(messages: int, seed: int) -> str:
    """A fresh input run for the proof's consumer runs: the catalog's input mode, no fault."""
    from delivery_semantics.workload import load, scenarios

    return scenarios.run(load.LoadSpec(mode=catalog.CONSUMER_INPUT_MODE, messages=messages, seed=seed), "none").run_id


def _consumer_run(strategy: str, scenario: str, settings: dict[str, str], source_run_id: str) -> str:
    """The strategy's consumer run, in a group of its own, over the input run under the scenario,
    with the settings; its id."""
    from delivery_semantics.workload import consumer_workload

    spec = consumer_workload.ConsumerSpec(strategy, source_run_id, scenario, settings=settings)
    return consumer_workload.start(spec).consumer_run_id


def store(req: Request, outcomes: list[Outcome]) -> str:
    """The proof's rows in `proofs`; its id."""
    import psycopg2
    import psycopg2.extras

    from delivery_semantics.plumbing.endpoints import ledger_database

    proof_id = uuid.uuid4().hex[:12]
    given = json.dumps(req.given())
    rows = [
        (
            proof_id,
            req.name,
            req.client,
            given,
            r["rule"],
            r["family"],
            json.dumps(r["settings"]),
            r["predicted"],
            r["scenario"],
            r["run_id"],
            r["reused"],
            r["isolation"],
            r["observed"],
            r["confirmed"],
            r["why"],
        )
        for r in (o.row() for o in outcomes)
    ]
    with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c, c.cursor() as cur:
        psycopg2.extras.execute_values(
            cur,
            "INSERT INTO proofs (proof_id, subject, client, given, rule, family, settings, predicted, scenario, "
            "run_id, reused, isolation, observed, confirmed, why) VALUES %s",
            rows,
        )
    return proof_id


def table(outcomes: list[Outcome]) -> str:
    from delivery_semantics.reporting.report import text_table

    header = ["finding", "settings", "predicted", "scenario", "run", "observed", "confirmed"]
    body = [
        [
            o.prediction.rule.name,
            ", ".join(f"{k}={v}" for k, v in o.prediction.settings.items()),
            f"{o.prediction.rule.kind} ({o.isolation})" if o.isolation else o.prediction.rule.kind,
            o.scenario or "-",
            (o.run_id + (" (reused)" if o.reused else "")) if o.run_id else "-",
            "-" if o.observed is None else str(o.observed),
            {True: "yes", False: "NO", None: f"- ({o.why})" if o.why else "-"}[o.confirmed],
        ]
        for o in outcomes
    ]
    return text_table(header, body)
