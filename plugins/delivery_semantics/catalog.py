"""The catalog: what each delivery mode, consumer strategy and fault scenario is and promises
(DESIGN.md §2 and §3), as data. Everything else reads it: the load runner, the nemesis, the
checker's verdicts, the DAG forms, the reports and the SQL views (through the `catalog_judged`
table that `schema.migrate` fills from here).

Pure Python with no dependency beyond the standard library: DAG files import it at parse time and
the Spark checker's driver imports it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from delivery_semantics import clients
from delivery_semantics.clients.base import RETRIES_MAX
from delivery_semantics.errors import CatalogError, ModeError, ScenarioError

# A run id names the default topic and is read back into SQL by the checker: a plain token only.
RUN_ID_PATTERN = r"[A-Za-z0-9_.-]{1,100}"
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATIONS = (READ_COMMITTED, READ_UNCOMMITTED)

# The Asset load tasks announce their runs on, and the pool that keeps fault runs from overlapping
# on the shared cluster (one slot).
RUNS_ASSET = "semantics_runs"
CLUSTER_POOL = "kafka_cluster"


# --------------------------------------------------------------------------- promises

GUARANTEES = ("no_duplicates", "no_acked_loss", "no_aborted_visible", "no_stale_overwrite", "atomic_transactions")


# --------------------------------------------------------------------------- anomaly kinds

# Where an audit window reports a kind: the outbox against the topic, the topic against the sink
# table, the outbox against the sink (end to end).
OUTBOX_TOPIC, TOPIC_SINK, OUTBOX_SINK = "outbox_topic", "topic_sink", "outbox_sink"
STAGES = (OUTBOX_TOPIC, TOPIC_SINK, OUTBOX_SINK)


@dataclass(frozen=True)
class Kind:
    """An anomaly the checker reports, as `reconcile_discrepancies.kind` and
    `audit_discrepancies.kind` name it.

    - summary: the `reconcile_summary` column that counts its events (None: audits only);
    - copies: that column counts the copies, not the events;
    - windows: per audit stage, the `audit_windows` column that counts its events there (a kind
      with none is not judged by a window);
    - breaks: the guarantee (GUARANTEES) it breaks, if any;
    - loss: a later window's `late` copy resolves it;
    - column: the matrix report's column that shows its count (two kinds may share one: their
      counts are shown as a/b);
    - within: the kind whose events it names a cause of, a subset of them (not counted twice)."""

    name: str
    jepsen: str | None
    summary: str | None
    text: str
    windows: Mapping[str, str] = field(default_factory=dict)
    breaks: str | None = None
    copies: bool = False
    loss: bool = False
    column: str | None = None
    within: str | None = None

    @property
    def in_matrix(self) -> bool:
        return self.column is not None


def _kind(name, jepsen, summary, text, windows=None, **flags) -> Kind:
    if flags.get("breaks") not in (None, *GUARANTEES) or not set(windows or {}) <= set(STAGES):
        raise CatalogError(f"kind {name}: breaks {flags.get('breaks')!r}, windows {windows!r}")
    return Kind(name, jepsen, summary, text, MappingProxyType(dict(windows or {})), **flags)


KINDS = {
    k.name: k
    for k in (
        _kind(
            "duplicate",
            "duplicate",
            "duplicate_events",
            "more than one copy of an event; copies counts them all",
            {OUTBOX_TOPIC: "duplicate_events", TOPIC_SINK: "sink_duplicates"},
            breaks="no_duplicates",
            column="dup events",
        ),
        _kind(
            "lost_acked",
            "lost-write",
            "lost_acked",
            "the ledger or outbox says acked, and no copy was read",
            {OUTBOX_TOPIC: "lost_acked"},
            breaks="no_acked_loss",
            loss=True,
            column="lost acked",
        ),
        _kind(
            "lost_unacked",
            None,
            "lost_unacked",
            "never acked and not read: expected of a failed send, a loss all the same",
            {OUTBOX_TOPIC: "lost_unacked"},
            loss=True,
            column="lost unacked",
        ),
        _kind(
            "coordinator_aborted",
            None,
            "coordinator_aborted",
            "lost unacked, its last transaction aborted by the broker's transaction coordinator (open past "
            "transaction.timeout.ms, or fenced by a newer producer of its transactional.id)",
            within="lost_unacked",
        ),
        _kind(
            "lost",
            "lost-write",
            None,
            "a record (or an acked outbox row) past the grace never applied to the sink",
            {TOPIC_SINK: "sink_lost", OUTBOX_SINK: "end_to_end_lost"},
            # what reached the topic was acked: a sink's reader loses it as an acked event
            breaks="no_acked_loss",
            loss=True,
        ),
        _kind(
            "unknown_landed",
            "indeterminate",
            "unknown_landed",
            "failed, unknown or never acked, yet read: possibly persisted, and it was",
            {OUTBOX_TOPIC: "unknown_landed"},
        ),
        _kind(
            "unexpected",
            "unexpected",
            "unexpected",
            "read (or applied) with no ledger or outbox row (no topic record)",
            {OUTBOX_TOPIC: "unexpected", TOPIC_SINK: "sink_unexpected"},
        ),
        _kind(
            "late",
            None,
            None,
            "a copy of an event an earlier window declared lost: the loss is resolved, with its delay",
            {OUTBOX_TOPIC: "late", TOPIC_SINK: "sink_late", OUTBOX_SINK: "end_to_end_late"},
        ),
        _kind(
            "out_of_order",
            None,
            "out_of_order",
            "per key, a first copy whose sequence is lower than one read before it",
            {OUTBOX_TOPIC: "out_of_order"},
        ),
        _kind(
            "aborted_visible",
            "G1a",
            "aborted_visible",
            "copies an aborted transaction wrote, visible to the reader",
            breaks="no_aborted_visible",
            copies=True,
            column="aborted vis",
        ),
        _kind(
            "torn_transaction",
            "KAFKA-17754",
            "torn_events",
            "under read_committed, an event missing from a partly visible committed transaction",
            breaks="atomic_transactions",
            column="torn",
        ),
        _kind(
            "inconsistent_offset",
            "inconsistent-offsets",
            "inconsistent_offsets",
            "a position holding two different records (the log was truncated and written again)",
            column="incons. offs",
        ),
        _kind(
            "poll_skip",
            "poll-skip",
            "poll_skips",
            "a consumer session skipped a record between two offsets it polled one after the other",
            column="poll skip/back",
        ),
        _kind(
            "nonmonotonic_poll",
            "nonmonotonic-poll",
            "nonmonotonic_polls",
            "a consumer session polled an offset at or below one it polled before",
            column="poll skip/back",
        ),
        _kind(
            "malformed",
            None,
            "malformed",
            "a record without a usable event id, named by its position",
            {OUTBOX_TOPIC: "malformed"},
        ),
        _kind(
            "stale_overwrite",
            None,
            "stale_overwrites",
            "applied to its key's state after a newer version had been",
            {TOPIC_SINK: "stale_overwrites"},
            breaks="no_stale_overwrite",
            column="stale",
        ),
    )
}
# The kinds that break each guarantee, at whichever stage counts them.
BROKEN_BY = {
    g: tuple(k.name for k in KINDS.values() if k.breaks == g)
    for g in GUARANTEES
    if any(k.breaks == g for k in KINDS.values())
}
if set(BROKEN_BY) != set(GUARANTEES):
    raise CatalogError(f"no kind breaks {set(GUARANTEES) - set(BROKEN_BY)}: every guarantee is broken by some kind")
LOSSES = tuple(k.name for k in KINDS.values() if k.loss)
if any(k.within not in (None, *KINDS) or (k.within and (k.loss or k.breaks)) for k in KINDS.values()):
    raise CatalogError("a kind within another names a kind, and is not counted as a loss or a break twice")


class Counts:
    """One map of what a run, an audit window or a pipeline run counted: the events (the copies,
    for a kind that counts copies) of each kind at each stage, keyed by the catalog's kinds.

    A platform run's ledger plays the outbox, so its summary row is the outbox_topic stage. A kind
    the observation cannot show is None ("-"), not 0; a name no kind has is an error, never 0.
    Built by its three constructors only, so a count's column is read in one place."""

    def __init__(self, counted: Mapping[tuple[str, str], int | None]):
        for stage, kind in counted:
            if stage not in STAGES or kind not in KINDS:
                raise CatalogError(f"counts: no kind {kind!r} at stage {stage!r}")
        self._counted = MappingProxyType({key: None if n is None else int(n) for key, n in counted.items()})

    @classmethod
    def from_summary(cls, row: Mapping) -> Counts:
        """A `reconcile_summary` row (or a view's row with its columns)."""
        return cls(
            {(OUTBOX_TOPIC, k.name): row.get(k.summary) for k in KINDS.values() if k.summary and k.summary in row}
        )

    @classmethod
    def from_window(cls, row: Mapping) -> Counts:
        """An `audit_windows` row by stage, through each kind's `windows`; or a pipeline run's totals,
        which are its windows' columns summed (its losses net of the late copies that resolved them)."""
        return cls({(stage, kind): row.get(col) for col, (stage, kind) in window_columns().items() if col in row})

    @classmethod
    def from_pipeline(cls, row: Mapping) -> Counts:
        """A `pipeline_runs` row: its windows' counts summed, each loss net of the late copies that
        resolved it, where `lost` is the outbox-to-topic loss (a committed outbox row is acked)."""
        return cls.from_window({**row, "lost_acked": row.get("lost")})

    def get(self, kind: str, stage: str = OUTBOX_TOPIC) -> int | None:
        """The kind's count at the stage; None where the observation does not count it."""
        if kind not in KINDS or stage not in STAGES:
            raise CatalogError(f"counts: no kind {kind!r} at stage {stage!r}")
        return self._counted.get((stage, kind))

    def of(self, kind: str, stage: str = OUTBOX_TOPIC) -> int:
        """The kind's count at the stage, 0 where not counted: what a verdict reads."""
        return self.get(kind, stage) or 0

    def losses(self, stage: str = OUTBOX_TOPIC) -> int:
        """The catalog's loss kinds as a group: every event lost at the stage, acked or not."""
        return sum(self.of(k, stage) for k in LOSSES)

    def observe(self, kind: str, stage: str = OUTBOX_TOPIC) -> int | None:
        """What an expectation or a prediction of the kind at the stage is checked against: its count,
        where `lost` (a record never read or applied, whatever its acks) is the stage's losses. None
        where the stage counts no such kind."""
        if kind == "lost":
            return self.losses(stage) if any(self.get(k, stage) is not None for k in LOSSES) else None
        return self.get(kind, stage)

    def __eq__(self, other) -> bool:
        return isinstance(other, Counts) and self._counted == other._counted

    def __repr__(self) -> str:
        return f"Counts({dict(self._counted)!r})"


