"""The Airflow forms: each DAG's fields as JSON schema (Param keyword arguments), made from the
catalog's facts, so that a form offers what the catalog holds and its bounds are the catalog's
limits. A DAG file turns one into its Params (entry/dag_factory.py's `params`)."""

from __future__ import annotations

from delivery_semantics.catalog import (
    CLIENTS,
    CONSUMER_INPUT_MODE,
    CONSUMER_SCENARIOS,
    DEDUP_COPY_STORES,
    DEFAULT_DEDUP_COPY,
    DEFAULT_PRODUCERS,
    LIMITS,
    MATRIX_STRATEGIES,
    MODES,
    PAIR_PATTERN,
    PIPELINE_SCENARIOS,
    PIPELINES,
    PRODUCER_SCENARIOS,
    SCENARIOS,
    STRATEGIES,
    TOUR,
    TXN_SIZE,
    TXNS_PER_RUN,
    DeliveryMode,
)
from delivery_semantics.client_settings import form_keys
from delivery_semantics.modes import all_modes, get_mode


def _int_param(default: int, name: str, description: str) -> dict:
    lo, hi = LIMITS[name]
    return {"default": default, "type": "integer", "minimum": lo, "maximum": hi, "description": description}


def load_form(messages: int = 20_000) -> dict[str, dict]:
    """The load parameters of a form, as Param keyword arguments (JSON schema)."""
    return {
        "messages": _int_param(messages, "messages", "events to produce"),
        "partitions": _int_param(3, "partitions", "partitions of the run's topic (RF 3, min ISR 2)"),
        "keys": _int_param(16, "keys", "record keys per producer; each key has one writer and its own sequence"),
        "payload_bytes": _int_param(200, "payload_bytes", "bytes of payload per record"),
        "record_format": RECORD_FORMAT_PARAM,
        "txn_size": {
            **_int_param(None, "txn_size", "events per transaction (transactional mode)"),
            "type": ["null", "integer"],
            "description": f"events per transaction (transactional mode); empty: {TXN_SIZE}, or messages / "
            f"{TXNS_PER_RUN} when more",
        },
        "abort_ratio": {
            "default": 0.0,
            "type": "number",
            "minimum": 0,
            "maximum": 0.99,
            "description": "share of transactions aborted and resent (transactional mode)",
        },
        "seed": _int_param(0, "seed", "seed of the generator and of the abort decisions"),
        "producers": _int_param(
            DEFAULT_PRODUCERS, "producers", "producer processes, each with its own slice of the events"
        ),
    }


# How the producers write each record (layouts.RECORD_FORMATS).
RECORD_FORMAT_PARAM = {
    "default": "text",
    "type": "string",
    "enum": ["text", "avro"],
    "description": "text: the event's fields and payload as text; avro: Avro in Confluent's wire format, as "
    "teams with a schema registry write it (librdkafka only; the Java client writes text)",
}


DEDUP_COPY_PARAM = {
    "default": DEFAULT_DEDUP_COPY,
    "type": "string",
    "enum": list(DEDUP_COPY_STORES),
    "description": "where the data deduplicated by event id goes: "
    + "; ".join(f"{k}: {v}" for k, v in DEDUP_COPY_STORES.items()),
}


def producer_form(mode: DeliveryMode | None = None) -> dict[str, dict]:
    """The producer's fields of a form: its client (a preset runs on either; a mode file names its
    own) and settings over the mode's, in that client's key names."""
    clients = list(mode.clients) if mode else list(CLIENTS)
    keys = form_keys()
    return {
        "client": {
            "default": None if mode is None or mode.client is None else mode.client,
            "type": ["null", "string"],
            "enum": [None, *clients],
            "description": "producer client: librdkafka (confluent-kafka) or java (kafka-clients); "
            "empty: a mode file's own, or librdkafka",
        },
        "producer_settings": {
            "default": {},
            "type": "object",
            "propertyNames": {"enum": keys},
            "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
            "description": "tuning settings over the mode's, in the client's own key names, e.g. "
            '{"linger.ms": 20, "enable.idempotence": false}: acks, idempotence, retries, in-flight, linger, '
            "batching, compression, timeouts and buffering, typed and bounded (docs/SECURITY.md); checked by "
            "the client before the run, and recorded with it (runs.settings)",
        },
    }


def scheduled_load_form(mode: str) -> dict[str, dict]:
    m = get_mode(mode)
    compatible = [s for s in PRODUCER_SCENARIOS if not SCENARIOS[s].incompatible(m)]
    return {
        "scenario": {"default": "none", "type": "string", "enum": compatible, "description": "fault during the load"},
        **producer_form(m),
        **load_form(),
    }


def single_run_form() -> dict[str, dict]:
    return {
        "mode": {
            "default": "idempotent",
            "type": "string",
            "enum": list(all_modes()),
            "description": "delivery mode: a preset (either client) or a team's mode file (modes/<name>.yaml)",
        },
        **producer_form(),
        "scenario": {
            "default": "none",
            "type": "string",
            "enum": list(PRODUCER_SCENARIOS),
            "description": "fault injected during the load; txn_abort needs transactional, "
            "lost_ack needs a mode that waits for acks",
        },
        **load_form(),
        "dedup_copy": DEDUP_COPY_PARAM,
    }


