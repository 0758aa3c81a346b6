"""Predict, then prove: the rule catalog's findings on a producer, its topic and a consumer, each
put to the fewest runs that can show it, then what the checker observed beside what the rule
predicted. A consumer's finding runs as the consumer strategy that does what its setting does (a
consumer that auto-commits, or commits before it writes, as commit_before_process), on a fresh
input run, under a consumer crash.

A finding is confirmed when its run shows the kind it predicts (a count above zero, at the
isolation level that kind is read at), and not confirmed when the run shows none of it: then the
rule or the checker is wrong, and the run says which to look at. A finding no run of the mode can
expose, or of a family a platform run does not exercise (a consumer's, a connector's), is listed
as not put to a run, with why.

    local/semantics prove --mode NAME [--set producer.KEY=VALUE | topic.KEY=VALUE | consumer.KEY=VALUE ...]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from delivery_semantics import catalog, rules

# The families a platform run exercises: its producer's settings, its topic's, and a consumer's.
PROVABLE = ("producer", "topic", "consumer")
# What a run's topic may be made with, from a user's text: the settings the topic rules read.
TOPIC_SETTINGS = {"min.insync.replicas": r"[1-3]", "unclean.leader.election.enable": r"true|false"}
# What a consumer may be described with: the settings the consumer rules read.
CONSUMER_SETTINGS = {
    "enable.auto.commit": r"true|false",
    "auto.offset.reset": r"earliest|latest|none",
    "isolation.level": r"read_committed|read_uncommitted",
    "max.poll.interval.ms": r"[0-9]{1,9}",
    "app.commit": r"before_process|after_process|transactional",
    "app.dedup": r"true|false",
    "app.processing.ms": r"[0-9]{1,9}",
}
CONSUMER_SCENARIO = "consumer_crash"
# The consumer strategy that does what a consumer rule reads, so that its run shows the kind for
# the rule's reason and no other: a consumer that commits before it has written (auto-commit's
# worst case), or after, without skipping what it already applied. No strategy here resets to
# `latest`, outlives its poll interval or reads uncommitted: those findings are not put to a run.
CONSUMER_STRATEGY = {
    "auto_commit": "commit_before_process",
    "commit_before_process": "commit_before_process",
    "commit_after_process_without_dedup": "process_then_commit",
}


class ProveError(ValueError):
    """Bad input: one line, exit 2."""


@dataclass(frozen=True)
class Planned:
    scenario: str
    predictions: tuple[rules.Prediction, ...]
    strategy: str | None = None  # a consumer run of this strategy; None: a producer run of the mode

    @property
    def label(self) -> str:
        return f"{self.strategy} x {self.scenario}" if self.strategy else self.scenario


@dataclass
class Outcome:
    prediction: rules.Prediction
    scenario: str | None = None
    run_id: str | None = None
    isolation: str | None = None
    observed: int | None = None
    why: str = ""

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
            "isolation": self.isolation,
            "observed": self.observed,
            "confirmed": self.confirmed,
            "why": self.why,
        }


@dataclass
class Request:
    mode: str
    client: str
    producer: dict[str, str] = field(default_factory=dict)
    topic: dict[str, str] = field(default_factory=dict)
    consumer: dict[str, str] = field(default_factory=dict)


def request(mode: str, sets: list[str], client: str | None = None) -> Request:
    """The mode and the settings over it, checked: `producer.KEY=VALUE` through the client's own
    allowlist when the runs are made, `topic.KEY=VALUE` through TOPIC_SETTINGS here."""
    try:
        mode_obj = catalog.get_mode(mode)
    except catalog.CatalogError as e:
        raise ProveError(str(e)) from None
    req = Request(mode, client or mode_obj.client or catalog.LIBRDKAFKA)
    if req.client not in mode_obj.clients:
        raise ProveError(f"mode {mode} runs on {', '.join(mode_obj.clients)}, not {req.client}")
    for pair in sets:
        name, sep, value = pair.partition("=")
        family, dot, key = name.partition(".")
        if not sep or not dot or not key or "\n" in pair or "\r" in pair:
            raise ProveError(f"--set {pair[:80]!r} is not FAMILY.KEY=VALUE")
        if family == "producer":
            req.producer[key] = value
        elif family in ("topic", "consumer"):
            allowed = TOPIC_SETTINGS if family == "topic" else CONSUMER_SETTINGS
            if key not in allowed or not re.fullmatch(allowed[key], value):
                said = ", ".join(f"{k} ({p})" for k, p in allowed.items())
                raise ProveError(f"--set {family}.{key[:60]}={value[:40]!r}: a {family} here takes {said}")
            getattr(req, family)[key] = value
        else:
            raise ProveError(f"--set {family[:40]}.*: a platform run proves producer, topic and consumer settings")
    from delivery_semantics.workload.settings import overrides_of

    try:
        overrides_of(req.client, req.producer)  # the client's allowlist, before any run is made
    except catalog.CatalogError as e:
        raise ProveError(str(e)) from None
    return req


def predictions(req: Request) -> list[rules.Prediction]:
    given, _ = rules.of_mode(req.mode)
    given["producer"].update(req.producer)
    given["topic"].update(req.topic)
    if req.consumer:
        given["consumer"] = dict(req.consumer)
    return rules.predict(given, req.client)


def plan(found: list[rules.Prediction], mode: str) -> tuple[list[Planned], list[Outcome]]:
    """The fewest runs of `mode` that can show each finding: a scenario at a time, the one that
    exposes the most findings not yet planned (ties to the rule's own order of scenarios); and the
    findings left out, with why."""
    left: list[Outcome] = []
    # By the finding's place in `found` (a Prediction holds a dict): the runs, (scenario, consumer
    # strategy or None), that can show it.
    open_: dict[int, list[tuple[str, str | None]]] = {}
    for i, p in enumerate(found):
        if p.rule.family not in PROVABLE:
            left.append(Outcome(p, why=f"a {p.rule.family} setting: a platform run does not exercise it"))
            continue
        if p.rule.family == "consumer":
            strategy = CONSUMER_STRATEGY.get(p.rule.name)
            runnable = [(CONSUMER_SCENARIO, strategy)] if strategy else []
            why = "no consumer strategy of the platform does what this setting does"
        else:
            runnable = [(s, None) for s in p.rule.scenarios if _runnable(mode, s)]
            why = f"no scenario of {', '.join(p.rule.scenarios)} runs with mode {mode}"
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


def _runnable(mode: str, scenario: str) -> bool:
    try:
        catalog.check_pair(mode, scenario)
    except catalog.CatalogError:
        return False
    return True


def isolation_of(kind: str, judged: str) -> str:
    """Where a kind is read: copies of aborted transactions only by a read_uncommitted reader;
    anything else at the isolation level of the mode (or strategy) judged."""
    return catalog.READ_UNCOMMITTED if kind == "aborted_visible" else catalog.judged(judged).isolation


def prove(req: Request, messages: int = 15_000, seed: int = 11) -> list[Outcome]:
    """Each planned run made (the mode's producer with the given settings, on a topic made with the
    given topic settings, under its scenario), all of them reconciled by the checker in one Spark
    application, and each finding's observed count read from its run's summary."""
    from delivery_semantics.plumbing import reconcile
    from delivery_semantics.workload import load, scenarios

    planned, left = plan(predictions(req), req.mode)
    runs: list[str] = []
    for p in planned:
        if p.strategy:
            runs.append(_consumer_run(p.strategy, messages, seed))
            continue
        spec = load.LoadSpec(
            mode=req.mode, messages=messages, seed=seed, overrides=dict(req.producer), client=req.client
        )
        runs.append(scenarios.run(spec, p.scenario, topic_config=dict(req.topic)).run_id)
    outcomes: list[Outcome] = []
    if runs:
        done = reconcile.run(run_id=runs)
        if done.returncode != 0:
            raise RuntimeError(f"the checker failed: {done.error}")
        counts = {(s["reconciliation_id"], s["isolation"]): s for s in done.summaries}
        for p, run_id in zip(planned, runs, strict=True):
            for pred in p.predictions:
                iso = isolation_of(pred.rule.kind, p.strategy or req.mode)
                summary = counts.get((run_id, iso))
                column = catalog.KINDS[pred.rule.kind].summary or pred.rule.kind
                seen = None if summary is None else catalog.observed(summary, column)
                outcomes.append(Outcome(pred, p.label, run_id, iso, seen))
    return outcomes + left


def _consumer_run(strategy: str, messages: int, seed: int) -> str:
    """A fresh input run (the catalog's input mode, no fault), then the strategy's consumer run over
    it under a crash; the consumer run's id."""
    from delivery_semantics.workload import consumer_workload, load, scenarios

    source = scenarios.run(load.LoadSpec(mode=catalog.CONSUMER_INPUT_MODE, messages=messages, seed=seed), "none")
    spec = consumer_workload.ConsumerSpec(strategy=strategy, source_run_id=source.run_id, scenario=CONSUMER_SCENARIO)
    return consumer_workload.start(spec).consumer_run_id


def table(outcomes: list[Outcome]) -> str:
    from delivery_semantics.reporting.report import text_table

    header = ["finding", "settings", "predicted", "scenario", "run", "observed", "confirmed"]
    body = [
        [
            o.prediction.rule.name,
            ", ".join(f"{k}={v}" for k, v in o.prediction.settings.items()),
            f"{o.prediction.rule.kind} ({o.isolation})" if o.isolation else o.prediction.rule.kind,
            o.scenario or "-",
            o.run_id or "-",
            "-" if o.observed is None else str(o.observed),
            {True: "yes", False: "NO", None: f"- ({o.why})" if o.why else "-"}[o.confirmed],
        ]
        for o in outcomes
    ]
    return text_table(header, body)