# The ledger's error of an event whose transaction the coordinator aborted begins with it (the load
# writes it, the checker's coordinator_aborted reads it).
COORDINATOR_ABORTED = "coordinator aborted"


def summary_columns(in_matrix: bool = False) -> tuple[str, ...]:
    """The `reconcile_summary` columns that count a kind, in the catalog's order."""
    return tuple(k.summary for k in KINDS.values() if k.summary and (k.in_matrix or not in_matrix))


def matrix_columns() -> dict[str, tuple[str, ...]]:
    """The matrix report's kind columns, in the catalog's order: header -> the summary columns shown."""
    out: dict[str, tuple[str, ...]] = {}
    for k in KINDS.values():
        if k.column:
            out[k.column] = (*out.get(k.column, ()), k.summary)
    return out


def window_columns() -> dict[str, tuple[str, str]]:
    """Each `audit_windows` count column: (stage, kind) it counts."""
    return {col: (stage, k.name) for k in KINDS.values() for stage, col in k.windows.items()}


def kind_rows() -> list[tuple]:
    """The `catalog_kinds` rows (schema.migrate writes them)."""
    return [(k.name, k.jepsen, k.summary, list(k.windows), k.breaks, k.text) for k in KINDS.values()]


@dataclass(frozen=True)
class Promise:
    """What a mode or strategy guarantees on its own isolation level, and the scenarios that lift a
    guarantee because they break its condition (acks=1 keeps acked events only while the leader
    lives; idempotence holds within one producer session)."""

    text: str
    guarantees: frozenset[str]
    lifted_by: Mapping[str, frozenset[str]] = field(default_factory=dict)
    name: str = ""

    def in_force(self, scenario: str) -> list[str]:
        return [g for g in GUARANTEES if g in self.guarantees and scenario not in self.lifted_by.get(g, ())]


def _promise(text: str, *guarantees: str, name: str = "", **lifted_by: tuple[str, ...]) -> Promise:
    unknown = set(guarantees) - set(GUARANTEES)
    if unknown:
        raise CatalogError(f"promise {name or text}: unknown guarantees {unknown}")
    return Promise(text, frozenset(guarantees), MappingProxyType({g: frozenset(s) for g, s in lifted_by.items()}), name)


# The promises a producer can be declared to keep: the presets' and a mode file's `promise`.
PROMISES: dict[str, Promise] = {
    p.name: p
    for p in (
        _promise("never a duplicate; loss allowed", "no_duplicates", name="no_duplicates"),
        _promise(
            "no loss of acked events while the leader survives; duplicates allowed",
            "no_acked_loss",
            name="no_acked_loss_while_leader_lives",
            no_acked_loss=("leader_kill", "isolated_leader", "partitioned_leader"),
        ),
        _promise(
            "no loss of acked events with min.insync.replicas=2 and one broker down; duplicates allowed",
            "no_acked_loss",
            name="no_acked_loss",
        ),
        _promise(
            "no duplicates from retries within one producer session (a restart gets a new PID); no acked loss",
            "no_duplicates",
            "no_acked_loss",
            name="no_duplicates_within_session",
            no_duplicates=("producer_crash",),
        ),
        _promise(
            "exactly once for read_committed readers, across restarts that reuse the transactional.id; "
            "aborted batches never visible; a committed transaction visible whole or not at all",
            "no_duplicates",
            "no_acked_loss",
            "no_aborted_visible",
            "atomic_transactions",
            name="exactly_once",
        ),
    )
}


# A connector pipeline's promises (PIPELINES): an outbox row is "acked" once its transaction committed.
PIPELINE_PROMISES: dict[str, Promise] = {
    p.name: p
    for p in (
        _promise(
            "every committed outbox row reaches the topic; a restarted source task resends what it sent "
            "since its last offset commit, so duplicates are allowed",
            "no_acked_loss",
            name="connector_at_least_once",
        ),
        _promise(
            "every committed outbox row in the topic exactly once for read_committed readers: the source "
            "task's records and its offsets commit in one Kafka transaction (KIP-618)",
            "no_duplicates",
            "no_acked_loss",
            "no_aborted_visible",
            name="connector_exactly_once",
        ),
    )
}


# --------------------------------------------------------------------------- producer clients