def consumer_run_form() -> dict[str, dict]:
    return {
        "strategy": {
            "default": "process_then_commit_dedup",
            "type": "string",
            "enum": list(STRATEGIES),
            "description": "how the consumer commits and writes: "
            + "; ".join(f"{s.name}: {s.description}" for s in STRATEGIES.values()),
        },
        "scenario": {
            "default": "consumer_crash",
            "type": "string",
            "enum": list(CONSUMER_SCENARIOS),
            "description": "consumer_crash: " + SCENARIOS["consumer_crash"].description,
        },
        "crashes": _int_param(1, "crashes", "crashes under consumer_crash, spread evenly over the input"),
        "batch_size": _int_param(500, "batch_size", "records per poll, sink transaction or Kafka transaction"),
        "source_run_id": {
            "default": None,
            "type": ["null", "string"],
            "description": "a completed producer run to consume; empty: a fresh fault-free "
            f"{CONSUMER_INPUT_MODE} run of `messages` events",
        },
        "messages": _int_param(20_000, "messages", "events of the fresh input run"),
        "seed": _int_param(0, "seed", "seed of the fresh input run's generator"),
    }


# A setting a proof is given: FAMILY.KEY=VALUE, on one line (the families' allowlists check the rest).
PROVE_SETTING_PATTERN = r"^(producer|topic|consumer)\.[A-Za-z0-9._-]{1,100}=[^\r\n]{0,200}$"


PROVE_REUSE = ("yes", "no", "only")


def prove_form() -> dict[str, dict]:
    """`semantics_prove`'s form: a mode or pipeline, settings over it, and whether to read runs
    already judged."""
    return {
        "subject": {
            "default": "at_least_once_all",
            "type": "string",
            "enum": [*all_modes(), *PIPELINES],
            "description": "a mode (a preset or a mode file) with the settings below, or a connector pipeline",
        },
        "settings": {
            "default": [],
            "type": "array",
            "items": {"type": "string", "pattern": PROVE_SETTING_PATTERN},
            "maxItems": 50,
            "description": "over the mode's: producer.KEY=VALUE (the client's allowlist), topic.KEY=VALUE "
            "(min.insync.replicas, unclean.leader.election.enable), consumer.KEY=VALUE (what the consumer rules "
            "read); none for a pipeline",
        },
        "client": {
            "default": None,
            "type": ["null", "string"],
            "enum": [None, *CLIENTS],
            "description": "the producer's client (default: the mode's)",
        },
        "messages": _int_param(6_000, "messages", "events per run the proof makes"),
        "reuse": {
            "default": "yes",
            "type": "string",
            "enum": list(PROVE_REUSE),
            "description": "yes: read a finding from the newest judged run made the same way, make the rest; "
            "no: make every run; only: make none",
        },
    }


def matrix_form(messages: int = 15_000) -> dict[str, dict]:
    return {
        "messages": _int_param(messages, "messages", "events per mode x scenario run"),
        "modes": {
            "default": list(MODES),
            "type": "array",
            "items": {"type": "string", "enum": list(all_modes())},
            "description": "modes to include: the presets, and any mode file (modes/<name>.yaml) on its own client",
        },
        "scenarios": {
            "default": list(PRODUCER_SCENARIOS),
            "type": "array",
            "items": {"type": "string", "enum": list(PRODUCER_SCENARIOS)},
            "description": "scenarios to include",
        },
        "clients": {
            "default": list(CLIENTS),
            "type": "array",
            "items": {"type": "string", "enum": list(CLIENTS)},
            "minItems": 1,
            "description": "producer clients: each mode x scenario pair runs on each, shown side by side",
        },
        "consumer_strategies": {
            "default": list(MATRIX_STRATEGIES),
            "type": "array",
            "items": {"type": "string", "enum": list(STRATEGIES)},
            "description": "consumer strategies to run under consumer_crash, each over a fresh fault-free input run",
        },
        "seed": _int_param(0, "seed", "seed of the generator"),
        "producers": _int_param(DEFAULT_PRODUCERS, "producers", "producer processes per mode x scenario run"),
        "record_format": RECORD_FORMAT_PARAM,
        "dedup_copy": DEDUP_COPY_PARAM,
        "pipelines": {
            "default": list(PIPELINES),
            "type": "array",
            "items": {"type": "string", "enum": list(PIPELINES)},
            "description": "connector pipelines (Debezium outbox to a JDBC sink) to run, each under every chosen "
            "pipeline scenario: the matrix's pipeline block (none: no block)",
        },
        "pipeline_scenarios": {
            "default": list(PIPELINE_SCENARIOS),
            "type": "array",
            "items": {"type": "string", "enum": list(PIPELINE_SCENARIOS)},
            "description": "scenarios of the pipeline block (coordinator_kill only with exactly-once support)",
        },
        "pipeline_events": _int_param(3000, "messages", "outbox events per pipeline x scenario run"),
        "pairs": {
            "default": [],
            "type": "array",
            "items": {"type": "string", "pattern": PAIR_PATTERN},
            "maxItems": 200,
            "description": "instead of modes x scenarios x clients: these runs alone, each 'MODE x SCENARIO' "
            "or 'MODE x SCENARIO on CLIENT' (the demo's tour: " + ", ".join(TOUR["pairs"][:2]) + ", ...)",
        },
        "pipeline_pairs": {
            "default": [],
            "type": "array",
            "items": {"type": "string", "pattern": PAIR_PATTERN},
            "maxItems": 50,
            "description": "instead of pipelines x pipeline scenarios: these, each 'PIPELINE x SCENARIO'",
        },
    }
