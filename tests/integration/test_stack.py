"""The local stack: 3 KRaft brokers behind Toxiproxy, PostgreSQL, Spark and Airflow, for real."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import psycopg2
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import ConfigResource, NewTopic
from conftest import REPO, run

import devstack
from delivery_semantics.faults.nemesis import wait_healthy
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import ledger_database
from delivery_semantics.plumbing.spark import spark_class_archive, spark_conf
from delivery_semantics.workload import readback

STACK = str(REPO / "local" / "stack")


def test_metadata_lists_three_brokers_advertised_at_their_toxiproxy_ports(kafka_conf):
    md = topics.admin_client(kafka_conf).list_topics(timeout=10)
    advertised = sorted((b.id, b.host, b.port) for b in md.brokers.values())
    assert advertised == [(1, "127.0.0.1", 9092), (2, "127.0.0.1", 9093), (3, "127.0.0.1", 9094)]
    proxies = json.load(urllib.request.urlopen(devstack.toxiproxy_url("/proxies"), timeout=5))
    clients = {f"broker-{i}": (f"127.0.0.1:{9091 + i}", f"127.0.0.1:{19091 + i}", True) for i in (1, 2, 3)}
    # Replication and the controller quorum: one proxy per ordered pair of brokers and listener,
    # each on a loopback address of its own, so that a partition can cut one broker's links.
    links = {
        f"link-{s}-{t}-{listener}": (f"127.0.{s}.{t}:{base + t}", f"127.0.0.1:{base + t}", True)
        for s in (1, 2, 3)
        for t in (1, 2, 3)
        if s != t
        for listener, base in (("internal", 19191), ("controller", 19291))
    }
    assert {p["name"]: (p["listen"], p["upstream"], p["enabled"]) for p in proxies.values()} == clients | links


def test_brokers_reach_their_peers_only_through_their_own_links():
    for b in devstack.BROKERS:
        resolved = {}
        for line in b.hosts_file.read_text().splitlines():
            if line and not line.startswith("#"):
                address, *names = line.split()
                resolved.update(dict.fromkeys(names, address))
        assert resolved[f"kafka-{b.node_id}"] == "127.0.0.1", "a broker reaches itself directly"
        assert {n: a for n, a in resolved.items() if n.startswith("kafka-") and n != f"kafka-{b.node_id}"} == {
            f"kafka-{t}": f"127.0.{b.node_id}.{t}" for t in (1, 2, 3) if t != b.node_id
        }
    server = (devstack.BROKERS[0].data_dir / "server.properties").read_text()
    assert "controller.quorum.voters=1@kafka-1:19292,2@kafka-2:19293,3@kafka-3:19294" in server
    assert "INTERNAL://kafka-1:19192" in server
    cut = devstack.links_of(1)
    assert len(cut) == 8 and not any(n.startswith(("link-2-3", "link-3-2")) for n in cut)
    # The nemesis's names for the link proxies are the proxies the stack made.
    assert {n for i in (1, 2, 3) for n in devstack.links_of(i)} == {link.name for link in devstack.kafka.LINKS}


def test_topic_is_created_with_rf3_and_min_insync_2(kafka_conf, fresh_topic):
    name = fresh_topic("rf3", partitions=4)
    admin = topics.admin_client(kafka_conf)
    t = admin.list_topics(name, timeout=10).topics[name]
    assert len(t.partitions) == 4
    assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in t.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    cfg = admin.describe_configs([res])[res].result(timeout=10)
    assert cfg["min.insync.replicas"].value == "2"
    assert cfg["unclean.leader.election.enable"].value == "false"


def test_a_new_topic_takes_acks_0_records_even_while_a_leader_lags(kafka_conf):
    """The other brokers' metadata names a new partition's leader before that leader has applied
    the change; an acks=0 produce it refuses is lost without a word. A broker that is not the
    quorum's leader is paused while each topic is made, so it lags: wait_for_full_isr returns only
    once it serves, and the record sent to it at once is there."""
    lagging = next(b for b in (1, 2, 3) if b != devstack.quorum_leader())
    backend = devstack.ProcessBackend()
    admin = topics.admin_client(kafka_conf)
    p = Producer({**kafka_conf, "acks": "0", "linger.ms": 0})
    p.list_topics(timeout=10)  # connected before, so that it sends as soon as the wait returns
    made = [f"acks0-{uuid.uuid4().hex[:10]}" for _ in range(4)]
    try:
        for name in made:
            backend.pause(lagging)
            resume = threading.Timer(1.5, backend.resume, (lagging,))
            resume.start()
            try:
                admin.create_topics([NewTopic(name, 3, 3)])[name].result(timeout=30)
                topics.wait_for_full_isr(kafka_conf, name, timeout=30)
                for partition in range(3):
                    p.produce(name, value=b"x", partition=partition)
                assert p.flush(10) == 0
            finally:
                resume.join()
        deadline = time.monotonic() + 10  # acks=0: the flush returns before the leader appends
        while True:
            ends = {
                (name, partition): end
                for name in made
                for partition, end in readback.end_offsets(kafka_conf, name).items()
            }
            if set(ends.values()) == {1} or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert ends == {key: 1 for key in ends}
    finally:
        backend.resume(lagging)
        for name in made:
            topics.delete_topic(kafka_conf, name)
        wait_healthy(kafka_conf, timeout=120)


def test_cluster_defaults_match_the_fault_tests_assumptions(kafka_conf):
    admin = topics.admin_client(kafka_conf)
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    cfg = admin.describe_configs([res])[res].result(timeout=10)
    expected = {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "auto.create.topics.enable": "false",
        "replica.lag.time.max.ms": "10000",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "offsets.topic.replication.factor": "3",
        "group.initial.rebalance.delay.ms": "0",
        "unclean.leader.election.enable": "false",
    }
    assert {k: cfg[k].value for k in expected} == expected


def test_invalid_topic_names_are_refused_before_any_request():
    for bad in ["", "a b", "x" * 250, ".", "..", "topic/1", "ümlaut"]:
        with pytest.raises(topics.TopicError, match="invalid topic name"):
            topics.validate_topic_name(bad)


def _produce(conf: dict, topic: str, n: int, timeout: float, **overrides) -> tuple[int, list[str], float]:
    delivered, errors = [], []
    p = Producer({**conf, "acks": "all", "enable.idempotence": False, "linger.ms": 5, **overrides})

    def cb(err, msg):
        (errors.append(err.name()) if err else delivered.append(msg.offset()))

    start = time.monotonic()
    for i in range(n):
        p.produce(topic, key=str(i), value=f"v{i}", on_delivery=cb)
    p.flush(timeout)
    return len(delivered), errors, time.monotonic() - start


def test_acks_all_round_trip_goes_through_the_toxiproxy_listeners(kafka_conf, fresh_topic):
    topic = fresh_topic("roundtrip")
    delivered, errors, _ = _produce(kafka_conf, topic, 300, 60)
    assert (delivered, errors) == (300, [])
    c = Consumer(
        {
            **kafka_conf,
            "group.id": f"t-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < 300 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            seen.add(m.value().decode())
    c.close()
    assert seen == {f"v{i}" for i in range(300)}

    # With every proxy disabled the same client can no longer produce: its path is the proxy.
    for i in (1, 2, 3):
        _toxiproxy_set_enabled(f"broker-{i}", False)
    try:
        delivered, errors, _elapsed = _produce(kafka_conf, topic, 5, 30, **{"message.timeout.ms": 8000})
        assert delivered == 0 and len(errors) == 5
    finally:
        for i in (1, 2, 3):
            _toxiproxy_set_enabled(f"broker-{i}", True)


def _toxiproxy_set_enabled(name: str, enabled: bool) -> None:
    req = urllib.request.Request(
        devstack.toxiproxy_url(f"/proxies/{name}"),
        method="POST",
        data=json.dumps({"enabled": enabled}).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=5).read()


@pytest.mark.faults
def test_acks_all_survives_one_broker_down_and_fails_bounded_with_two_down(
    kafka_conf, fresh_topic, healthy_cluster_after
):
    topic = fresh_topic("isr")
    b3 = devstack.BROKERS[2]
    devstack.kill_broker(b3, signal.SIGKILL)

    # status names the component that is down
    res = run([STACK, "status"])
    assert res.returncode == 1
    assert "down: broker-3" in res.stdout

    delivered, errors, _ = _produce(kafka_conf, topic, 200, 90, **{"message.timeout.ms": 60000})
    assert (delivered, errors) == (200, []), "acks=all must succeed with 2 of 3 replicas (min ISR 2)"

    devstack.kill_broker(devstack.BROKERS[1], signal.SIGKILL)
    delivered, errors, elapsed = _produce(
        kafka_conf, topic, 50, 60, **{"message.timeout.ms": 15000, "request.timeout.ms": 5000}
    )
    assert delivered == 0, "acks=all must not succeed with only one replica alive"
    assert set(errors) <= {
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "_MSG_TIMED_OUT",
        "_TIMED_OUT",
        "REQUEST_TIMED_OUT",
    }, errors
    assert len(errors) == 50
    assert elapsed < 30, f"the failure took {elapsed:.1f}s: it must be bounded by message.timeout.ms"


@pytest.mark.faults
def test_start_brings_back_a_killed_broker(kafka_conf, healthy_cluster_after):
    b = devstack.BROKERS[0]
    devstack.kill_broker(b, signal.SIGKILL)
    assert devstack.broker_pid(b) is None
    res = run([STACK, "start"], timeout=300)
    assert res.returncode == 0, res.stderr
    assert "broker-1     started" in res.stdout
    assert "broker-2     already running" in res.stdout
    devstack.wait_for_cluster(timeout=60)
    assert devstack.broker_pid(b) is not None


def test_second_start_changes_nothing():
    before = {name: pid for name, _, _, pid in devstack.status_rows()}
    res = run([STACK, "start"], timeout=300)
    assert res.returncode == 0, res.stderr
    # PostgreSQL, its change-data-capture cluster, MariaDB, Toxiproxy, the token issuer, 3 brokers,
    # Kafka Connect, Spark, Spark Connect
    assert res.stdout.count("already running") == 11
    assert "connect      already running; connect (exactly.once.source.support=disabled)" in res.stdout
    assert "spark        spark://127.0.0.1:7077, 1 worker of 2 cores and 2g (already running)" in res.stdout
    assert "already migrated" in res.stdout
    rows = {name: state for name, state, _, _ in devstack.status_rows()}
    services = (
        "postgres-cdc",
        "connect-1",
        "connect-2",
        "connect-eos-1",
        "connect-eos-2",
        "spark-master",
        "spark-worker",
        "oidc",
        "spark-connect",
    )
    assert {n: rows[n] for n in services} == dict.fromkeys(services, "up")
    assert {name: pid for name, _, _, pid in devstack.status_rows()} == before


def test_postgres_accepts_the_platform_role_and_refuses_a_wrong_password():
    db = ledger_database()
    with psycopg2.connect(**db.psycopg2_kwargs()) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_user, current_database()")
        assert cur.fetchone() == ("semantics", "semantics")
        cur.execute("SELECT count(*) FROM schema_migrations")
        assert cur.fetchone()[0] >= 1
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        psycopg2.connect(**{**db.psycopg2_kwargs(), "password": "wrong"})


def test_a_taken_port_is_refused_with_a_message_naming_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run([STACK, "start"], env={"SEMANTICS_VAR": str(tmp_path / "var"), "SEMANTICS_PG_PORT": str(port)})
    assert res.returncode == 2
    assert f"postgres: port 127.0.0.1:{port} is already taken" in res.stderr


def _path_without(tmp_path: Path, *tools: str) -> str:
    """A PATH holding links to every tool on the current PATH except `tools`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(":"):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = bin_dir / name
            if name in tools or target.exists():
                continue
            target.symlink_to(os.path.join(d, name))
    return str(bin_dir)


