"""Known answers for the Java client: every outcome it can report is planted, and the ledger's
outcomes are compared with the topic event id by event id, position by position. A report the
runner turns into the wrong outcome, or a position it records wrong, fails here."""

from __future__ import annotations

import json
import os
import subprocess

import installed
import pytest
from direct_check import written_ends

from delivery_semantics import catalog, modes
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing.endpoints import java_client_config
from delivery_semantics.records.event import event_id
from delivery_semantics.workload import load, readback
from delivery_semantics.workload.generator import Generator, new_run_id
from delivery_semantics.workload.java_client import JavaClient
from delivery_semantics.workload.settings import resolve


def _values(kafka_conf: dict, topic: str) -> set[bytes]:
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **kafka_conf,
            "group.id": f"values-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    values, ended = set(), set()
    try:
        while len(ended) < 3:
            m = consumer.poll(10)
            assert m is not None, "the topic's end was not reached"
            if m.error():
                ended.add(m.partition())
            else:
                values.add(m.value())
    finally:
        consumer.close()
    return values


def _client(kafka_conf: dict, topic: str, gen: Generator, mode: str = "idempotent") -> JavaClient:
    conf = {**java_client_config(kafka_conf), **resolve(modes.get_mode(mode), "java").conf}
    return JavaClient(conf, topic, gen, transactional=False)