# The producer clients a load drives, each a registered ClientSpec (clients/): its settings keep the
# client's own key names, and each adds its tuning to a preset's semantics.
CLIENTS = tuple(clients.REGISTRY)
DEFAULT_CLIENT = clients.DEFAULT
# The effective value of each setting a finding reads, when a mode does not set it: the client's
# own default.
CLIENT_DEFAULTS = {name: dict(spec.defaults) for name, spec in clients.REGISTRY.items()}


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("true", "1")


@dataclass(frozen=True)
class Finding:
    """A producer setting that contradicts a guarantee the mode declares: reported with every run,
    and named by the verdict when that guarantee is broken."""

    guarantee: str
    setting: str  # "key=value" as the mode set it (or the client's default)
    why: str


def contradictions(promise: Promise, effective: Mapping[str, str], transactional: bool) -> list[Finding]:
    """The settings (effective values, CLIENT_DEFAULTS filled in) that take away a guarantee the
    promise declares. A contradiction is a finding, not a refusal: the run shows whether it bites."""
    acks = {"-1": "all"}.get(str(effective.get("acks")), str(effective.get("acks")))
    idempotent = _truthy(effective.get("enable.idempotence")) or transactional
    out = []
    # A promise that lifts no_acked_loss under the leader's faults has declared what acks=1 does.
    if "no_acked_loss" in promise.guarantees and acks == "1" and not promise.lifted_by.get("no_acked_loss"):
        out.append(
            Finding(
                "no_acked_loss",
                "acks=1",
                "the leader acks a write before any follower has it; a leader that dies or is cut off "
                "first takes the write with it",
            )
        )
    if "no_duplicates" in promise.guarantees and not idempotent and acks != "0":
        out.append(
            Finding(
                "no_duplicates",
                "enable.idempotence=false",
                f"a send retried after a lost ack (retries={effective.get('retries')}, or a resend after a "
                "timeout) is written again",
            )
        )
    return out


# The sides a judged subject runs on: a producer (a delivery mode), a consumer (a strategy), a
# connector pipeline.
PRODUCER, CONSUMER, PIPELINE_SIDE = "producer", "consumer", "pipeline"


class Subject:
    """What a run judges: a delivery mode (a preset or a mode file), a consumer strategy or a
    connector pipeline. Each owns its facts, as a Debezium dialect does: its side, the isolation
    level it is judged on, its promise, the rule families its runs exercise, which scenarios it
    runs under (`check`), what a run of it is judged against (`definition`) and how a run's counts
    are read (`counts`). Its runs are made by its workload (workload/)."""

    side: ClassVar[str]
    rule_families: ClassVar[tuple[str, ...]]
    name: str
    isolation: str
    promise: Promise
    transactional: bool

    def incompatibility(self, scenario: Scenario) -> str | None:
        raise NotImplementedError

    def check(self, scenario: str) -> Scenario:
        """The scenario, when a run of this subject can run under it; ScenarioError with why if not."""
        found = get_scenario(scenario)
        reason = self.incompatibility(found)
        if reason:
            raise ScenarioError(reason)
        return found

    def runs_under(self, scenario: str) -> bool:
        try:
            self.check(scenario)
        except CatalogError:
            return False
        return True

    def run_settings(self, client: str | None = None) -> Mapping[str, str]:
        """The client settings a run of it is made with and keeps in its definition."""
        return {}

    def definition(self, scenario: str, client: str | None = None) -> Definition:
        return Definition.of(self, scenario, self.run_settings(client))

    def counts(self, row: Mapping) -> Counts:
        """A run's counts from its judged row: a `reconcile_summary` row."""
        return Counts.from_summary(row)


@dataclass(frozen=True)
class DeliveryMode(Subject):
    """A producer under test. A preset (the five built-in modes) runs on either client: its
    `semantics` keys have the same name and meaning in both, and each client adds its tuning. A
    mode file (modes/<name>.yaml, mode_files.py) names its client and gives that client's settings,
    over the client's own defaults."""

    name: str
    description: str
    semantics: Mapping[str, str]
    isolation: str
    promise: Promise
    transactional: bool = False
    # at_most_once never resends: an event without an outcome may have been sent.
    resends_unacked: bool = True
    client: str | None = None  # a mode file's; None: a preset
    source: str | None = None  # a mode file's path
    connection: str | None = None  # a mode file's Kafka connection; None: kafka_default

    side: ClassVar[str] = PRODUCER
    rule_families: ClassVar[tuple[str, ...]] = ("producer", "topic", "consumer")

    def incompatibility(self, scenario: Scenario) -> str | None:
        return scenario.incompatible(self)

    def run_settings(self, client: str | None = None) -> Mapping[str, str]:
        return self.producer_settings(client)

    @property
    def clients(self) -> tuple[str, ...]:
        if self.client:
            return (self.client,)
        return tuple(c for c in CLIENTS if clients.spec(c).transactions or not self.transactional)

    def producer_settings(self, client: str | None = None) -> dict[str, str]:
        client = client or self.client or clients.DEFAULT
        if client not in self.clients:
            raise ModeError(self.refusal(client))
        return dict(self.semantics) if self.client else {**clients.spec(client).tuning, **self.semantics}

    def refusal(self, client: str) -> str:
        if self.client:
            return f"mode {self.name} is declared for the {self.client} client; it cannot run on {client}"
        return f"mode {self.name} runs on {', '.join(self.clients)}: the {client} client runs no transactions"

    @property
    def waits_for_acks(self) -> bool:
        return str(self.semantics.get("acks", "all")) != "0"


def _mode(name, description, semantics, isolation, promise, **flags) -> DeliveryMode:
    return DeliveryMode(name, description, MappingProxyType(dict(semantics)), isolation, PROMISES[promise], **flags)


MODES: dict[str, DeliveryMode] = {
    m.name: m
    for m in (
        _mode(
            "at_most_once",
            "fire and forget: acks=0, no retries; a delivery report only means handed to the socket",
            {"acks": "0", "retries": "0", "enable.idempotence": "false", "max.in.flight.requests.per.connection": "5"},
            READ_UNCOMMITTED,
            "no_duplicates",
            resends_unacked=False,
        ),
        _mode(
            "at_least_once",
            "leader ack, retries without idempotence: a retried batch whose ack was lost is written twice",
            {
                "acks": "1",
                "retries": str(RETRIES_MAX),
                "enable.idempotence": "false",
                "max.in.flight.requests.per.connection": "5",
            },
            READ_UNCOMMITTED,
            "no_acked_loss_while_leader_lives",
        ),
        _mode(
            "at_least_once_all",
            "all in-sync replicas ack, retries without idempotence",
            {
                "acks": "all",
                "retries": str(RETRIES_MAX),
                "enable.idempotence": "false",
                "max.in.flight.requests.per.connection": "5",
            },
            READ_UNCOMMITTED,
            "no_acked_loss",
        ),
        _mode(
            "idempotent",
            "idempotent producer: the broker drops retried batches by producer id and sequence",
            {
                "acks": "all",
                "retries": str(RETRIES_MAX),
                "enable.idempotence": "true",
                "max.in.flight.requests.per.connection": "5",
            },
            READ_UNCOMMITTED,
            "no_duplicates_within_session",
        ),
        _mode(
            "transactional",
            "transactions under stable transactional.ids, two per producer taking turns; aborted batches are resent",
            {
                "acks": "all",
                "retries": str(RETRIES_MAX),
                "enable.idempotence": "true",
                "max.in.flight.requests.per.connection": "5",
                "transaction.timeout.ms": "60000",
            },
            READ_COMMITTED,
            "exactly_once",
            transactional=True,
        ),
    )
}