def test_missing_java_is_refused_with_a_message_naming_it(tmp_path):
    env = {"PATH": _path_without(tmp_path, "java"), "SEMANTICS_VAR": str(tmp_path / "var")}
    res = run([STACK, "start"], env=env)
    assert res.returncode == 2
    assert "java: no `java` on PATH" in res.stderr
    res = run(["bash", str(REPO / "local" / "setup")], env=env)
    assert res.returncode == 2 and "java is missing" in res.stderr


def test_missing_maven_is_refused_by_setup_with_a_message_naming_it(tmp_path):
    res = run(["bash", str(REPO / "local" / "setup")], env={"PATH": _path_without(tmp_path, "mvn")})
    assert res.returncode == 2
    assert "mvn is missing" in res.stderr


def test_smoke_dag_counts_with_spark_what_was_produced():
    res = run(["airflow", "dags", "test", "smoke", "-c", json.dumps({"messages": 2500})], timeout=600)
    (REPO / "artifacts" / "smoke-dag.log").write_text(res.stdout + res.stderr)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "state=success" in res.stdout + res.stderr
    with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as conn, conn.cursor() as cur:
        cur.execute("SELECT topic, counted FROM smoke_counts ORDER BY counted_at DESC LIMIT 1")
        topic, counted = cur.fetchone()
    assert topic.startswith("smoke-") and counted == 2500


def test_a_local_driver_loads_its_classes_from_the_archive_setup_wrote(monkeypatch):
    """local/setup wrote the Spark driver's class archive, and a driver started with the options
    the platform gives local mode maps it: with -Xshare:on a JVM that cannot map it fails, and the
    classes it loads come from it rather than from their jars."""
    monkeypatch.delenv("SEMANTICS_SPARK_CONF")  # the suite's own JVM options (conftest), not the platform's
    options = spark_conf("local[2]")["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={spark_class_archive()}" in options
    res = run(["spark-submit", "--driver-java-options", f"{options} -Xshare:on -Xlog:class+load=info", "--version"])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    sources = Counter(line.split(" source: ")[1] for line in res.stdout.splitlines() if " source: " in line)
    archived = sources["shared objects file (top)"]  # the archive's; "shared objects file" is the JDK's own
    # Read from a jar or the JDK's modules (the rest are classes made at run time: lambdas, proxies).
    from_files = sum(n for source, n in sources.items() if source.startswith(("file:", "jar:", "jrt:")))
    assert archived > 1000 and from_files * 10 < archived, sources.most_common(8)
