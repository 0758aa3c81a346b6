"""The rule catalog: the settings that decide delivery, read as Kafka's experts read them, each
with the guarantee it takes away, the fault that exposes it and the anomaly kind the checker must
then report. A second, independent account of the semantics beside the checker: `predict` reads a
configuration and says what each setting breaks before any load, and a run proves it or not.

Settings come by family (producer, topic, broker, consumer, connector, and the cluster's feature
levels), under their clients' own key names. A family that is not given is not judged; within a
given family, a key not given takes its client's or Kafka's default (DEFAULTS), and a topic's key not
set on the topic takes the broker's (the effective value, as Kafka resolves it). Each value read
says where it came from: set, topic, broker default, Kafka default or client default, or the
source a live cluster reported. Keys under `app.` say what the application does around the client
(`app.commit`: when a consumer commits; `app.dedup`: whether it skips what it applied;
`app.processing.ms`: how long it works on a poll; a producer's `app.resends_failed`: whether it
sends again what failed, false unless said), which no client setting can say.

Pure Python over the catalog: no client, no Spark; the rules run in milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from delivery_semantics import catalog, modes

FAMILIES = ("producer", "topic", "broker", "consumer", "connector", "cluster")
# The catalog's guarantees, and `delivery`: every event sent arrives, acked or not.
GUARANTEES = (*catalog.GUARANTEES, "delivery", "no_reordering")

# A killed leader is fenced once its broker's session times out (broker.session.timeout.ms, Kafka's
# default 9 s; the local stack's 6 s), then a leader is elected and the clients refresh their
# metadata: this much more. A send that must land sooner fails instead.
ELECTION_MS = 3_000
# The longest stall of a fault scenario (isolated_leader's paused followers, lost_ack's 15 s).
LONGEST_STALL_MS = 22_000
# A killed broker back and leading its partitions: leader_kill's 12 s down, then its log recovery
# and registration. A partition whose only replica it holds takes writes again no sooner.
BROKER_RESTART_MS = 20_000

DEFAULTS: dict[str, dict[str, str]] = {
    # The producer's client is librdkafka unless `client` says java (catalog.CLIENT_DEFAULTS).
    # A topic's min.insync.replicas, unclean election, retention and cleanup policy are its broker's
    # unless set on it (_effective); the broker's keys default to Kafka's.
    "topic": {"replication.factor": "3"},
    "broker": {
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": "1",
        "broker.session.timeout.ms": "9000",
        "log.retention.hours": "168",
        "log.retention.bytes": "-1",
        "log.cleanup.policy": "delete",
    },
    "consumer": {
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": "5000",
        "auto.offset.reset": "latest",
        "isolation.level": "read_uncommitted",
        "max.poll.interval.ms": "300000",
        "app.commit": "after_process",
        "app.dedup": "false",
    },
    "connector": {"errors.tolerance": "none", "exactly.once.source.support": "disabled", "insert.mode": "insert"},
    "cluster": {},
}
# A topic's keys that fall back to its broker's when not set on it, by their broker names.
BROKER_FALLBACK = {
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "cleanup.policy": "log.cleanup.policy",
    "retention.bytes": "log.retention.bytes",
}

KAFKA_DOCS = "https://kafka.apache.org/documentation/"
DEBEZIUM_JDBC = "https://debezium.io/documentation/reference/stable/connectors/jdbc.html"


@dataclass(frozen=True)
class Rule:
    name: str
    family: str
    reads: tuple[str, ...]  # "family.key", each a setting the rule reads
    kind: str  # catalog.KINDS: what the checker must report once the fault hits
    scenarios: tuple[str, ...]  # catalog.SCENARIOS that expose it ("none": no fault needed)
    guarantee: str
    reason: str
    reference: str
    applies: Callable[[Mapping[str, Mapping[str, str]]], bool]


@dataclass(frozen=True)
class Prediction:
    rule: Rule
    settings: dict[str, str]  # what the rule read, as given or defaulted: its effective values
    sources: dict[str, str] = field(default_factory=dict)  # where each came from (set, topic, broker default...)

    def line(self) -> str:
        said = ", ".join(
            f"{k}={v}" + (f" ({self.sources[k]})" if self.sources.get(k) else "") for k, v in self.settings.items()
        )
        return (
            f"{self.rule.name}: {said} breaks {self.rule.guarantee}; under {' or '.join(self.rule.scenarios)} "
            f"expect {self.rule.kind}: {self.rule.reason}"
        )


def _int(value, default: int = 0) -> int:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _acks(view) -> str:
    return {"-1": "all"}.get(str(view["producer"].get("acks")), str(view["producer"].get("acks")))


def _idempotent(view) -> bool:
    p = view["producer"]
    return _true(p.get("enable.idempotence")) or bool(p.get("transactional.id"))


def _drops_failed_sends(view) -> bool:
    """A send that fails (or a transaction that fails to commit) is the application's to send again
    (`app.resends_failed`), and a loss where it does not."""
    return not _true((view.get("producer") or {}).get("app.resends_failed"))


def _delivery_timeout(view) -> int:
    p = view["producer"]
    return _int(p.get("delivery.timeout.ms") or p.get("message.timeout.ms"), 120_000)


def _effective(view, key: str, default: str) -> str:
    """A topic's key as Kafka resolves it: set on the topic, else its broker's, else Kafka's default."""
    topic, broker = view.get("topic") or {}, view.get("broker") or {}
    value = topic.get(key)
    if value in (None, "") and key in BROKER_FALLBACK:
        value = broker.get(BROKER_FALLBACK[key])
    return default if value in (None, "") else str(value)


