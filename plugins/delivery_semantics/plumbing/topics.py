"""Topic administration: validated names, creation with the replication the modes are measured on,
and the cluster health the fault runs gate on."""

from __future__ import annotations

import contextlib
import re
import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, OffsetSpec, ResourceType

from delivery_semantics.plumbing.endpoints import librdkafka

_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2


class TopicError(ValueError):
    pass


def validate_topic_name(name: str) -> str:
    if not isinstance(name, str) or not _LEGAL_TOPIC.fullmatch(name) or name in (".", ".."):
        raise TopicError(f"invalid topic name {name!r}: use 1-249 characters of [A-Za-z0-9._-], not '.' or '..'")
    return name


def admin_client(kafka_conf: dict) -> AdminClient:
    conf = {k: v for k, v in kafka_conf.items() if not k.startswith(("acks", "enable.idempotence"))}
    conf.setdefault("socket.timeout.ms", 10000)
    return AdminClient(librdkafka(conf))


def check_reachable(kafka_conf: dict, timeout: float = 10.0) -> int:
    """Number of brokers in the metadata; raises within `timeout` when none answers, and at once
    with the broker's word when it refuses the credentials or the TLS handshake."""
    return len(_metadata(kafka_conf, None, timeout).brokers)


def check_topic(kafka_conf: dict, topic: str, timeout: float = 10.0) -> int:
    """Number of partitions of an existing topic; raises TopicError when it does not exist."""
    t = _metadata(kafka_conf, validate_topic_name(topic), timeout).topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise TopicError(f"topic {topic!r} does not exist on {kafka_conf.get('bootstrap.servers')}")
    return len(t.partitions)


# A broker that answers but refuses: no point waiting for the timeout.
_REFUSALS = {
    getattr(KafkaError, n)
    for n in ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL", "TOPIC_AUTHORIZATION_FAILED")
    if hasattr(KafkaError, n)
}


def _metadata(kafka_conf: dict, topic: str | None, timeout: float):
    refused: list[str] = []

    def on_error(err) -> None:
        if err.code() in _REFUSALS:
            refused.append(err.str())

    # Quiet: an unreachable cluster is reported once, in the error below, not per connect retry.
    admin = admin_client({"log_level": 2, **kafka_conf, "error_cb": on_error})
    where = kafka_conf.get("bootstrap.servers")
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin.list_topics(topic, timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        except KafkaException as e:
            admin.poll(0)
            if refused:
                raise ConnectionError(f"Kafka at {where} refused the client: {refused[-1]}") from None
            if time.monotonic() >= deadline:
                raise ConnectionError(
                    f"Kafka at {where} did not answer within {timeout:.0f}s: {e.args[0].str() if e.args else e}"
                ) from None


def ensure_topic(
    kafka_conf: dict,
    name: str,
    partitions: int = 3,
    replication_factor: int = REPLICATION_FACTOR,
    config: dict | None = None,
    timeout: float = 30.0,
) -> bool:
    """Creates the topic if missing; returns True when it was created now. A `replication.factor`
    in `config` (a run's topic settings) is the topic's, not a config key."""
    validate_topic_name(name)
    admin = admin_client(kafka_conf)
    topic_config = {
        "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
        "unclean.leader.election.enable": "false",
        **(config or {}),
    }
    replication_factor = int(topic_config.pop("replication.factor", replication_factor))
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor, config=topic_config)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
        created = True
    except KafkaException as e:
        if e.args and e.args[0].name() == "TOPIC_ALREADY_EXISTS":
            created = False
        else:
            raise
    wait_for_full_isr(kafka_conf, name, timeout=timeout)
    return created