# --------------------------------------------------------------------------- consumer strategies


@dataclass(frozen=True)
class Strategy(Subject):
    """A consumer strategy: how a consumer commits and writes. It reads its input read_committed
    and is judged on what it wrote (a sink table, or an output topic read read_committed)."""

    name: str
    description: str
    crash_point: str
    promise: Promise
    commit_first: bool = False
    dedup: bool = False
    transactional: bool = False
    isolation: str = READ_COMMITTED
    # A strategy that reproduces a consumer setting's effect (prove's): what it stands for, the
    # client settings and `app.` settings its run takes with their defaults, and where its input
    # starts; none of these runs in the matrix unless chosen.
    reproduces: str = ""
    settings: Mapping[str, str] = field(default_factory=dict)
    auto_commit: bool = False  # librdkafka commits on its timer what poll() returned
    offset_reset: str = "earliest"  # a new group's start; `latest` joins after its input was written
    stalls: bool = False  # one batch processed for app.processing.ms, past max.poll.interval.ms

    side: ClassVar[str] = CONSUMER
    rule_families: ClassVar[tuple[str, ...]] = ("consumer",)

    def check(self, scenario: str) -> Scenario:
        """A consumer scenario: any other name, a producer scenario's too, is unknown here."""
        if scenario not in CONSUMER_SCENARIOS:
            raise ScenarioError(
                f"unknown consumer scenario {str(scenario)[:80]!r}: choose one of {', '.join(CONSUMER_SCENARIOS)}"
            )
        return SCENARIOS[scenario]

    def run_settings(self, client: str | None = None) -> Mapping[str, str]:
        return self.settings


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "commit_before_process",
            "offsets committed before the sink write (auto-commit's worst case)",
            "after the commit, before the sink write",
            _promise(
                "never a duplicate in the sink; loss allowed (offsets are committed before the write)", "no_duplicates"
            ),
            commit_first=True,
        ),
        Strategy(
            "process_then_commit",
            "sink write in one database transaction, then a synchronous commit",
            "after the sink write, before the commit",
            _promise("no loss in the sink; redeliveries duplicate and overwrite with stale versions", "no_acked_loss"),
        ),
        Strategy(
            "process_then_commit_dedup",
            "as process_then_commit, into a sink with event-id insert-skip and newer-only updates",
            "after the sink write, before the commit",
            _promise(
                "no loss, no duplicate and no stale overwrite in the sink, across restarts",
                "no_duplicates",
                "no_acked_loss",
                "no_stale_overwrite",
            ),
            dedup=True,
        ),
        Strategy(
            "transactional_copy",
            "consume-transform-produce in one transaction with the input offsets",
            "mid-transaction: half the batch produced and flushed, never committed",
            _promise(
                "output topic exactly once for read_committed readers, across restarts",
                "no_duplicates",
                "no_acked_loss",
                "no_aborted_visible",
            ),
            transactional=True,
        ),
        Strategy(
            "auto_commit",
            "librdkafka's auto-commit: offsets stored as poll() returns each record and committed on a timer "
            "(auto.commit.interval.ms); the sink write after",
            "once the timer has committed past a polled batch, before its sink write",
            _promise("none: a crash between the timer's commit and the write loses the batch"),
            reproduces="enable.auto.commit=true",
            settings=MappingProxyType({"auto.commit.interval.ms": "1000"}),
            auto_commit=True,
        ),
        Strategy(
            "start_at_latest",
            "a new group with auto.offset.reset=latest, joined once its input was written; writes what it reads",
            "none: it starts at the end",
            _promise(
                "never a duplicate; a new group at latest never reads what was written before it joined",
                "no_duplicates",
            ),
            reproduces="auto.offset.reset=latest",
            offset_reset="latest",
        ),
        Strategy(
            "slow_poll_loop",
            "as process_then_commit, without static membership, but one batch processed for app.processing.ms, "
            "longer than max.poll.interval.ms",
            "none: it stalls once, after its second batch's sink write and before its commit",
            _promise(
                "no loss in the sink; a consumer that outlives its poll interval leaves the group, and its batch "
                "is read and written again",
                "no_acked_loss",
            ),
            reproduces="max.poll.interval.ms below the processing time",
            settings=MappingProxyType({"max.poll.interval.ms": "7000", "app.processing.ms": "12000"}),
            stalls=True,
        ),
    )
}
# The strategies the matrix runs unless its form names others: the platform's consumer patterns,
# not the settings prove reproduces.
MATRIX_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if not s.reproduces)
# What a consumer run may be given over its strategy's settings: integers in these bounds (librdkafka
# refuses a max.poll.interval.ms below the session timeout, 6 s here).
CONSUMER_RUN_SETTINGS = {
    "auto.commit.interval.ms": (100, 60_000),
    "max.poll.interval.ms": (6_000, 300_000),
    "app.processing.ms": (0, 120_000),
}


# --------------------------------------------------------------------------- connector pipelines

# The connectors of a pipeline, by class: Debezium's PostgreSQL source with its outbox event router,
# and Debezium's JDBC sink (local/maven/connect-plugins holds their version).
SOURCE_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"
OUTBOX_ROUTER = "io.debezium.transforms.outbox.EventRouter"
SINK_CONNECTOR = "io.debezium.connector.jdbc.JdbcSinkConnector"
# The sink appends each record it applies as a row, so a record applied twice is seen twice.
SINK_INSERT_MODE = "insert"


# The Airflow connections of a pipeline run, by role: Kafka, the outbox's owner (the load; Debezium
# replicates as it) and reader (the audit), and the sink's owner (the JDBC sink) and reader. Its
# Connect cluster is the pipeline's own (Pipeline.connect_conn_id).
PIPELINE_CONNECTIONS = {
    "kafka": "kafka_default",
    "outbox_writer": "cdc_outbox_app",
    "outbox": "cdc_outbox",
    "sink_writer": "outbox_app",
    "sink": "outbox_db",
}


# The audits a connector pipeline's run makes for itself (audit/pipeline_audit.py) are named with
# this prefix, which no audit file may take.
PLATFORM_AUDIT_PREFIX = "pipeline_"


@dataclass(frozen=True)
class Pipeline(Subject):
    """A connector pipeline under test: an outbox table that a load writes in transactions, read
    by change data capture (Debezium's PostgreSQL connector and its outbox event router) into a
    topic, which Debezium's JDBC sink connector appends to a table. It is judged three ways
    (outbox, topic, sink) by a continuous audit's windows.

    - connect_conn_id: the Connect cluster it runs on (the connection holds its REST URL);
    - worker_settings: what that cluster's workers must run with (a worker setting holds for every
      source task of the cluster, so each exactly-once setting has its own cluster);
    - source_settings, sink_settings: added to each connector's configuration;
    - scenarios: the only scenarios it runs under, when given (a pipeline made to show one)."""

    name: str
    description: str
    isolation: str
    promise: Promise
    connect_conn_id: str
    worker_settings: Mapping[str, str]
    source_settings: Mapping[str, str] = field(default_factory=dict)
    sink_settings: Mapping[str, str] = field(default_factory=dict)
    transactional: bool = False
    scenarios: tuple[str, ...] = ()

    side: ClassVar[str] = PIPELINE_SIDE
    rule_families: ClassVar[tuple[str, ...]] = ("connector",)

    def incompatibility(self, scenario: Scenario) -> str | None:
        return scenario.incompatible_pipeline(self)

    def counts(self, row: Mapping) -> Counts:
        """A `pipeline_runs` row: its windows' counts summed."""
        return Counts.from_pipeline(row)

    @property
    def sink_tolerates_errors(self) -> bool:
        return self.sink_settings.get("errors.tolerance") == "all"