def _min_isr(view) -> int:
    return _int(_effective(view, "min.insync.replicas", "1"), 1)


def _unclean(view) -> bool:
    return _true(_effective(view, "unclean.leader.election.enable", "false"))


def _retention_ms(view) -> int:
    """The topic's time retention: retention.ms, else its broker's log.retention.ms, .minutes or
    .hours (the first given of them wins, as in Kafka); -1 for none."""
    topic, broker = view.get("topic") or {}, view.get("broker") or {}
    if topic.get("retention.ms") not in (None, ""):
        return _int(topic["retention.ms"], -1)
    for key, unit in (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)):
        if broker.get(key) not in (None, ""):
            value = _int(broker[key], -1)
            return -1 if value < 0 else value * unit
    return 168 * 3_600_000


def _failover_ms(view) -> int:
    broker = view.get("broker") or {}
    return _int(broker.get("broker.session.timeout.ms"), 9_000) + ELECTION_MS


def _audit_window_ms(view) -> int:
    return _int((view.get("topic") or {}).get("app.audit.window.ms"), 0)


def _acked_by_one_copy(view) -> bool:
    """An acked write may be on its leader alone: acks below all, or an ISR allowed to shrink to
    the leader (a producer not given may be either)."""
    return view.get("producer") is None or _acks(view) != "all" or _min_isr(view) <= 1


def _retention_short(view) -> bool:
    retention, window = _retention_ms(view), _audit_window_ms(view)
    return retention >= 0 and window > 0 and retention < window


def _compacted(view) -> bool:
    return "compact" in _effective(view, "cleanup.policy", "delete").lower()


def _retention_by_size(view) -> bool:
    return _int(_effective(view, "retention.bytes", "-1"), -1) >= 0 and _audit_window_ms(view) > 0


def _java(view) -> bool:
    return view.get("client") == "java"


