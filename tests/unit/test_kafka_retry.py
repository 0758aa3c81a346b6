"""Kafka calls ride over a cluster's daily life and refuse bad input at once: each planted error
sequence gives the outcome its classification says, and the Airflow task fails at once only on
bad input (exit 2), leaving a transient failure (exit 75) to its retries."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from delivery_semantics.plumbing import kafka_retry
from delivery_semantics.plumbing.kafka_retry import TransientKafkaError, retrying, transient


def _failing(*codes, then="done"):
    """An attempt that raises each code's KafkaException in turn, then returns `then`."""
    left = list(codes)
    calls = []

    def attempt():
        calls.append(1)
        if left:
            raise KafkaException(KafkaError(left.pop(0)))
        return then

    return attempt, calls


@pytest.mark.parametrize(
    ("code", "retried"),
    [
        (KafkaError._TRANSPORT, True),
        (KafkaError._DESTROY_BROKER, True),
        (KafkaError.LEADER_NOT_AVAILABLE, True),
        (KafkaError.NOT_LEADER_FOR_PARTITION, True),
        (KafkaError._TIMED_OUT, True),
        (KafkaError._ALL_BROKERS_DOWN, True),
        (KafkaError.UNKNOWN_TOPIC_OR_PART, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (KafkaError.SASL_AUTHENTICATION_FAILED, False),
        (KafkaError._AUTHENTICATION, False),
        (KafkaError._SSL, False),
        (KafkaError._INVALID_ARG, False),
    ],
)
def test_each_error_is_classified_as_its_meaning_says(code, retried):
    assert transient(KafkaError(code)) is retried


def test_a_restarting_cluster_is_ridden_over():
    attempt, calls = _failing(KafkaError._DESTROY_BROKER, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT)
    slept = []
    assert retrying(attempt, lambda: True, "kafka", bound=60, sleep=slept.append) == "done"
    assert len(calls) == 4 and slept == [0.5, 1.0, 2.0]


def test_bad_input_and_a_cluster_that_never_answered_are_refused_at_once():
    attempt, calls = _failing(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        retrying(attempt, lambda: True, "kafka", bound=60, sleep=lambda s: None)
    assert len(calls) == 1
    attempt, calls = _failing(KafkaError._TRANSPORT)
    with pytest.raises(KafkaException):
        retrying(attempt, lambda: False, "kafka", bound=60, sleep=lambda s: None)
    assert len(calls) == 1, "a wrong address fails fast"


def test_a_failure_that_outlasts_the_bound_is_transient_not_bad_input(monkeypatch):
    monkeypatch.setenv("SEMANTICS_KAFKA_RETRY_SECONDS", "3")
    attempt, calls = _failing(*[KafkaError._TRANSPORT] * 50)
    slept = []
    with pytest.raises(TransientKafkaError, match="still failing after 3 s"):
        retrying(attempt, lambda: True, "Kafka at b:9092", sleep=slept.append, clock=lambda: sum(slept))
    assert len(calls) == 3 and slept == [0.5, 1.0], "no wait that would end past the bound"


def test_the_airflow_task_fails_at_once_on_bad_input_and_is_retried_otherwise():
    import sys

    from airflow.exceptions import AirflowException, AirflowFailException
    from conftest import REPO

    sys.path.insert(0, str(REPO / "dags"))
    from semantics_common import spark_failure

    bad = spark_failure(AirflowException("Cannot execute: spark-submit ... Error code is: 2."))
    assert isinstance(bad, AirflowFailException), "bad input: no retry"
    for code in (kafka_retry.EXIT_TRANSIENT, 1):
        e = AirflowException(f"Cannot execute: spark-submit ... Error code is: {code}.")
        out = spark_failure(e)
        assert out is e and not isinstance(out, AirflowFailException), code
