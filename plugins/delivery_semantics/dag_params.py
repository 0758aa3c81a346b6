"""The Params (JSON schema) of the DAG forms, built from the same limits the code validates with."""

from __future__ import annotations

from airflow.sdk import Param

from delivery_semantics import consumers, modes, promises, scenarios
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


def consumer_run_params() -> dict[str, Param]:
    return {
        "strategy": Param("process_then_commit_dedup", type="string", enum=list(consumers.STRATEGIES),
                          description="how the consumer commits and writes: "
                                      + "; ".join(f"{s.name}: {s.description}" for s in consumers.STRATEGIES.values())),
        "scenario": Param("consumer_crash", type="string", enum=list(promises.CONSUMER_SCENARIOS),
                          description="consumer_crash: the consumer process is killed (SIGKILL) at its strategy's "
                                      "crash point and restarted in the same group"),
        "crashes": _int(1, "crashes", "crashes under consumer_crash, spread evenly over the input"),
        "batch_size": _int(500, "batch_size", "records per poll, sink transaction or Kafka transaction"),
        "source_run_id": Param(None, type=["null", "string"],
                               description="a completed producer run to consume; empty: a fresh fault-free "
                                           "idempotent run of `messages` events"),
        "messages": _int(20_000, "messages", "events of the fresh input run"),
        "seed": _int(0, "seed", "seed of the fresh input run's generator"),
    }


def matrix_params(messages: int = 15_000) -> dict[str, Param]:
    return {
        "messages": _int(messages, "messages", "events per mode x scenario run"),
        "modes": Param(list(modes.MODES), type="array", items={"type": "string", "enum": list(modes.MODES)},
                       description="modes to include"),
        "scenarios": Param(list(scenarios.SCENARIOS), type="array",
                           items={"type": "string", "enum": list(scenarios.SCENARIOS)},
                           description="scenarios to include"),
        "consumer_strategies": Param(list(consumers.STRATEGIES), type="array",
                                     items={"type": "string", "enum": list(consumers.STRATEGIES)},
                                     description="consumer strategies to run under consumer_crash, each over a "
                                                 "fresh fault-free input run"),
        "seed": _int(0, "seed", "seed of the generator"),
    }