def test_acks_carry_the_exact_positions_and_a_refused_topic_fails_every_record(kafka_conf, fresh_topic):
    topic = fresh_topic("java-known")
    gen = Generator(new_run_id(), keys=4, payload_bytes=30, seed=1)
    client = _client(kafka_conf, topic, gen)
    try:
        client.send([(n, 1_700_000_000_000 + n) for n in range(200)])
        assert client.flush(60) == 0
        reports = client.drain()
    finally:
        client.close()
    acked = {event_id(gen.run_id, o.n): (o.partition, o.offset) for o in reports.outcomes() if o.status == "acked"}
    assert len(acked) == 200 and not [o for o in reports.outcomes() if o.status != "acked"]
    records = readback.read_topic(kafka_conf, topic)
    assert {r.event_id: (r.partition, r.offset) for r in records} == acked, "each ack's position holds its event"
    assert {r.event_id: r.key for r in records} == {event_id(gen.run_id, n): f"k{n % 4}" for n in range(200)}, (
        "the record layout is the generator's"
    )
    assert {r.event_id: r.seq for r in records} == {event_id(gen.run_id, n): n // 4 for n in range(200)}
    assert _values(kafka_conf, topic) == {gen.wire(n, 1_700_000_000_000 + n)["value"] for n in range(200)}, (
        "byte for byte the records librdkafka's client would have sent"
    )

    # A topic name the brokers refuse: the client fails each record, and none may have been written.
    bad = JavaClient(
        {**java_client_config(kafka_conf), **resolve(modes.get_mode("at_least_once_all"), "java").conf},
        "not a topic!",
        gen,
        transactional=False,
    )
    try:
        bad.send([(n, 0) for n in range(10)])
        bad.flush(60)
        failed = bad.drain().outcomes()
    finally:
        bad.close()
    assert sorted((o.n, o.status, o.error) for o in failed) == [
        (n, "failed", "InvalidTopicException") for n in range(10)
    ]


# A team's worker running the Java client from the installed package: the runner is the wheel's jar.
_INSTALLED_RUN = """
import json, sys
from delivery_semantics.plumbing import javac
from delivery_semantics.plumbing.endpoints import java_client_config
from delivery_semantics.records.event import event_id
from delivery_semantics.workload.generator import Generator, new_run_id
from delivery_semantics.workload.java_client import JavaClient, build

kafka_conf, topic = json.load(sys.stdin)
gen = Generator(new_run_id(), keys=4, payload_bytes=30, seed=1)
client = JavaClient({**java_client_config(kafka_conf), "acks": "all", "enable.idempotence": "true"}, topic, gen,
                    transactional=False)
try:
    client.send([(n, 1_700_000_000_000 + n) for n in range(120)])
    assert client.flush(60) == 0
    outcomes = client.drain().outcomes()
finally:
    client.close()
print(json.dumps({"runner": str(build()), "prebuilt": str(javac.prebuilt()), "outcomes": [
    [event_id(gen.run_id, o.n), o.status, o.partition, o.offset] for o in outcomes]}))
"""


def test_the_installed_package_runs_the_java_client_from_its_jar_with_a_jre_and_no_javac(
    kafka_conf, fresh_topic, tmp_path
):
    """The wheel ships the runner built by Maven (local/maven/jvm): on a worker with `java` and no
    `javac`, a load through the installed package's Java client acks every event at the position the
    topic holds it, and the runner it started is the wheel's jar (nothing was compiled)."""
    team = installed.install(tmp_path, {}, jre_only=True)
    assert subprocess.run(["which", "javac"], env=team.env, capture_output=True).returncode != 0, "no javac"
    assert subprocess.run(["which", "java"], env=team.env, capture_output=True).returncode == 0, "a JRE's java"
    topic = fresh_topic("java-installed")
    env = {**team.env, "SEMANTICS_KAFKA_CLIENT_JARS": os.environ["SEMANTICS_KAFKA_CLIENT_JARS"]}
    done = subprocess.run(
        [str(team.bin / "python"), "-c", _INSTALLED_RUN],
        input=json.dumps([kafka_conf, topic]),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["runner"] == answer["prebuilt"]
    assert answer["runner"].startswith(str(team.site)) and answer["runner"].endswith(".jar")
    assert "/_shipped/jvm/delivery-semantics-jvm-" in answer["runner"]
    assert not list((tmp_path / "airflow").rglob("*.class")), "nothing compiled"
    acked = {eid: (p, o) for eid, status, p, o in answer["outcomes"] if status == "acked"}
    assert len(acked) == 120 == len(answer["outcomes"])
    assert {r.event_id: (r.partition, r.offset) for r in readback.read_topic(kafka_conf, topic)} == acked


def test_a_java_transactional_run_records_every_abort_and_every_commit_at_its_position(kafka_conf):
    """Two producers, a third of the transactions aborted and resent: the ledger's aborted outcomes
    are exactly the positions only a read_uncommitted reader sees, its acks exactly the committed
    positions, each event once."""
    s = load.start(
        load.LoadSpec(
            mode="transactional", messages=6000, txn_size=200, abort_ratio=0.3, producers=2, seed=5, client="java"
        )
    )
    assert s.status == "completed" and s.acked == 6000 and s.aborted_attempts > 0, s.line()
    lg = Ledger()
    try:
        with lg.conn, lg.conn.cursor() as cur:
            cur.execute(
                'SELECT event_id, status, "partition", "offset" FROM ledger_outcomes WHERE run_id = %s',
                (s.run_id,),
            )
            outcomes = cur.fetchall()
        topic = lg.get_run(s.run_id)["topic"]
    finally:
        lg.close()
    acked = {(p, o): eid for eid, st, p, o in outcomes if st == "acked"}
    aborted = {(p, o): eid for eid, st, p, o in outcomes if st == "aborted" and o is not None}
    committed = {(r.partition, r.offset): r.event_id for r in readback.read_topic(kafka_conf, topic, "read_committed")}
    everything = {(r.partition, r.offset): r.event_id for r in readback.read_topic(kafka_conf, topic)}
    assert committed == acked and len(set(acked.values())) == 6000
    assert {pos: eid for pos, eid in everything.items() if pos not in committed} == aborted
    assert len(aborted) == s.aborted_attempts


def test_a_java_fire_and_forget_run_records_sent_without_positions(kafka_conf):
    s = load.start(load.LoadSpec(mode="at_most_once", messages=3000, producers=1, client="java"))
    assert (s.status, s.sent_unacked, s.acked) == ("completed", 3000, 0), s.line()
    lg = Ledger()
    try:
        with lg.conn, lg.conn.cursor() as cur:
            cur.execute(
                'SELECT count(*), count("offset"), count(DISTINCT event_id) FROM ledger_outcomes '
                "WHERE run_id = %s AND status = 'sent'",
                (s.run_id,),
            )
            sent, with_offset, distinct = cur.fetchone()
        topic = lg.get_run(s.run_id)["topic"]
        covering = written_ends(lg, s.run_id)  # acks=0: sent before the followers have it
    finally:
        lg.close()
    assert (sent, with_offset, distinct) == (3000, 0, 3000), "acks=0: no position is known"
    ids = [r.event_id for r in readback.read_topic(kafka_conf, topic, covering=covering)]
    assert sorted(ids) == sorted(event_id(s.run_id, n) for n in range(3000)), "each event once, none other"


@pytest.mark.parametrize("client", catalog.CLIENTS)
def test_a_run_started_by_its_dag_task_checks_its_producer_settings_once(client, monkeypatch):
    """`orchestration.start_run`, the first task of a run's DAG: the client's check of the
    producer settings runs once (it ran three times: the task's conf, the scenario, the ledger's
    row), and for Java that is one JVM launched, not three."""
    import subprocess
    import uuid

    from delivery_semantics.entry import orchestration
    from delivery_semantics.workload import java_client
    from delivery_semantics.workload.client import runtime

    checks: list[str] = []
    jvms: list[list[str]] = []
    cls = runtime(client)
    real_check, real_run = cls.check, subprocess.run

    def check(_cls, *a, **kw):
        checks.append(client)
        return real_check(*a, **kw)

    def run(cmd, *a, **kw):
        if cmd and str(cmd[0]).endswith("java"):
            jvms.append(list(cmd))
        return real_run(cmd, *a, **kw)

    monkeypatch.setattr(cls, "check", classmethod(check))
    monkeypatch.setattr(java_client.subprocess, "run", run)
    task_key = f"test-one-check-{uuid.uuid4().hex[:8]}"
    producers = orchestration.start_run(
        {"mode": "at_least_once", "scenario": "none", "messages": 100, "client": client}, task_key
    )
    assert [p["producer"] for p in producers] == list(range(len(producers))) and producers
    assert checks == [client]
    assert len(jvms) == (1 if client == "java" else 0), jvms
    lg = Ledger()
    try:
        run = lg.get_run(producers[0]["ledger_run"])
    finally:
        lg.close()
    assert (run["client"], run["airflow_run_id"]) == (client, task_key)