RULES: tuple[Rule, ...] = (
    # ----------------------------------------------------------------- producer
    Rule(
        "acks_zero",
        "producer",
        ("producer.acks",),
        "lost_unacked",
        ("leader_kill", "partitioned_leader", "isolated_leader", "rolling_restart"),
        "delivery",
        "nothing waits for the leader: what its socket held when it died is gone, and no one knows",
        KAFKA_DOCS + "#producerconfigs_acks",
        lambda v: _acks(v) == "0",
    ),
    Rule(
        "acks_one",
        "producer",
        ("producer.acks",),
        "lost_acked",
        ("isolated_leader", "partitioned_leader", "shrunk_isr_leader_kill"),
        "no_acked_loss",
        "the leader acks before any follower has the write; a leader cut off or killed first takes it along",
        KAFKA_DOCS + "#producerconfigs_acks",
        lambda v: _acks(v) == "1",
    ),
    Rule(
        "acks_one_offsets",
        "producer",
        ("producer.acks",),
        "inconsistent_offset",
        ("isolated_leader", "partitioned_leader", "shrunk_isr_leader_kill"),
        "no_acked_loss",
        "the acked writes the followers never had are truncated, and the new leader writes others at their offsets",
        KAFKA_DOCS + "#replication",
        lambda v: _acks(v) == "1",
    ),
    Rule(
        "retries_without_idempotence",
        "producer",
        (
            "producer.enable.idempotence",
            "producer.retries",
            "producer.acks",
            "producer.request.timeout.ms",
            "producer.delivery.timeout.ms",
            "producer.message.timeout.ms",
        ),
        "duplicate",
        ("lost_ack",),
        "no_duplicates",
        "a send retried after its ack was lost is written again: only idempotence lets the broker drop it (a "
        "delivery timeout no longer than the request timeout fails the send before any retry: no copy, a loss)",
        KAFKA_DOCS + "#producerconfigs_enable.idempotence",
        lambda v: (
            not _idempotent(v)
            and _int(v["producer"].get("retries"), 1) > 0
            and _acks(v) != "0"
            and _delivery_timeout(v) > _int(v["producer"].get("request.timeout.ms"), 30_000)
        ),
    ),
    Rule(
        "in_flight_without_idempotence",
        "producer",
        (
            "producer.enable.idempotence",
            "producer.max.in.flight.requests.per.connection",
            "producer.retries",
        ),
        "out_of_order",
        # Lost acks alone cannot show it: every request is written, in order, and a retry adds only
        # a later copy. A leader's move refuses some batches and not the ones behind them (measured
        # by `make matrix`: both clients reorder under a rolling restart; Java alone under a kill).
        ("rolling_restart", "leader_kill"),
        "no_reordering",
        "with several batches in flight, one refused as its leader moves is retried behind the batches sent after it",
        KAFKA_DOCS + "#producerconfigs_max.in.flight.requests.per.connection",
        lambda v: (
            not _idempotent(v)
            and _int(v["producer"].get("max.in.flight.requests.per.connection"), 5) > 1
            and _int(v["producer"].get("retries"), 1) > 0
            and _acks(v) != "0"
        ),
    ),
    Rule(
        "delivery_timeout_shorter_than_failover",
        "producer",
        (
            "producer.delivery.timeout.ms",
            "producer.message.timeout.ms",
            "producer.app.resends_failed",
            "broker.broker.session.timeout.ms",
        ),
        "lost_unacked",
        ("leader_kill", "partitioned_leader"),
        "delivery",
        f"a send must land within the timeout, and a lost leader is replaced only after its broker's session "
        f"times out and an election (about {ELECTION_MS // 1000} s more): it fails, and an application that "
        "drops failures loses it",
        KAFKA_DOCS + "#producerconfigs_delivery.timeout.ms",
        lambda v: _drops_failed_sends(v) and _delivery_timeout(v) < _failover_ms(v),
    ),
    Rule(
        "retries_zero",
        "producer",
        ("producer.retries", "producer.acks", "producer.app.resends_failed"),
        "lost_unacked",
        ("leader_kill", "rolling_restart"),
        "delivery",
        "a send refused as its leader moves (NOT_LEADER, a closed connection) is not tried again: the "
        "application gets the error, and one that drops it loses the event",
        KAFKA_DOCS + "#producerconfigs_retries",
        lambda v: _int(v["producer"].get("retries"), 1) == 0 and _acks(v) != "0" and _drops_failed_sends(v),
    ),
    Rule(
        "idempotence_across_restarts",
        "producer",
        ("producer.enable.idempotence", "producer.transactional.id"),
        "duplicate",
        ("producer_crash",),
        "no_duplicates",
        "idempotence holds within one producer id; a restarted producer gets a new one and re-sends what the "
        "old one may have written (KIP-98)",
        "https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging",
        lambda v: _true(v["producer"].get("enable.idempotence")) and not v["producer"].get("transactional.id"),
    ),
    Rule(
        "transaction_timeout_shorter_than_a_stall",
        "producer",
        ("producer.transaction.timeout.ms", "producer.transactional.id", "producer.app.resends_failed"),
        "lost_unacked",
        ("isolated_leader", "partitioned_leader"),
        "delivery",
        "the coordinator aborts a transaction open longer than its timeout (and librdkafka times out its records "
        "no later): a stall that outlasts it aborts the transaction, and an application that does not send it "
        "again loses its events",
        KAFKA_DOCS + "#producerconfigs_transaction.timeout.ms",
        lambda v: (
            bool(v["producer"].get("transactional.id"))
            and _int(v["producer"].get("transaction.timeout.ms"), 60_000) < LONGEST_STALL_MS
            and _drops_failed_sends(v)
        ),
    ),
    Rule(
        "transactions_read_uncommitted",
        "producer",
        ("producer.transactional.id", "consumer.isolation.level"),
        "aborted_visible",
        ("txn_abort", "producer_crash"),
        "no_aborted_visible",
        "a transactional producer's aborted records are in the log; only read_committed consumers skip them",
        KAFKA_DOCS + "#consumerconfigs_isolation.level",
        lambda v: (
            v.get("consumer") is not None
            and bool(v["producer"].get("transactional.id"))
            and v["consumer"].get("isolation.level") == "read_uncommitted"
        ),
    ),
    # ----------------------------------------------------------------- topic and broker
    Rule(
        "min_insync_one",
        "topic",
        ("topic.min.insync.replicas", "broker.min.insync.replicas", "producer.acks"),
        "lost_acked",
        # Not under isolated_leader: a leader cut off from the controllers cannot shrink its ISR
        # (KRaft's AlterPartition), so acks=all waits and acks nothing. Measured on a 6,000-event
        # run of at_least_once_all: 1,566 acked events lost with min.insync.replicas=1, none with 2.
        ("shrunk_isr_leader_kill",),
        "no_acked_loss",
        "acks=all waits for the in-sync replicas only: with min.insync.replicas=1 a leader whose followers "
        "lag shrinks the ISR to itself and acks alone, and those writes die with it",
        KAFKA_DOCS + "#topicconfigs_min.insync.replicas",
        lambda v: v.get("producer") is not None and _acks(v) == "all" and _min_isr(v) <= 1,
    ),
    Rule(
        "unclean_leader_election",
        "topic",
        (
            "topic.unclean.leader.election.enable",
            "broker.unclean.leader.election.enable",
            "cluster.eligible.leader.replicas.version",
        ),
        "lost_acked",
        ("shrunk_isr_leader_kill",),
        "no_acked_loss",
        "an out-of-sync replica may become leader: the acked writes only the lost leader had (acks=1, or "
        "min.insync.replicas=1) are truncated; with acks=all and two in-sync copies, only a second failure "
        "would lose them",
        KAFKA_DOCS + "#topicconfigs_unclean.leader.election.enable",
        lambda v: _unclean(v) and _acked_by_one_copy(v),
    ),
    Rule(
        "replication_factor_one",
        "topic",
        (
            "topic.replication.factor",
            "producer.delivery.timeout.ms",
            "producer.message.timeout.ms",
            "producer.app.resends_failed",
        ),
        "lost_unacked",
        ("leader_kill",),
        "delivery",
        f"one replica: no other can lead while its broker is down, so its partitions take no write until it is "
        f"back (about {BROKER_RESTART_MS // 1000} s after a kill here, minutes in an upgrade), and a send that "
        "waits longer than its delivery timeout fails; its disk is also the only copy",
        KAFKA_DOCS + "#replication",
        lambda v: (
            _int((v.get("topic") or {}).get("replication.factor"), 3) <= 1
            and (v.get("producer") is None or (_drops_failed_sends(v) and _delivery_timeout(v) < BROKER_RESTART_MS))
        ),
    ),
    Rule(
        "retention_shorter_than_the_audit",
        "topic",
        ("topic.retention.ms", "broker.log.retention.ms", "broker.log.retention.hours", "topic.app.audit.window.ms"),
        "lost_acked",
        ("none",),
        "no_acked_loss",
        "records are deleted before the audit's window and grace have read them",
        KAFKA_DOCS + "#topicconfigs_retention.ms",
        _retention_short,
    ),
    Rule(
        "retention_by_size",
        "topic",
        ("topic.retention.bytes", "broker.log.retention.bytes", "topic.app.audit.window.ms"),
        "lost_acked",
        ("none",),
        "no_acked_loss",
        "a partition's oldest segments are deleted once it holds more bytes than this, however young they are: "
        "a burst can delete records before the audit's window has read them",
        KAFKA_DOCS + "#topicconfigs_retention.bytes",
        _retention_by_size,
    ),
    Rule(
        "compacted_topic",
        "topic",
        ("topic.cleanup.policy", "broker.log.cleanup.policy"),
        "lost_acked",
        ("none",),
        "no_acked_loss",
        "compaction keeps only the newest record of each key: the older events of a key are deleted, and a "
        "reader that comes after the cleaner finds them missing",
        KAFKA_DOCS + "#topicconfigs_cleanup.policy",
        _compacted,
    ),
    Rule(
        "broker_unclean_leader_election",
        "broker",
        ("broker.unclean.leader.election.enable",),
        "lost_acked",
        ("shrunk_isr_leader_kill",),
        "no_acked_loss",
        "the cluster's default lets every topic without its own setting elect an out-of-sync replica",
        KAFKA_DOCS + "#brokerconfigs_unclean.leader.election.enable",
        lambda v: (
            _true((v.get("broker") or {}).get("unclean.leader.election.enable"))
            and (v.get("topic") or {}).get("unclean.leader.election.enable") in (None, "")
            and _acked_by_one_copy(v)
        ),
    ),
    # ----------------------------------------------------------------- consumer
    Rule(
        "auto_commit",
        "consumer",
        ("consumer.enable.auto.commit", "consumer.auto.commit.interval.ms", "consumer.enable.auto.offset.store"),
        "lost",
        ("consumer_crash",),
        "delivery",
        "librdkafka commits the stored offsets on a timer, and stores each record's as poll() returns it, "
        "whatever was processed: a crash after a commit loses the records polled but not yet processed (Java's "
        "consumer commits inside poll() what the previous poll returned, and enable.auto.offset.store=false "
        "stores only what the application stores: neither loses in a loop that processes before it polls)",
        KAFKA_DOCS + "#consumerconfigs_enable.auto.commit",
        lambda v: (
            _true(v["consumer"].get("enable.auto.commit"))
            and v["consumer"].get("app.commit") != "transactional"
            and not _java(v)
            and _true(v["consumer"].get("enable.auto.offset.store", "true"))
        ),
    ),
    Rule(
        "commit_before_process",
        "consumer",
        ("consumer.app.commit",),
        "lost",
        ("consumer_crash",),
        "delivery",
        "the offsets are committed before the batch is processed: a crash in between skips it",
        KAFKA_DOCS + "#semantics",
        lambda v: v["consumer"].get("app.commit") == "before_process",
    ),
    Rule(
        "commit_after_process_without_dedup",
        "consumer",
        ("consumer.app.commit", "consumer.app.dedup"),
        "duplicate",
        ("consumer_crash",),
        "no_duplicates",
        "a crash after processing and before the commit processes the batch again",
        KAFKA_DOCS + "#semantics",
        lambda v: v["consumer"].get("app.commit") == "after_process" and not _true(v["consumer"].get("app.dedup")),
    ),
    Rule(
        "auto_offset_reset_latest",
        "consumer",
        ("consumer.auto.offset.reset",),
        "lost",
        ("none", "consumer_crash"),
        "delivery",
        "a new group, or one whose offsets expired, starts at the end: what was written before is never read",
        KAFKA_DOCS + "#consumerconfigs_auto.offset.reset",
        lambda v: v["consumer"].get("auto.offset.reset") == "latest",
    ),
    Rule(
        "max_poll_interval_shorter_than_processing",
        "consumer",
        ("consumer.max.poll.interval.ms", "consumer.app.processing.ms"),
        "duplicate",
        ("none",),
        "no_duplicates",
        "a poll loop slower than the interval leaves the group; its partitions move, and the batch it was "
        "processing is processed again by their new owner",
        KAFKA_DOCS + "#consumerconfigs_max.poll.interval.ms",
        lambda v: (
            _int(v["consumer"].get("app.processing.ms"), 0) > _int(v["consumer"].get("max.poll.interval.ms"), 300_000)
        ),
    ),
    Rule(
        "read_uncommitted_on_a_transactional_topic",
        "consumer",
        ("consumer.isolation.level", "topic.app.transactional"),
        "aborted_visible",
        ("txn_abort",),
        "no_aborted_visible",
        "a transactional topic holds aborted records; read_uncommitted shows them",
        KAFKA_DOCS + "#consumerconfigs_isolation.level",
        lambda v: (
            v["consumer"].get("isolation.level") == "read_uncommitted"
            and _true((v.get("topic") or {}).get("app.transactional"))
        ),
    ),
    # ----------------------------------------------------------------- connector
    Rule(
        "errors_tolerated_without_a_dead_letter_queue",
        "connector",
        ("connector.errors.tolerance", "connector.errors.deadletterqueue.topic.name"),
        "lost",
        ("poison_records",),
        "delivery",
        "a record that fails conversion is skipped; a sink's dead-letter queue keeps it, and a source has none",
        KAFKA_DOCS + "#sinkconnectorconfigs_errors.tolerance",
        lambda v: (
            v["connector"].get("errors.tolerance") == "all"
            and (_source(v) or not v["connector"].get("errors.deadletterqueue.topic.name"))
        ),
    ),
    Rule(
        "source_without_exactly_once",
        "connector",
        ("connector.exactly.once.source.support", "connector.exactly.once.support"),
        "duplicate",
        ("connect_worker_kill",),
        "no_duplicates",
        "a source task's offsets are committed apart from its records: a killed worker's successor re-sends "
        "what came after the last commit (KIP-618)",
        "https://cwiki.apache.org/confluence/display/KAFKA/KIP-618%3A+Exactly-Once+Support+for+Source+Connectors",
        lambda v: (
            # A connector that requires exactly-once support runs only on a worker that gives it.
            v["connector"].get("exactly.once.source.support") != "enabled"
            and v["connector"].get("exactly.once.support") != "required"
            and _source(v)
        ),
    ),
    Rule(
        "jdbc_sink_insert",
        "connector",
        ("connector.insert.mode",),
        "duplicate",
        ("sink_worker_kill",),
        "no_duplicates",
        "a sink redelivers what it had not committed when its worker died; insert writes it again, upsert would "
        "not (with a primary key from the record, insert fails the task on the redelivered row instead)",
        DEBEZIUM_JDBC + "#jdbc-property-insert-mode",
        lambda v: _jdbc_sink(v) and v["connector"].get("insert.mode") == "insert" and not _keyed_by_record(v),
    ),
    Rule(
        "jdbc_sink_keyed_by_kafka_coordinates",
        "connector",
        ("connector.insert.mode", "connector.primary.key.mode", "connector.pk.mode"),
        "duplicate",
        ("connect_worker_kill",),
        "no_duplicates",
        "upsert keyed by the record's topic, partition and offset: a redelivery lands on its own row, but an event "
        "its source sent twice has two offsets, so two rows",
        DEBEZIUM_JDBC + "#jdbc-property-primary-key-mode",
        lambda v: (
            _jdbc_sink(v)
            and v["connector"].get("insert.mode") in ("upsert", "update")
            and _primary_key_mode(v) == "kafka"
        ),
    ),
    Rule(
        "producer_override_weakens_acks",
        "connector",
        ("connector.producer.override.acks",),
        "lost_acked",
        ("isolated_leader",),
        "no_acked_loss",
        "the connector's own producer acks before the followers have its records",
        KAFKA_DOCS + "#connectconfigs_connector.client.config.override.policy",
        lambda v: str(v["connector"].get("producer.override.acks", "all")) in ("0", "1"),
    ),
    Rule(
        "sink_reads_uncommitted",
        "connector",
        ("connector.consumer.override.isolation.level",),
        "aborted_visible",
        ("connect_worker_kill",),
        "no_aborted_visible",
        "a sink that reads read_uncommitted applies what an exactly-once source aborted",
        KAFKA_DOCS + "#consumerconfigs_isolation.level",
        lambda v: _jdbc_sink(v) and v["connector"].get("consumer.override.isolation.level") == "read_uncommitted",
    ),
)