def wait_for_full_isr(
    kafka_conf: dict, topic: str, timeout: float = 60.0, expected_brokers: int = REPLICATION_FACTOR
) -> None:
    """Until every partition of the topic has a leader that answers as leader and all its replicas
    in sync, and the metadata lists `expected_brokers` brokers."""
    admin = admin_client(kafka_conf)
    deadline = time.monotonic() + timeout
    last = "no metadata"
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is None or t.error is not None or not t.partitions or len(md.brokers) < expected_brokers:
                last = f"topic error {t.error if t else 'missing'}, {len(md.brokers)} brokers"
            elif lagging := [p.id for p in t.partitions.values() if p.leader < 0 or len(p.isrs) < len(p.replicas)]:
                last = f"partitions {lagging} not fully in sync"
            elif lagging := _leaders_not_serving(admin, topic, sorted(t.partitions)):
                last = f"leaders of partitions {lagging} not serving yet"
            else:
                return
        except KafkaException as e:
            last = str(e)
        time.sleep(0.5)
    raise TimeoutError(f"topic {topic!r} not healthy within {timeout:.0f}s: {last}")


def _leaders_not_serving(admin: AdminClient, topic: str, partitions: list[int]) -> list[int]:
    """Partitions whose leader does not yet answer a ListOffsets. In KRaft a broker's metadata can
    name a leader before that leader has applied the change; a produce sent to it then is refused,
    and under acks=0 the refusal never reaches the producer: the records are lost."""
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}, request_timeout=5)
    lagging = []
    for tp, future in futures.items():
        try:
            future.result()
        except KafkaException:
            lagging.append(tp.partition)
    return lagging


def delete_topic(kafka_conf: dict, name: str, timeout: float = 30.0) -> None:
    admin = admin_client(kafka_conf)  # must outlive the future, or librdkafka cancels the request
    futures = admin.delete_topics([validate_topic_name(name)], operation_timeout=timeout)
    try:
        futures[name].result(timeout=timeout)
    except KafkaException as e:
        if not (e.args and e.args[0].name() == "UNKNOWN_TOPIC_OR_PART"):
            raise


def recreate_topic(kafka_conf: dict, name: str, partitions: int = 3, timeout: float = 30.0) -> None:
    """The topic deleted if it exists and made anew, empty."""
    delete_topic(kafka_conf, name, timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # a deletion completes after its request returns
        with contextlib.suppress(KafkaException):  # TOPIC_ALREADY_EXISTS while it is still being deleted
            if ensure_topic(kafka_conf, name, partitions=partitions):
                return
        time.sleep(1)
    raise TimeoutError(f"topic {name!r} could not be made afresh within {timeout:.0f}s")


# Where a configuration value comes from, as DescribeConfigs says (ConfigEntry.source), in the words
# predict prints beside it (the client reports it as the enum's number).
CONFIG_SOURCES = {
    ConfigSource.DYNAMIC_TOPIC_CONFIG.value: "topic",
    ConfigSource.DYNAMIC_BROKER_CONFIG.value: "broker, dynamic",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: "broker default, dynamic",
    ConfigSource.STATIC_BROKER_CONFIG.value: "broker default",
    ConfigSource.DEFAULT_CONFIG.value: "Kafka default",
}


def described_configurations(
    kafka_conf: dict, topic: str | None = None, timeout: float = 15.0
) -> dict[str, dict[str, tuple[str, str]]]:
    """A broker's configuration and, with `topic`, the topic's (with its replication factor), as
    the cluster reports them (DescribeConfigs): by family, each key's (value, where it comes from).
    A sensitive value is never read. TopicError if the topic is missing."""
    admin = admin_client(kafka_conf)
    md = admin.list_topics(validate_topic_name(topic) if topic else None, timeout=timeout)
    resources = {"broker": ConfigResource(ResourceType.BROKER, str(min(md.brokers)))}
    if topic:
        described = md.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            raise TopicError(f"topic {topic!r} does not exist on the cluster")
        resources["topic"] = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.describe_configs(list(resources.values()), request_timeout=timeout)
    out = {
        family: {
            k: (str(e.value), CONFIG_SOURCES.get(int(e.source), "broker"))
            for k, e in futures[r].result(timeout=timeout).items()
            if not e.is_sensitive and e.value is not None
        }
        for family, r in resources.items()
    }
    if topic:
        rf = max(len(p.replicas) for p in md.topics[topic].partitions.values())
        out["topic"]["replication.factor"] = (str(rf), "topic, its partitions' replicas")
    return out