# A pipeline's JDBC sink is at least once: judged as this strategy is, at each stage that ends in it.
PIPELINE_SINK_STRATEGY = "process_then_commit"
SINK_STAGES = (TOPIC_SINK, OUTBOX_SINK)


def _pipeline(name, description, isolation, promise, connect_conn_id, worker, source=None, sink=None, **flags):
    return Pipeline(
        name,
        description,
        isolation,
        PIPELINE_PROMISES[promise],
        connect_conn_id,
        MappingProxyType(dict(worker)),
        MappingProxyType(dict(source or {})),
        MappingProxyType(dict(sink or {})),
        **flags,
    )


PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        _pipeline(
            "debezium_outbox",
            "Debezium outbox (PostgreSQL, outbox event router) to a topic, JDBC sink appending to a table; "
            "source offsets committed every 5 s apart from the records",
            READ_UNCOMMITTED,
            "connector_at_least_once",
            "kafka_connect",
            {"exactly.once.source.support": "disabled"},
        ),
        _pipeline(
            "debezium_outbox_eos",
            "the same pipeline with Kafka Connect's exactly-once source support: the source task writes its "
            "records and offsets in one transaction; the sink reads read_committed",
            READ_COMMITTED,
            "connector_exactly_once",
            "kafka_connect_eos",
            {"exactly.once.source.support": "enabled"},
            source={"exactly.once.support": "required", "transaction.boundary": "poll"},
            sink={"consumer.override.isolation.level": READ_COMMITTED},
            transactional=True,
        ),
        _pipeline(
            "debezium_outbox_tolerant",
            "debezium_outbox with a sink that skips what it cannot convert (errors.tolerance=all, logged) and "
            "no dead-letter queue: records its converter refuses are dropped, kept nowhere",
            READ_UNCOMMITTED,
            "connector_at_least_once",
            "kafka_connect",
            {"exactly.once.source.support": "disabled"},
            sink={"errors.tolerance": "all", "errors.log.enable": "true"},
            scenarios=("poison_records",),
        ),
    )
}


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Step:
    """One nemesis step: `action` (a Nemesis method) on `target` (leader, followers, producer), at
    `at` seconds after producer 0's first batch, or, with `after_share`, once that share of
    producer 0's events has an outcome in the ledger (with one producer: the run's events).

    `in_open_transaction`: a transactional producer is killed inside the transaction that holds
    that share's event instead, between its flush and its commit, once its records are on the
    brokers and their `written` outcomes in the ledger. The process does it to itself at that
    point, which no outside timer can hit; the next session must fence it and abort that
    transaction."""

    action: str
    target: str = "leader"
    at: float = 0.0
    after_share: float | None = None
    in_open_transaction: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    side: str = PRODUCER
    timeline: tuple[Step, ...] = ()
    # What DESIGN.md §3 says each mode (or strategy) must show under it: {observation: ">0" | "=0"}.
    expected: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    requires_acks: bool = False
    requires_transactions: bool = False
    # Paced: the load is spread over LOAD_SECONDS so that the timeline lands mid-load.
    paced: bool = True
    # The load runs as its own process, which the timeline kills (target "producer").
    forks_load: bool = False
    topic_config: Mapping[str, str] = field(default_factory=dict)
    abort_ratio: float = 0.0
    # A producer scenario that connector pipelines run too (a pipeline scenario always does).
    pipelines: bool = False
    # Feeds the sink records it cannot convert: with errors.tolerance=none its task fails at the
    # first one, and the run is an error, not a count.
    requires_tolerant_sink: bool = False

    def incompatible(self, mode: DeliveryMode) -> str | None:
        if self.side == PIPELINE_SIDE:
            return f"{self.name} is a connector-pipeline scenario; it takes a pipeline, not a delivery mode"
        if self.side != PRODUCER:
            return f"{self.name} is a consumer-side scenario; it takes a consumer strategy, not a delivery mode"
        if self.requires_transactions and not mode.transactional:
            return f"{self.name} needs the transactional mode (it aborts transactions); {mode.name} has none"
        if self.requires_acks and not mode.waits_for_acks:
            return f"{self.name} drops acks; {mode.name} (acks=0) never waits for one"
        return None

    def incompatible_pipeline(self, pipeline: Pipeline) -> str | None:
        if self.side != PIPELINE_SIDE and not self.pipelines:
            return f"{self.name} is a {self.side}-side scenario that connector pipelines do not run"
        if self.requires_transactions and not pipeline.transactional:
            return f"{self.name} needs a transactional source (exactly-once support); {pipeline.name} has none"
        if pipeline.scenarios and self.name not in pipeline.scenarios:
            return f"{pipeline.name} runs only under {', '.join(pipeline.scenarios)}"
        if self.requires_tolerant_sink and not pipeline.sink_tolerates_errors:
            return (
                f"{self.name} feeds the sink records it cannot convert; {pipeline.name}'s sink has errors.tolerance=none, "
                "so its task fails at the first one (debezium_outbox_tolerant skips them)"
            )
        return None


# How long a paced load runs; step times are seconds after its first batch.
LOAD_SECONDS = 30.0
# Events per transaction when a run does not say: TXN_SIZE, or more once a run has more than
# TXNS_PER_RUN transactions of it. A commit costs the same whatever it holds (its markers go to
# every partition, replicated: 60-80 ms here, docs/BENCHMARKS.md), so 100-event transactions cap a
# producer near 1,500 events/s, below the pace of a paced 100k-event run (3,333/s): its load would
# outlast its fault's timeline. With 300 a run, a paced run's transactions span 100 ms of its pace,
# Kafka Streams' commit interval under exactly-once.
TXN_SIZE = 100
TXNS_PER_RUN = 300


def default_txn_size(messages: int) -> int:
    return max(TXN_SIZE, messages // TXNS_PER_RUN)


_CLEAN = MappingProxyType({"lost": "=0", "duplicate_events": "=0"})
_NO_ACKED_LOSS = {"lost_acked": "=0"}
_EXACTLY_ONCE = {"lost_acked": "=0", "duplicate_events": "=0"}
_LOSES = {"lost": ">0", "duplicate_events": "=0"}
_DUPLICATES = {"duplicate_events": ">0", "lost": "=0"}
# The expectations several scenarios share, by what the fault does to the modes:
# - a leader lost with nothing out of sync electable: acks=all keeps every ack, idempotence or
#   transactions every event once;
ACKS_ALL_KEEPS = {"at_least_once_all": _NO_ACKED_LOSS, "idempotent": _EXACTLY_ONCE, "transactional": _EXACTLY_ONCE}
# - an out-of-sync replica elected (unclean): acks=1 writes truncated and their offsets written
#   again; acks=all and idempotence are expected to keep their acks, transactions every event once;
UNCLEAN_ELECTION = {
    "at_least_once": {"lost_acked": ">0", "inconsistent_offsets": ">0"},
    "at_least_once_all": _NO_ACKED_LOSS,
    "idempotent": _NO_ACKED_LOSS,
    "transactional": _EXACTLY_ONCE,
}
# - a connector pipeline under a broker fault or its worker's: the outbox keeps every acked row,
#   and the exactly-once one every event once.
CONNECT_KEEPS = {"debezium_outbox": _NO_ACKED_LOSS, "debezium_outbox_eos": _EXACTLY_ONCE}


# What an expectation names, and where Counts.observe reads it: a mode's or strategy's, a kind's
# reconcile_summary column (the outbox_topic stage); a pipeline's, an audit window's column of a
# kind at its stage, which its run sums; either's `lost`, the losses acked or not. Two maps, as a
# column name may count one kind at two stages (stale_overwrites: a consumer's sink, a window's).
_LOST = (OUTBOX_TOPIC, "lost")
SUMMARY_OBSERVATIONS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {**{k.summary: (OUTBOX_TOPIC, k.name) for k in KINDS.values() if k.summary}, "lost": _LOST}
)
WINDOW_OBSERVATIONS: Mapping[str, tuple[str, str]] = MappingProxyType({**window_columns(), "lost": _LOST})


