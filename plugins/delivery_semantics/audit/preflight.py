"""Before anything runs: an audit's every endpoint checked (connections, Kafka and its topic, the
outbox and sink stores, the writer schemas, the windows' order, the notifier), and the rule
catalog's findings on its topic and brokers printed into the task log. Above the audit model, its
stores and its schemas, which it uses."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from delivery_semantics import budgets, rule_catalog
from delivery_semantics.audit import AuditError, schemas, stores
from delivery_semantics.audit.audits import Audit, check_notifier, check_notifier_connection, check_window_order, load
from delivery_semantics.plumbing import endpoints, kafka_features, topics


def preflight(audit: Audit | str | Path, window_ends: list[datetime] = ()) -> Audit:
    """The audit (loaded first when given by name or path), with every endpoint it needs checked
    before Spark starts or anything is written: the connections exist, Kafka answers and accepts
    the credentials, the topic exists, the outbox (and sink) database answers and its table and
    columns are there; and a continuous audit's windows come in order. Raises AuditError with one
    line."""
    if not isinstance(audit, Audit):
        audit = load(audit)
    schemas.load(audit)  # the writer schemas' files are there and parse

    try:
        kafka_conf = endpoints.kafka_config(audit.kafka_conn_id)
        endpoints.spark_kafka_options(kafka_conf)
        read = [stores.for_section(audit, s) for s in (("outbox", "sink") if audit.sink else ("outbox",))]
    except endpoints.EndpointError as e:  # a StoreError too
        raise AuditError(f"{audit.path}: connections: {e}") from None
    try:
        topics.check_topic(kafka_conf, audit.topic)
    except (ConnectionError, topics.TopicError) as e:
        raise AuditError(f"{audit.path}: connections.kafka ({audit.kafka_conn_id}): {e}") from None
    for store in read:
        try:
            store.check()
        except endpoints.EndpointError as e:  # the connection lacks what its store needs
            raise AuditError(f"{audit.path}: connections: {e}") from None
    if window_ends:
        check_window_order(audit, window_ends)
    check_notifier(audit)
    check_notifier_connection(audit)
    try:
        found = predictions(audit, kafka_conf)
    except Exception as e:  # a user that may not describe configs: the audit runs all the same
        print(f"audit {audit.name}: settings not read for predictions: {type(e).__name__}", file=sys.stderr)
    else:
        for p in found:  # the task log, beside what the run then observes
            print(f"audit {audit.name}: predicted: {p.line()}", file=sys.stderr)
    return audit


def cluster_settings(kafka_conf: dict, topic: str | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """What the rule catalog reads of a live cluster: a broker's configuration, the cluster's
    finalized feature levels (where its listener lets them be read), and with `topic` the topic's
    configuration; with where each value came from ("family.key" -> source)."""
    described = topics.described_configurations(kafka_conf, topic)
    given = {family: {k: v for k, (v, _) in conf.items()} for family, conf in described.items()}
    sources = {f"{family}.{k}": where for family, conf in described.items() for k, (_, where) in conf.items()}
    features = kafka_features.finalized_features(kafka_conf)
    if features is not None:
        given["cluster"] = {name: str(level) for name, level in features.items()}
        sources |= {f"cluster.{name}": "cluster feature" for name in features}
    return given, sources


def given_settings(audit: Audit, kafka_conf: dict) -> tuple[dict[str, dict], dict[str, str]]:
    """What the rule catalog reads of an audit: its topic's and a broker's configuration and the
    cluster's features (cluster_settings), with the time its records must stay: a continuous
    audit's longest window and its grace, and whether its topic is transactional."""
    given, sources = cluster_settings(kafka_conf, audit.topic)
    if audit.windowed:
        window = (budgets.longest_interval(audit.schedule) or timedelta(0)) + audit.grace
        given["topic"]["app.audit.window.ms"] = str(int(window.total_seconds() * 1000))
        sources["topic.app.audit.window.ms"] = "the audit's longest window and its grace"
    if audit.transactional:
        given["topic"]["app.transactional"] = "true"
        sources["topic.app.transactional"] = "the audit"
    return given, sources


def predictions(audit: Audit, kafka_conf: dict) -> list:
    """The rule catalog's findings on the audit's topic and brokers (rule_catalog.predict)."""
    given, sources = given_settings(audit, kafka_conf)
    return rule_catalog.predict(given, sources=sources)