RULES_BY_NAME = {r.name: r for r in RULES}
# Every "family.key" a rule reads.
READS = frozenset(ref for r in RULES for ref in r.reads)
# What is read of a live connector's configuration: what the connector rules read, and its class.
CONNECTOR_KEYS = frozenset(
    {"connector.class", *(ref.split(".", 1)[1] for r in RULES for ref in r.reads if ref.startswith("connector."))}
)


def _source(view) -> bool:
    """A source connector: every class that is not a sink (Debezium's are named by database)."""
    return "sink" not in str(view["connector"].get("connector.class", "")).lower()


def _jdbc_sink(view) -> bool:
    cls = str(view["connector"].get("connector.class", "")).lower()
    return "jdbc" in cls and "sink" in cls


def _primary_key_mode(view) -> str:
    """A JDBC sink's key: Debezium's primary.key.mode, or Confluent's pk.mode (none by default)."""
    c = view["connector"]
    return str(c.get("primary.key.mode") or c.get("pk.mode") or "none").lower()


def _keyed_by_record(view) -> bool:
    return _primary_key_mode(view) in ("record_key", "record_value", "record_header")


class RuleError(ValueError):
    """Bad input to predict: one line, exit 2."""


def view_of(given: Mapping[str, Mapping[str, object]], client: str = catalog.DEFAULT_CLIENT) -> dict:
    """The settings by family, each given family filled with its defaults; the others None. The
    client (librdkafka or java) under `client`: where the two differ, a rule asks."""
    unknown = set(given) - set(FAMILIES)
    if unknown:
        raise RuleError(f"unknown settings family {sorted(unknown)[0]!r}: use {', '.join(FAMILIES)}")
    if client not in catalog.CLIENTS:
        raise RuleError(f"unknown client {client!r}: choose from {', '.join(catalog.CLIENTS)}")
    connector = given.get("connector")
    if connector is not None and not connector.get("connector.class"):
        # A source and a sink break different guarantees: neither is assumed.
        raise RuleError("connector.class is needed: it tells a source connector from a sink")
    view: dict = dict.fromkeys(FAMILIES)
    for family, settings in given.items():
        base = catalog.CLIENT_DEFAULTS[client] if family == "producer" else DEFAULTS.get(family, {})
        view[family] = {**base, **{str(k): str(v) for k, v in settings.items()}}
    view["client"] = client
    return view


