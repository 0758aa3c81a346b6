"""The Params (JSON schema) of the DAG forms, built from the same limits the code validates with."""

from __future__ import annotations

from airflow.sdk import Param

from delivery_semantics import modes, scenarios
from delivery_semantics.orchestration import LIMITS


def _int(default: int, name: str, description: str) -> Param:
    lo, hi = LIMITS[name]
    return Param(default, type="integer", minimum=lo, maximum=hi, description=description)


def load_params(messages: int = 20_000) -> dict[str, Param]:
    return {
        "messages": _int(messages, "messages", "events to produce"),
        "partitions": _int(3, "partitions", "partitions of the run's topic (RF 3, min ISR 2)"),
        "keys": _int(16, "keys", "distinct record keys; each key has its own sequence"),
        "payload_bytes": _int(200, "payload_bytes", "bytes of payload per record"),
        "txn_size": _int(100, "txn_size", "events per transaction (transactional mode)"),
        "abort_ratio": Param(0.0, type="number", minimum=0, maximum=0.99,
                             description="share of transactions aborted and resent (transactional mode)"),
        "seed": _int(0, "seed", "seed of the generator and of the abort decisions"),
    }


def single_run_params() -> dict[str, Param]:
    return {
        "mode": Param("idempotent", type="string", enum=list(modes.MODES),
                      description="delivery mode: a preset of librdkafka producer settings"),
        "scenario": Param("none", type="string", enum=list(scenarios.SCENARIOS),
                          description="fault injected during the load; txn_abort needs transactional, "
                                      "lost_ack needs a mode that waits for acks"),
        **load_params(),
    }


def matrix_params(messages: int = 15_000) -> dict[str, Param]:
    return {
        "messages": _int(messages, "messages", "events per mode x scenario run"),
        "modes": Param(list(modes.MODES), type="array", items={"type": "string", "enum": list(modes.MODES)},
                       description="modes to include"),
        "scenarios": Param(list(scenarios.SCENARIOS), type="array",
                           items={"type": "string", "enum": list(scenarios.SCENARIOS)},
                           description="scenarios to include"),
        "seed": _int(0, "seed", "seed of the generator"),
    }
