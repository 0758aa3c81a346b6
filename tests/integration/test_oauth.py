"""SASL/OAUTHBEARER on the stack's OAUTH listener: tokens from the stack's issuer (a test fixture,
local/devstack/oidc.py), fetched by the clients' own OIDC client-credentials flows and validated by
the brokers against the issuer's keys. A load on both clients, a consumer run and Spark (the
platform reader and, in test_audits.py, an audit through Spark's Kafka source) all over it; a token
from an issuer the brokers do not trust is refused."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from test_audits import watching_ps

import devstack
from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing.endpoints import kafka_config
from delivery_semantics.reporting.report import query
from delivery_semantics.workload import consumer_workload, load
from devstack import oidc

OAUTH = "kafka_oauth"


def test_the_oauth_listener_takes_the_issuers_tokens_and_refuses_another_issuers():
    conf = kafka_config(OAUTH)
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and conf["sasl.oauthbearer.client.id"] == oidc.CLIENT_ID
    md = AdminClient(conf).list_topics(timeout=30)
    assert len(md.brokers) == 3 and all(
        b.port in {x.oauth_port for x in devstack.kafka.BROKERS} for b in md.brokers.values()
    )

    errors: list[KafkaError] = []
    rogue = {**conf, "sasl.oauthbearer.token.endpoint.url": oidc.ROGUE_TOKEN_URL, "error_cb": errors.append}
    p = Producer({**rogue, "message.timeout.ms": 10000})
    p.produce("orders-oauth-refused", b"x")
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        p.poll(0.5)
    assert errors, "no error from the brokers for a token they cannot trust"
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), [str(e) for e in errors]
    assert any("SASL authentication error" in e.str() for e in errors), [e.str() for e in errors]


def test_runs_on_both_clients_and_a_consumer_run_over_oauthbearer_reconcile_as_on_plaintext():
    """A transactional run on librdkafka and an idempotent one on the Java client, then a consumer
    run reading the first back, all over the OAUTH listener, and the transactional run's twin (same
    seed) over the plaintext listener; one Spark application on the OAUTH listener (the platform
    reader, with the token endpoint allowed in its JVMs) reads the four topics, at both isolation
    levels, finds every event once, and the twins alike. (The SCRAM listener's Spark path is the
    audits', test_audits.py.)"""
    conf = kafka_config(OAUTH)
    messages = 1500
    runs = {
        "oauth": load.start(load.LoadSpec(mode="transactional", messages=messages, seed=7), kafka_conf=conf),
        "java": load.start(
            load.LoadSpec(mode="idempotent", messages=messages, seed=11, client="java"), kafka_conf=conf
        ),
        "plaintext": load.start(
            load.LoadSpec(mode="transactional", messages=messages, seed=7), kafka_conf=kafka_config()
        ),
    }
    assert {c: (r.status, r.acked) for c, r in runs.items()} == {c: ("completed", messages) for c in runs}
    consumed = consumer_workload.start(
        consumer_workload.ConsumerSpec("process_then_commit", runs["oauth"].run_id), kafka_conf=conf
    )
    assert consumed.status == "completed"
    ids = {**{k: r.run_id for k, r in runs.items()}, "consumer": consumed.consumer_run_id}
    with watching_ps() as commands:
        r = spark_submit.run(run_id=list(ids.values()), env=spark_submit.spark_application_env(kafka_conn_id=OAUTH))
    assert r.returncode == 0, r.error
    assert devstack.secret("OIDC_CLIENT_SECRET") not in "\n".join(commands) + r.stdout + r.stderr
    found = {
        (name, s["isolation"]): {k: v for k, v in s.items() if k not in ("reconciliation_id", "topic")}
        for s in r.summaries
        for name, rid in ids.items()
        if s["reconciliation_id"] == rid
    }
    assert {name for name, _ in found} == set(ids)
    for (name, iso), s in found.items():
        assert (s["delivered_once"], s["lost_acked"], s["duplicate_events"]) == (messages, 0, 0), (name, iso, s)
    for iso in ("read_committed", "read_uncommitted"):
        assert found[("oauth", iso)] == found[("plaintext", iso)], iso
    rows = query("SELECT client, verdict FROM v_run_results WHERE run_id = ANY(%s)", ([ids["oauth"], ids["java"]],))
    assert sorted((x["client"], x["verdict"]) for x in rows) == [("java", "kept"), ("librdkafka", "kept")]