def _origin(ref: str, view: dict, given: Mapping, sources: Mapping[str, str]) -> str:
    """Where a value read came from: what a live cluster said, set by the user, or a default."""
    family, key = ref.split(".", 1)
    if ref in sources:
        return sources[ref]
    if key in (given.get(family) or {}):
        return "set"
    if family == "topic" and key in BROKER_FALLBACK and key not in (view.get("topic") or {}):
        return _origin(f"broker.{BROKER_FALLBACK[key]}", view, given, sources)
    if family in ("producer", "consumer") and not key.startswith("app."):
        return f"{view['client']} default"
    return {"topic": "Kafka default", "broker": "Kafka default", "connector": "connector default"}.get(
        family, "default"
    )


def predict(
    given: Mapping[str, Mapping[str, object]],
    client: str = catalog.DEFAULT_CLIENT,
    sources: Mapping[str, str] | None = None,
) -> list[Prediction]:
    """Each rule whose family was given and whose settings are there, with the effective values it
    read and where each came from (`sources`: "family.key" -> what a live cluster reported)."""
    view = view_of(given, client)
    out = []
    for rule in RULES:
        if view.get(rule.family) is None:
            continue
        if rule.applies(view):
            read, where = {}, {}
            for ref in rule.reads:
                family, key = ref.split(".", 1)
                value = (view.get(family) or {}).get(key)
                if family == "topic" and key in BROKER_FALLBACK:
                    value = _effective(view, key, "") or None
                if value not in (None, ""):
                    read[ref] = value
                    where[ref] = _origin(ref, view, given, sources or {})
            out.append(Prediction(rule, read, where))
    return out