def observations(side: str) -> Mapping[str, tuple[str, str]]:
    """What an expectation of a subject of that side may observe: name -> (stage, kind)."""
    return WINDOW_OBSERVATIONS if side == PIPELINE_SIDE else SUMMARY_OBSERVATIONS


def side_of(name: str) -> str:
    return PIPELINE_SIDE if name in PIPELINES else CONSUMER if name in STRATEGIES else PRODUCER


def _expect(**by_name: dict[str, str]) -> Mapping[str, Mapping[str, str]]:
    """DESIGN.md's expectations, checked as the catalog is made: each names a count the checker
    reports, as `>0` or `=0`; a typo fails at import, not as a row that never meets it."""
    for name, observed in by_name.items():
        if name not in MODES and name not in STRATEGIES and name not in PIPELINES:
            raise CatalogError(f"expectation of {name}: no mode, consumer strategy or pipeline of that name")
        for key, value in observed.items():
            if key not in observations(side_of(name)) or value not in (">0", "=0"):
                raise CatalogError(
                    f"expectation of {name}: {key} {value}: observe one of {sorted(observations(side_of(name)))}, >0 or =0"
                )
    return MappingProxyType({k: MappingProxyType(v) for k, v in by_name.items()})


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "none",
            "happy path",
            paced=False,
            pipelines=True,
            expected=_expect(
                **{
                    **{m: _CLEAN for m in [*MODES, *STRATEGIES, *PIPELINES]},
                    "start_at_latest": _LOSES,
                    "slow_poll_loop": _DUPLICATES,
                }
            ),
        ),
        Scenario(
            "lost_ack",
            "responses from the partition leader dropped (Toxiproxy timeout toxic, downstream) for 15 s: "
            "requests written, acks lost",
            requires_acks=True,
            timeline=(Step("drop_responses", at=5.0), Step("restore_responses", at=20.0)),
            expected=_expect(
                at_least_once={"duplicate_events": ">0", **_NO_ACKED_LOSS},
                at_least_once_all={"duplicate_events": ">0", **_NO_ACKED_LOSS},
                idempotent=_EXACTLY_ONCE,
                transactional=_EXACTLY_ONCE,
            ),
        ),
        # The stall makes the in-flight window deterministic: whatever was written to the leader's
        # sockets meanwhile never reaches its log.
        Scenario(
            "leader_kill",
            "partition leader stalls 2 s (SIGSTOP), is killed (SIGKILL), restarted 12 s later",
            timeline=(Step("pause", at=6.0), Step("kill", at=8.0), Step("restart", at=20.0)),
            pipelines=True,
            expected=_expect(at_most_once=_LOSES, **ACKS_ALL_KEEPS, **CONNECT_KEEPS),
        ),
        # Controlled shutdowns move leadership before a broker goes: nothing acked is lost, and
        # an idempotent or transactional producer's retries are deduplicated by the new leader.
        Scenario(
            "rolling_restart",
            "each broker stopped (SIGTERM, a controlled shutdown) and restarted in turn, the next once every "
            "partition is back in sync, the way an upgrade does it",
            timeline=(Step("rolling_restart", "cluster", at=5.0),),
            pipelines=True,
            expected=_expect(**ACKS_ALL_KEEPS, **CONNECT_KEEPS),
        ),
        Scenario(
            "coordinator_kill",
            "the transaction coordinator of the producer's (or the exactly-once source task's) transactional.id "
            "killed (SIGKILL), restarted 12 s later",
            timeline=(Step("kill", "coordinator", at=8.0), Step("restart", "coordinator", at=20.0)),
            requires_transactions=True,
            pipelines=True,
            expected=_expect(transactional=_EXACTLY_ONCE, debezium_outbox_eos=_EXACTLY_ONCE),
        ),
        # The brokers are also the 3 KRaft controllers: pausing two stalls the quorum, so the ISR
        # cannot shrink; the followers come back in sync without the leader's last acks=1 writes.
        Scenario(
            "isolated_leader",
            "followers paused past the lag limit, leader killed, followers resumed, unclean election allowed",
            timeline=(
                Step("pause", "followers", at=5.0),
                Step("kill", at=17.0),
                Step("resume", "followers", at=17.0),
                Step("restart", at=27.0),
            ),
            topic_config=MappingProxyType({"unclean.leader.election.enable": "true"}),
            # The acks=1 writes the followers never got are truncated, and the new leader writes
            # other events at their offsets: each lost ack is also an inconsistent offset.
            expected=_expect(**UNCLEAN_ELECTION),
        ),
        # Unlike isolated_leader, the leader keeps its controllers: it shrinks the ISR to itself
        # (AlterPartition), and acks alone what acks=1, or min.insync.replicas=1 under acks=all,
        # lets it; killed, only an out-of-sync follower is left to lead, and unclean election lets
        # one. With two in-sync copies required, writes wait instead (measured, 6,000 events: 1,558
        # acked events lost under acks=1, 1,566 under acks=all on a min.insync.replicas=1 topic,
        # none on the platform's own topic).
        Scenario(
            "shrunk_isr_leader_kill",
            "followers cut from the partition leader's log (their fetches dropped in Toxiproxy) past the lag "
            "limit, so the ISR shrinks to the leader; then the leader killed and restarted 9.5 s later, unclean "
            "election allowed",
            timeline=(
                Step("cut_fetches", at=2.0),
                Step("kill", at=20.0),
                Step("heal_fetches", at=20.0),
                Step("restart", at=29.5),
            ),
            topic_config=MappingProxyType({"unclean.leader.election.enable": "true"}),
            requires_acks=True,
            expected=_expect(**UNCLEAN_ELECTION),
        ),
        # Unlike isolated_leader, nothing is paused or killed, and clients still reach the leader:
        # it goes on acking acks=1 writes after the quorum has fenced it and elected a follower,
        # and truncates them when the partition heals. acks=all writes wait for followers that
        # cannot fetch, so none is acked there.
        Scenario(
            "partitioned_leader",
            "partition leader cut off by the network from both followers and the other controllers for 15 s "
            "(its inter-broker and controller links disabled in Toxiproxy, both ways); clients still reach it",
            timeline=(Step("partition", at=5.0), Step("heal_partition", at=20.0)),
            expected=_expect(
                at_most_once=_LOSES,
                at_least_once={"lost_acked": ">0", "inconsistent_offsets": ">0"},
                **ACKS_ALL_KEEPS,
            ),
        ),
        Scenario(
            "producer_crash",
            "producer process (producer 0 of the run) killed (SIGKILL) a third in, a transactional one between the "
            "flush and the commit of its open transaction; a new one resends the unacked",
            forks_load=True,
            timeline=(Step("kill_producer", "producer", after_share=1 / 3, in_open_transaction=True),),
            expected=_expect(
                at_most_once={"duplicate_events": "=0"},
                at_least_once=_NO_ACKED_LOSS,
                at_least_once_all=_NO_ACKED_LOSS,
                idempotent=_NO_ACKED_LOSS,
                transactional=_EXACTLY_ONCE,
            ),
        ),
        Scenario(
            "txn_abort",
            "a share of transactions (20% unless set) aborted and resent",
            requires_transactions=True,
            paced=False,
            abort_ratio=0.2,
            expected=_expect(transactional={**_EXACTLY_ONCE, "aborted_visible": "=0"}),
        ),
        # A killed worker's tasks move once its group notices (session timeout, then the rebalance
        # delay); the restarted source task resumes from its last committed offsets.
        Scenario(
            "connect_worker_kill",
            "the Connect worker running the source task killed (SIGKILL) mid-stream, restarted 6 s later",
            side=PIPELINE_SIDE,
            timeline=(Step("kill_worker", "source_worker", at=8.0), Step("start_worker", "source_worker", at=14.0)),
            expected=_expect(
                debezium_outbox={"duplicate_events": ">0", **_NO_ACKED_LOSS}, debezium_outbox_eos=_EXACTLY_ONCE
            ),
        ),
        # The sink's offsets are committed apart from its writes (offset.flush.interval.ms): a
        # killed worker's successor redelivers what came after the last commit, and a sink that
        # inserts applies it again. The topic itself is untouched.
        Scenario(
            "sink_worker_kill",
            "the Connect worker running the JDBC sink's task killed (SIGKILL) mid-stream, restarted 6 s later",
            side=PIPELINE_SIDE,
            timeline=(Step("kill_worker", "sink_worker", at=8.0), Step("start_worker", "sink_worker", at=14.0)),
            expected=_expect(**CONNECT_KEEPS),
        ),
        Scenario(
            "connect_rebalance",
            "the Connect worker running the source task leaves its group (SIGTERM) and rejoins 12 s later: its "
            "tasks move to the other worker and back",
            side=PIPELINE_SIDE,
            timeline=(Step("stop_worker", "source_worker", at=8.0), Step("start_worker", "source_worker", at=20.0)),
            expected=_expect(**CONNECT_KEEPS),
        ),
        Scenario(
            "outbox_db_restart",
            "the outbox database restarted (pg_ctl restart -m fast) mid-stream: the source task loses its "
            "replication connection, the load its session and its open transaction",
            side=PIPELINE_SIDE,
            timeline=(Step("restart_outbox_db", "outbox_db", at=8.0),),
            expected=_expect(**CONNECT_KEEPS),
        ),
        # Another writer puts records in the pipeline's topic that the sink's converter refuses
        # (plain JSON where the JsonConverter expects its schema envelope), each with an event id
        # header the audit reads. A sink that tolerates errors skips exactly those and goes on; with
        # no dead-letter queue nothing keeps them: the topic-to-sink stage counts each one lost.
        Scenario(
            "poison_records",
            "records the sink cannot convert written into the pipeline's topic mid-stream by another writer "
            "(nemesis.POISON_RECORDS of them, plain JSON without the converter's schema envelope)",
            side=PIPELINE_SIDE,
            timeline=(Step("poison", "topic", at=8.0),),
            expected=_expect(debezium_outbox_tolerant={"sink_lost": ">0", "end_to_end_lost": "=0", **_NO_ACKED_LOSS}),
            requires_tolerant_sink=True,
        ),
        Scenario(
            "consumer_crash",
            "the consumer process is killed (SIGKILL) at its strategy's crash point and restarted in the same group",
            side=CONSUMER,
            expected=_expect(
                commit_before_process=_LOSES,
                process_then_commit=_DUPLICATES,
                process_then_commit_dedup={"duplicate_events": "=0", "lost": "=0", "stale_overwrites": "=0"},
                transactional_copy={"duplicate_events": "=0", "lost": "=0", "aborted_visible": "=0"},
                auto_commit=_LOSES,
                start_at_latest=_LOSES,
                slow_poll_loop=_DUPLICATES,
            ),
        ),
    )
}
# A consumer run without a crash is judged like a fault-free producer run.
CONSUMER_SCENARIOS = ("none", "consumer_crash")
PRODUCER_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.side == PRODUCER)
PIPELINE_SCENARIOS = tuple(n for n, s in SCENARIOS.items() if s.side == PIPELINE_SIDE or s.pipelines)


