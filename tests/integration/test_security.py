"""The stack as docs/SECURITY.md says it is, seen from outside its processes: every port on
loopback; Kafka Connect asks for a login and holds no password in its API or its config topic; the
Spark cluster refuses an application without its secret; no secret in any process's arguments,
log or result row; the stack's folders and secret files are its owner's alone."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import psycopg2
import pytest
import secret_scan
from conftest import REPO, run

import devstack
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.connect import ConnectCluster
from delivery_semantics.plumbing.endpoints import database, get_connection, ledger_database

LOOPBACK = re.compile(r"(127\.\d+\.\d+\.\d+|\[::ffff:127\.\d+\.\d+\.\d+\]|\[::1\]):\d+")


def _stack_pids() -> set[int]:
    """The stack's processes: each pid file's, and their children (a worker's JVM, Postgres's)."""
    pids = set()
    for f in (devstack.VAR / "run").glob("*.pid"):
        try:
            pids.add(int(f.read_text().split()[0]))
        except (ValueError, IndexError):
            continue
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True, check=True).stdout
    parent = {int(a): int(b) for a, b in (line.split() for line in out.splitlines())}
    for pid in list(parent):
        p = pid
        while p in parent and p not in pids and p > 1:
            p = parent[p]
        if p in pids:
            pids.add(pid)
    return pids


def test_every_port_the_stack_listens_on_is_on_loopback(stack_env):
    ours = _stack_pids()
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    seen = []
    for line in out.splitlines():
        fields = line.split()
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if pids & ours:
            seen.append(fields[3])
            assert LOOPBACK.fullmatch(fields[3]), f"{fields[3]} is not loopback: {line}"
    assert len(seen) >= 15, seen  # brokers, Toxiproxy, PostgreSQL, MariaDB, Connect, Spark


@pytest.fixture
def connector_with_a_password(kafka_conf):
    """A JDBC sink on an empty topic, made as the platform makes one: its password by reference."""
    cluster = ConnectCluster("kafka_connect")
    name = f"security-{uuid.uuid4().hex[:8]}"
    topic = f"security-{uuid.uuid4().hex[:8]}"
    topics.ensure_topic(kafka_conf, topic)
    db = database("outbox_db")
    config = {
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "connection.url": db.jdbc_url,
        "connection.username": db.user,
        "connection.password": cluster.secret_reference(name, db.password),
        "insert.mode": "insert",
        "primary.key.mode": "none",
        "schema.evolution": "none",
    }
    cluster.put(name, config)
    cluster.wait_running(name)
    yield cluster, name, db.password
    cluster.delete(name)
    topics.delete_topic(kafka_conf, topic)


def test_connect_asks_for_a_login_and_shows_no_password(connector_with_a_password, kafka_conf):
    cluster, name, password = connector_with_a_password
    secret_file = os.path.join(cluster.secrets_dir, f"{name}.properties")
    assert stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(cluster.secrets_dir).st_mode) == 0o700
    values = secret_scan.secrets()
    for conn_id in ("kafka_connect", "kafka_connect_eos"):
        c = ConnectCluster(conn_id)
        for base in c.urls:
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"{base}/connectors", timeout=10)
            assert e.value.code == 401, base
        for connector in c.call("GET", "/connectors"):
            config = c.call("GET", f"/connectors/{connector}/config")
            shown = repr(config)
            assert password not in shown and not any(v in shown for v in values.values()), connector
    assert cluster.call("GET", f"/connectors/{name}/config")["connection.password"].startswith("${file:")
    # The config topics, read back whole: references, never a password.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_conf, "group.id": f"scan-{uuid.uuid4().hex}", "enable.auto.commit": False})
    references = 0
    try:
        for topic in ("_connect-configs", "_connect-eos-configs"):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            consumer.assign([TopicPartition(topic, 0, 0)])
            position = 0  # by position, not by count: the exactly-once cluster writes its configs in transactions
            while position < high:
                m = consumer.poll(10)
                if m is None:
                    position = consumer.position([TopicPartition(topic, 0)])[0].offset
                    assert position >= high, f"{topic}: read to {position} of {high}"
                    continue
                position = m.offset() + 1
                value = (m.value() or b"").decode("utf-8", "replace")
                references += "${file:" in value
                assert password not in value and not any(v in value for v in values.values()), topic
    finally:
        consumer.close()
    assert references >= 1
    cluster.delete(name)
    assert not os.path.exists(secret_file), "the connector's secret file goes with it"


def test_the_spark_cluster_authenticates(stack_env):
    for name in ("spark-master", "spark-worker"):
        said = [ln for ln in (devstack.LOGS / f"{name}.log").read_text().splitlines() if "SecurityManager: " in ln]
        assert said and "authentication enabled" in said[-1], name
    assert get_connection("spark_standalone").password, "applications take the secret from the connection"
    # The REST submission server answers without the secret: it is off, nothing listens on its port.
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=True).stdout.splitlines()
    assert not [ln for ln in listening if ln.split()[3].endswith(":6066")], "Spark's REST submission server is off"


@pytest.mark.slow  # about a minute: the driver tries three times 20 s to register
def test_the_spark_cluster_refuses_an_application_without_its_secret(tmp_path, stack_env):
    app = tmp_path / "app.py"
    app.write_text(
        "from pyspark.sql import SparkSession\nprint('ran', SparkSession.builder.getOrCreate().range(3).count())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "_SPARK_AUTH_SECRET"}
    res = run([str(REPO / ".venv" / "bin" / "spark-submit"), "--master", "spark://127.0.0.1:7077", str(app)], 180, env)
    assert res.returncode != 0 and "ran 3" not in res.stdout


def test_the_stacks_folders_and_secret_files_are_its_owners_alone(fresh_topic, kafka_conf):
    var = devstack.VAR
    for path in (var / "secrets.env", var / "stack.env", var / "connect" / "rest-users.properties"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((var / "tls").stat().st_mode) == 0o700
    # A new topic's segments, on each broker's disk: the records' owner's alone.
    topic = fresh_topic("owners")
    from confluent_kafka import Producer

    producer = Producer(kafka_conf)
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    for broker in devstack.BROKERS:
        segments = list((broker.data_dir / "data").glob(f"{topic}-*/*.log"))
        assert segments and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in segments), broker.name


def test_the_secret_scan_finds_a_planted_secret_where_it_says_it_looks(fresh_topic, kafka_conf):
    """A known answer for the scan: a canary, never a real secret, planted in each place in the
    form it would take there, and found, named by where; nothing planted stays behind."""
    import base64
    import time

    from confluent_kafka import Producer

    canary = {"CANARY": "Canary" + uuid.uuid4().hex}
    value = canary["CANARY"]
    basic = base64.b64encode(f"connect-admin:{value}".encode()).decode()
    artifact = REPO / "artifacts" / f"canary-{uuid.uuid4().hex[:8]}.log"
    artifact.parent.mkdir(exist_ok=True)
    artifact.write_text(f"GET /connectors HTTP/1.1\r\nAuthorization: Basic {basic}\r\n")
    table = f"canary_bytes_{uuid.uuid4().hex[:8]}"
    db = psycopg2.connect(**ledger_database().psycopg2_kwargs())
    db.autocommit = True
    topic = fresh_topic("canary")
    sampler = secret_scan.ProcessSampler(interval=0.1)
    sampler._wanted = secret_scan.needles(canary)
    sampler._thread.start()
    try:
        with db.cursor() as cur:
            cur.execute(f"CREATE TABLE {table} (b bytea)")
            cur.execute(f"INSERT INTO {table} VALUES (convert_to(%s, 'UTF8'))", (f"user={value};",))
            cur.execute(f"CREATE TABLE {table}_text (header text) PARTITION BY LIST (header)")
            cur.execute(f"CREATE TABLE {table}_text_p PARTITION OF {table}_text DEFAULT")
            cur.execute(f"INSERT INTO {table}_text VALUES (%s)", (f"Authorization: Basic {basic}",))
        producer = Producer(kafka_conf)
        producer.produce(topic, b"{}", headers=[("auth", f"Basic {basic}".encode())])
        assert producer.flush(30) == 0
        # A process that lives half a second, its argument Base64 at an odd offset.
        encoded = base64.b64encode(b"x" + value.encode()).decode()
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)", encoded], check=True)
        time.sleep(0.3)
        seen = sampler.stop()
        assert seen and all("seen while running" in f and "CANARY (Base64" in f for f in seen), seen
        assert secret_scan.in_files(canary) == [f"artifacts/{artifact.name}: CANARY (Base64, offset 2)"]
        rows = secret_scan.in_rows(canary)
        assert f"table public.{table}, bytea column b: 1 rows" in rows
        # A partitioned table is read once, through its parent.
        assert [r for r in rows if f"{table}_text" in r] == [f"table public.{table}_text: 1 rows"], rows
        assert f"topic {topic}: CANARY (Base64, offset 2)" in secret_scan.in_topics(canary)
    finally:
        sampler.stop()
        artifact.unlink(missing_ok=True)
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}, {table}_text")
        db.close()


def test_no_secret_in_a_process_argument_log_or_result_row(stack_env):
    found = secret_scan.findings()
    assert found == [], found


def test_a_hostile_setting_from_the_command_line_changes_nothing(stack_env):
    """The \\r injection, the way a user with a shell and --set would try it, on the real stack."""
    from delivery_semantics.reporting import report

    # Other files' runs are made beside this one (the parallel phase): count only what this
    # command could have made, a 5-event idempotent run on Java, since it started.
    mine = (
        "SELECT count(*) AS n FROM runs WHERE created_at >= %s AND mode = 'idempotent' AND client = 'java' "
        "AND messages = 5"
    )
    started = report.query("SELECT now() AS t")[0]["t"]
    hostile = "x\rconf\tbootstrap.servers\t127.0.0.1:1"
    res = subprocess.run(
        [
            *(sys.executable, "-m", "delivery_semantics.entry.cli", "load", "run", "--mode", "idempotent"),
            *("--client", "java", "--messages", "5", "--set", f"client.id={hostile}"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "plugins")},
        timeout=120,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert report.query(mine, (started,))[0]["n"] == 0