# The topic a platform run writes: the local stack's and the compose file's cluster defaults.
PLATFORM_TOPIC = {"replication.factor": "3", "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


def of_mode(name: str, client: str | None = None) -> tuple[dict, str, dict[str, str]]:
    """A preset's or a mode file's producer settings as its runs on the client have them (a
    preset's with the client's tuning: librdkafka's runs wait 60 s for a send, not 300 s) on the
    platform's own topic; the client; and where each value came from (the mode, the tuning), as
    `predict` takes it."""
    mode = modes.get_mode(name)
    client = client or mode.client or catalog.DEFAULT_CLIENT
    settings = mode.producer_settings(client)
    tuning = set(settings) - set(mode.semantics)
    if mode.transactional:
        settings.setdefault("transactional.id", f"semantics-{name}")
    # The platform's load sends again what was not acked, but at_most_once's.
    settings["app.resends_failed"] = str(mode.resends_unacked).lower()
    sources = {f"producer.{k}": f"the platform's {client} tuning" if k in tuning else f"mode {name}" for k in settings}
    return {"producer": settings, "topic": dict(PLATFORM_TOPIC)}, client, sources


def of_pipeline(name: str) -> dict[str, dict]:
    """A connector pipeline's two connectors, each with its cluster's worker settings, by role."""
    pipeline = catalog.get_pipeline(name)
    worker = dict(pipeline.worker_settings)
    source = {"connector.class": catalog.SOURCE_CONNECTOR, **worker, **dict(pipeline.source_settings)}
    sink = {"connector.class": catalog.SINK_CONNECTOR, "insert.mode": catalog.SINK_INSERT_MODE}
    return {"source": {"connector": source}, "sink": {"connector": {**sink, **dict(pipeline.sink_settings)}}}


def observed_columns(found) -> set[str]:
    """The summary counts predictions say are above zero (`lost` with either loss)."""
    cols = {catalog.KINDS[p.rule.kind].summary for p in found}
    return cols | ({"lost"} if cols & {"lost_acked", "lost_unacked"} else set())


def disagreements() -> list[str]:
    """Where the two accounts of the semantics part, on each preset x scenario pair: a count
    DESIGN.md §3 expects above zero (catalog.Scenario.expected) that no rule predicts, or one it
    expects to be zero that a rule predicts."""
    out = []
    for mode, scenario in catalog.valid_pairs():
        given, client, tuned = of_mode(mode)
        predicted = observed_columns(p for p in predict(given, client, tuned) if scenario in p.rule.scenarios)
        expected = catalog.expectation(mode, scenario)
        for key, value in expected.items():
            if (value == ">0") != (key in predicted):
                said = "predicted by no rule" if value == ">0" else "predicted by a rule"
                out.append(f"{mode} x {scenario}: DESIGN.md expects {key} {value}, {said}")
    return out


# Two accounts of one semantics: they agree, or the package does not load.
if _disagree := disagreements():
    raise RuleError("the rules and DESIGN.md's expectations disagree: " + "; ".join(_disagree))