# --------------------------------------------------------------------------- limits and forms

# Bounds of every run parameter: the forms' JSON schema and the validation read the same numbers.
LIMITS = {
    "messages": (1, 10_000_000),
    "partitions": (1, 64),
    "keys": (1, 100_000),
    "payload_bytes": (0, 1_000_000),
    "txn_size": (1, 100_000),
    "seed": (0, 2**31 - 1),
    "crashes": (1, 5),
    "batch_size": (1, 10_000),
    "producers": (1, 32),
}
# Producers per run unless a run asks otherwise: one Python producer keeps about one core busy, and
# the brokers need the rest (docs/BENCHMARKS.md, "Several producers per run").
DEFAULT_PRODUCERS = max(1, (os.cpu_count() or 2) // 2)
# The cluster pool's slots: a mapped producer task takes one, a task that runs a whole run takes
# them all, so runs never share the cluster. Runs with more producers than this queue the rest.
CLUSTER_POOL_SLOTS = DEFAULT_PRODUCERS
# A consumer run without a given input reads a fresh run of this mode: no producer-side fault, so
# whatever the checker finds in what the consumer wrote is the consumer's doing.
CONSUMER_INPUT_MODE = "idempotent"


# Where the checker's deduplicated copy of a run's data (one row per event id) goes.
DEDUP_COPY_STORES = {
    "lakehouse": "a Delta table, dedup_events under the lakehouse (SEMANTICS_LAKEHOUSE), partitioned by "
    "reconciliation; a rerun replaces its partition",
    "postgres": "the dedup_events table of the results database, written with COPY: for small runs",
    "off": "no copy: the same verdicts, sooner",
}
DEFAULT_DEDUP_COPY = "lakehouse"
# A copy's row, in every store: one event id of one reconciliation, its first copy by offset.
DEDUP_COPY_COLUMNS = ("event_id", "reconciliation_id", "key", "seq", "publish_at", "partition", "offset", "value")
DEDUP_COPY_TABLE = "dedup_events"


def dedup_copy_table(lakehouse: str) -> str:
    """Where the lakehouse copy's Delta table is under a lakehouse folder or URI."""
    return f"{lakehouse.rstrip('/')}/{DEDUP_COPY_TABLE}"


def dedup_copy_store(value: str | bool | None) -> str:
    """A form's dedup_copy as a store; true and false are what the field held before it named one."""
    if value is None or value is True:
        return DEFAULT_DEDUP_COPY
    if value is False:
        return "off"
    if value not in DEDUP_COPY_STORES:
        raise ValueError(f"dedup_copy {value!r} is not one of {', '.join(DEDUP_COPY_STORES)}")
    return value


# `make demo`'s tour: each behaviour DESIGN.md §3 and the seeds describe, once, in about ten
# minutes; `make matrix` runs every pair. A pair is "MODE x SCENARIO", on librdkafka unless it
# ends "on CLIENT"; a pipeline pair is "PIPELINE x SCENARIO".
TOUR: dict[str, list] = {
    "pairs": [
        "at_most_once x leader_kill",  # fire-and-forget loses what the dead leader had
        "at_least_once x lost_ack",  # a retry after a lost ack duplicates ...
        "at_least_once x lost_ack on java",  # ... on both clients
        "at_least_once x isolated_leader",  # acks=1: acked loss, and other events at its offsets
        "at_least_once_all x isolated_leader",  # acks=all keeps every acked event
        "idempotent x producer_crash",  # the restart caveat: a new producer id re-sends
        "transactional x producer_crash",  # exactly-once through a crash
        "transactional x txn_abort",  # aborted records never visible to read_committed
    ],
    "consumer_strategies": list(MATRIX_STRATEGIES),  # each under consumer_crash
    "pipeline_pairs": ["debezium_outbox x connect_worker_kill", "debezium_outbox_eos x connect_worker_kill"],
}
PAIR_PATTERN = r"^[a-z][a-z0-9_]{0,63} x [a-z][a-z0-9_]{0,63}( on [a-z][a-z0-9_]{0,31})?$"


def parse_pipeline_pair(text: str) -> tuple[str, str]:
    if not isinstance(text, str) or not re.fullmatch(PAIR_PATTERN, text) or " on " in text:
        raise CatalogError(f"pipeline pair {str(text)[:80]!r} is not 'PIPELINE x SCENARIO'")
    pipeline, _, scenario = text.partition(" x ")
    check_pipeline_pair(pipeline, scenario)
    return pipeline, scenario


# --------------------------------------------------------------------------- look-ups


def get_client(name: str | None, mode: DeliveryMode) -> str:
    """The client a run of `mode` uses: a mode file's own, or the one asked (librdkafka unless asked)."""
    if name is None:
        return mode.client or DEFAULT_CLIENT
    if name not in CLIENTS:
        raise ModeError(f"unknown client {name!r}: choose one of {', '.join(CLIENTS)}")
    if name not in mode.clients:
        raise ModeError(mode.refusal(name))
    return name


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except (KeyError, TypeError):
        raise CatalogError(f"unknown consumer strategy {name!r}: choose one of {', '.join(STRATEGIES)}") from None


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except (KeyError, TypeError):
        raise ScenarioError(f"unknown scenario {name!r}: choose one of {', '.join(SCENARIOS)}") from None


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except (KeyError, TypeError):
        raise ModeError(f"unknown pipeline {name!r}: choose one of {', '.join(PIPELINES)}") from None


def check_pipeline_pair(pipeline_name: str, scenario_name: str) -> tuple[Pipeline, Scenario]:
    pipeline = get_pipeline(pipeline_name)
    return pipeline, pipeline.check(scenario_name)


def pipeline_pairs(pipelines: list[str] | None = None, scenarios: list[str] | None = None) -> list[tuple[str, str]]:
    """Every valid pipeline x scenario pair, or those of the pipelines and scenarios named."""
    chosen = [get_pipeline(p) for p in pipelines] if pipelines is not None else list(PIPELINES.values())
    return [
        (p.name, s)
        for s in PIPELINE_SCENARIOS
        for p in chosen
        if not SCENARIOS[s].incompatible_pipeline(p) and (scenarios is None or s in scenarios)
    ]


def valid_pairs() -> list[tuple[str, str]]:
    return [(m, s) for s in PRODUCER_SCENARIOS for m, mode in MODES.items() if not SCENARIOS[s].incompatible(mode)]


# --------------------------------------------------------------------------- verdicts


def expectation(name: str, scenario: str) -> Mapping[str, str]:
    s = SCENARIOS.get(scenario)
    return s.expected.get(name, {}) if s else {}


def expectation_text(name: str, scenario: str) -> str:
    return _expectation_text(expectation(name, scenario))


def _expectation_text(expected: Mapping[str, str]) -> str:
    return ", ".join(f"{k} {v[0]} {v[1:]}" for k, v in expected.items()) or "-"


def broken_settings(findings: list[Mapping], broken: list[str]) -> list[str]:
    """The settings (runs.findings) that contradict a guarantee the broken kinds broke."""
    guarantees = {KINDS[k].breaks for k in broken}
    return [f["setting"] for f in findings if f["guarantee"] in guarantees]


def meets_expectation(name: str, scenario: str, counts: Counts) -> bool | None:
    return _meets(side_of(name), expectation(name, scenario), counts)


def _meets(side: str, expected: Mapping[str, str], counts: Counts) -> bool | None:
    if not expected:
        return None
    seen = {
        key: counts.observe(kind, stage) or 0 for key, (stage, kind) in observations(side).items() if key in expected
    }
    return all((seen[key] > 0) if v == ">0" else (seen[key] == 0) for key, v in expected.items())


@dataclass(frozen=True)
class Definition:
    """What a run is judged against, resolved when it is made and kept with it (`runs.definition`,
    `consumer_runs.definition`): the subject's side, isolation and promise, the guarantees its
    scenario leaves in force, DESIGN.md's expectation under that scenario, whether it writes
    transactions, and a mode's producer settings. As Jepsen keeps a test's map with its history, a
    run is judged by its own: editing or deleting a mode file later changes no verdict of a run
    made before, and a changed definition has a new `digest`."""

    name: str
    side: str
    scenario: str
    isolation: str
    promise: str
    in_force: tuple[str, ...]
    expected: Mapping[str, str] = field(default_factory=dict)
    transactional: bool = False
    settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, subject: Subject, scenario: str, settings: Mapping | None = None) -> Definition:
        return cls(
            subject.name,
            subject.side,
            scenario,
            subject.isolation,
            subject.promise.text,
            tuple(subject.promise.in_force(scenario)),
            MappingProxyType(dict(expectation(subject.name, scenario))),
            subject.transactional,
            MappingProxyType({k: str(v) for k, v in (settings or {}).items()}),
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "side": self.side,
            "scenario": self.scenario,
            "isolation": self.isolation,
            "promise": self.promise,
            "in_force": list(self.in_force),
            "expected": dict(self.expected),
            "transactional": self.transactional,
            "settings": dict(self.settings),
        }

    @classmethod
    def from_json(cls, doc: Mapping) -> Definition:
        """A definition kept with a run; one that is not what to_json wrote is refused, not guessed at."""
        try:
            d = cls(
                doc["name"],
                doc["side"],
                doc["scenario"],
                doc["isolation"],
                doc["promise"],
                tuple(doc["in_force"]),
                MappingProxyType(dict(doc["expected"])),
                bool(doc["transactional"]),
                MappingProxyType(dict(doc["settings"])),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CatalogError(f"a run's definition is not one the platform wrote: {e!r}") from None
        if set(doc) != set(d.to_json()) or not set(d.in_force) <= set(GUARANTEES) or d.isolation not in ISOLATIONS:
            raise CatalogError(f"a run's definition is not one the platform wrote: {sorted(doc)}")
        return d

    @property
    def digest(self) -> str:
        """A content hash of the definition: two runs judged alike have the same."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def verdict(self, isolation: str, counts: Counts, stage: str = OUTBOX_TOPIC) -> tuple[str, list[str]]:
        """('kept' | 'broken' | 'n/a', the kinds that broke it): the one verdict of every subject, on
        its counts at the stage it reads (a sink's strategy reads topic_sink), on its own isolation
        level, with the guarantees in force. As Jepsen's checker: the kinds seen, less those the
        promise allows."""
        if isolation != self.isolation:
            return "n/a", []
        broken = [k for g in self.in_force for k in BROKEN_BY[g] if counts.of(k, stage) > 0]
        return ("broken" if broken else "kept"), broken

    def meets(self, counts: Counts) -> bool | None:
        return _meets(self.side, self.expected, counts)

    @property
    def expectation_text(self) -> str:
        return _expectation_text(self.expected)
