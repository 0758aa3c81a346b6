"""The smoke DAG's two Python steps: produce N records to a fresh RF=3 topic, then compare the
count the Spark job wrote to PostgreSQL with N."""

from __future__ import annotations

import re

import psycopg2
from confluent_kafka import Producer

from delivery_semantics.history import schema
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import kafka_config, ledger_database, librdkafka


def topic_for_run(run_id: str) -> str:
    return topics.validate_topic_name("smoke-" + re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:200])


def produce(messages: int, run_id: str) -> dict:
    if messages <= 0:
        raise ValueError(f"messages must be > 0, got {messages}")
    schema.migrate()
    conf = kafka_config()
    topic = topic_for_run(run_id)
    topics.ensure_topic(conf, topic, partitions=3)
    producer = Producer(librdkafka({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5}))
    failures = []

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    for i in range(messages):
        producer.produce(topic, key=str(i % 16), value=f"smoke-{i}", on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(
            f"smoke produce: {remaining} undelivered, {len(failures)} failed "
            f"(first: {failures[0] if failures else '-'})"
        )
    return {"topic": topic, "produced": messages}


def verify(produced: dict) -> int:
    with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT counted FROM smoke_counts WHERE topic = %s ORDER BY counted_at DESC LIMIT 1", (produced["topic"],)
        )
        row = cur.fetchone()
    if row is None:
        raise RuntimeError(f"no count for {produced['topic']} in smoke_counts: the Spark job wrote nothing")
    if row[0] != produced["produced"]:
        raise RuntimeError(f"Spark counted {row[0]} records in {produced['topic']}, produced {produced['produced']}")
    return row[0]
