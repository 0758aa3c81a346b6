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
    from delivery_semantics.entry.dag_factory import spark_failure

    bad = spark_failure(AirflowException("Cannot execute: spark-submit ... Error code is: 2."))
    assert isinstance(bad, AirflowFailException), "bad input: no retry"
    for code in (kafka_retry.EXIT_TRANSIENT, 1):
        e = AirflowException(f"Cannot execute: spark-submit ... Error code is: {code}.")
        out = spark_failure(e)
        assert out is e and not isinstance(out, AirflowFailException), code


class _JavaThrowable:
    """The few methods of a java.lang.Throwable (an SQLException when it has a state) the
    classification calls through Py4J."""

    def __init__(self, text: str, state: str | None = None, cause=None):
        self.text, self.state, self.cause = text, state, cause

    def getSQLState(self):
        if self.state is None:
            raise RuntimeError("not an SQLException")  # what Py4J raises for a method it lacks
        return self.state

    def getCause(self):
        return self.cause

    def toString(self):
        return self.text


class _Py4JError(Exception):
    def __init__(self, java_exception):
        super().__init__("An error occurred while calling o123.save.")
        self.java_exception = java_exception


@pytest.mark.parametrize(
    ("error", "gone"),
    [
        (_Py4JError(_JavaThrowable("org.postgresql.util.PSQLException: FATAL: terminating connection", "57P01")), True),
        (_Py4JError(_JavaThrowable("SparkException", None, _JavaThrowable("PSQLException: I/O", "08006"))), True),
        (_Py4JError(_JavaThrowable("PSQLException: the database system is starting up", "57P03")), True),
        # A Spark job's failure names its task's exception only in its text.
        (RuntimeError("Job aborted: org.postgresql.util.PSQLException: Connection to localhost:5433 refused."), True),
        (RuntimeError("PSQLException: An I/O error occurred while sending to the backend."), True),
        # Wrong input stays wrong input, whatever the database.
        (_Py4JError(_JavaThrowable('PSQLException: relation "x" does not exist', "42P01")), False),
        (_Py4JError(_JavaThrowable("PSQLException: password authentication failed", "28P01")), False),
        (_Py4JError(_JavaThrowable("PSQLException: duplicate key value", "23505")), False),
        (ValueError("a bug"), False),
    ],
)
def test_the_results_database_restarting_is_told_from_bad_input(error, gone):
    from delivery_semantics.audit.stores.spark_jdbc import database_gone

    assert bool(database_gone(error)) is gone


def test_a_database_is_ridden_over_only_once_it_has_answered():
    """Before its first answer a refused connection is a wrong address (bad input, at once); after
    it, the same refusal is a restart, tried again with backoff and then transient."""
    from delivery_semantics.audit.stores.spark_jdbc import Jdbc

    refused = RuntimeError("PSQLException: Connection to localhost:5433 refused.")
    jdbc = Jdbc.__new__(Jdbc)
    jdbc.answered = False
    assert jdbc.gone(refused) is None
    jdbc.answered = True
    left, slept = [refused, refused], []

    def attempt():
        if left:
            raise left.pop()
        return "merged"

    assert (
        kafka_retry.riding_over(attempt, jdbc.gone, "results database: w", "restarting", 60, slept.append) == "merged"
    )
    assert slept == [0.5, 1.0]
    with pytest.raises(kafka_retry.TransientError, match="still failing after 2 s of retries"):
        kafka_retry.riding_over(
            lambda: (_ for _ in ()).throw(refused),
            jdbc.gone,
            "results database: w",
            "restarting",
            2,
            slept.append,
            clock=lambda: sum(slept[2:]),
        )


def test_a_producer_gone_fatal_is_followed_by_a_new_session_and_nothing_else_is(monkeypatch):
    """A fatal producer (its transaction aborted by the coordinator: INVALID_TXN_STATE) is what an
    application replaces with a new one, up to load.FATAL_RESTARTS times; any other error ends the
    drive at once."""
    from delivery_semantics.workload import load
    from delivery_semantics.workload.client import ProducerFenced

    fatal = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)
    errors: list[BaseException] = []
    sessions: list[int] = []

    def session(*args):
        sessions.append(len(sessions) + 1)
        if errors:
            raise errors.pop(0)

    monkeypatch.setattr(load, "_drive_session", session)
    errors[:] = [KafkaException(fatal), ProducerFenced("abort_transaction: INVALID_TXN_STATE")]
    load._drive(None, "r1", 0, {}, False)
    assert sessions == [1, 2, 3]

    sessions.clear()
    errors[:] = [KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))]
    with pytest.raises(KafkaException):
        load._drive(None, "r1", 0, {}, False)
    assert sessions == [1], "a retriable error is the session's own to handle, not a new producer's"

    sessions.clear()
    errors[:] = [KafkaException(fatal)] * (load.FATAL_RESTARTS + 1)
    with pytest.raises(KafkaException):
        load._drive(None, "r1", 0, {}, False)
    assert len(sessions) == load.FATAL_RESTARTS + 1
