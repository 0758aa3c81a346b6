"""Kafka calls that ride over a cluster's daily life: leader elections, rolling restarts,
partition moves. Once the cluster has answered, an error Kafka calls retriable is tried again
with backoff within a bound, and one that outlasts it is transient (its own exit code,
EXIT_TRANSIENT, which the Airflow tasks retry). An error that says the input is wrong (unknown
topic, authorization, authentication, a bad setting), or a cluster that never answered (a wrong
address), is refused at once: bad input, exit 2, not retried.

`riding_over` is the loop, for any service whose failures its caller can tell apart: the
checker's results database rides over a restart with it (a window or run read and written again;
its write is one transaction, so a second attempt leaves the rows the first would have).

The bound is SEMANTICS_KAFKA_RETRY_SECONDS (120 unless set)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from delivery_semantics import locations

T = TypeVar("T")
EXIT_BAD_INPUT = 2
EXIT_TRANSIENT = 75  # sysexits' EX_TEMPFAIL: try again later
DEFAULT_BOUND_S = 120.0

# What a cluster in a rolling restart or a leader election answers, beside what librdkafka itself
# marks retriable.
_TRANSIENT = {
    KafkaError._TRANSPORT,
    KafkaError._DESTROY_BROKER,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError._NODE_UPDATE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}
# Never retried, whatever librdkafka says: the input is wrong.
_REFUSED = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError._INVALID_ARG,
    KafkaError._RESOLVE,
}


def spark_source_options() -> dict[str, str]:
    """The same ride-over for Spark's Kafka source: its driver's offset queries and its consumers'
    reconnects, within the same bound."""
    interval_ms = 5000
    return {
        "fetchOffset.numRetries": str(max(3, int(bound_seconds() * 1000 // interval_ms))),
        "fetchOffset.retryIntervalMs": str(interval_ms),
        "kafka.retry.backoff.ms": "500",
        "kafka.reconnect.backoff.max.ms": "10000",
    }


class TransientError(RuntimeError):
    """A service the run needs kept failing past the bound after it had answered: try again later
    (EXIT_TRANSIENT)."""


class TransientKafkaError(TransientError):
    """Kafka kept failing with retriable errors past the bound."""


def transient(error: KafkaError) -> bool:
    code = error.code()
    return code not in _REFUSED and (code in _TRANSIENT or error.retriable())


def bound_seconds() -> float:
    try:
        return float(locations.setting("kafka_retry_seconds") or DEFAULT_BOUND_S)
    except ValueError:
        return DEFAULT_BOUND_S


def retrying(
    attempt: Callable[[], T],
    answered: Callable[[], bool],
    what: str,
    bound: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`attempt()`, again after a transient KafkaException once `answered()` says the cluster has
    answered at least once; a KafkaException that is not transient, or comes before any answer, is
    raised as it is (bad input); past `bound` seconds, TransientKafkaError."""

    def why(e: BaseException) -> str | None:
        error = e.args[0] if isinstance(e, KafkaException) and e.args else None
        if not isinstance(error, KafkaError) or not answered() or not transient(error):
            return None
        return error.str()

    return riding_over(
        attempt,
        why,
        f"kafka: {what}",
        "a cluster restarting or electing leaders",
        bound,
        sleep,
        clock,
        TransientKafkaError,
    )


def riding_over(
    attempt: Callable[[], T],
    why_transient: Callable[[BaseException], str | None],
    what: str,
    cause: str,
    bound: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    error: type[TransientError] = TransientError,
) -> T:
    """`attempt()`, again with backoff after each exception `why_transient` gives a reason for;
    any other exception is raised as it is; past `bound` seconds (SEMANTICS_KAFKA_RETRY_SECONDS
    unless given), `error`, which the entry points exit EXIT_TRANSIENT for."""
    bound = bound_seconds() if bound is None else bound
    deadline = clock() + bound
    backoff = 0.5
    while True:
        try:
            return attempt()
        except Exception as e:
            reason = why_transient(e)
            if reason is None:
                raise
            if clock() + backoff > deadline:
                raise error(f"{what}: still failing after {bound:.0f} s of retries ({cause}): {reason}") from None
            print(f"{what}: {reason}; trying again in {backoff:g} s", file=sys.stderr, flush=True)
            sleep(backoff)
            backoff = min(backoff * 2, 8.0)
