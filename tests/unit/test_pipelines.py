"""Connector pipelines without a running service: the run's refusals, what its connectors are
given, the audit made for it, its windows, the coordinator's partition, and the Connect client's
fallback between workers."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from delivery_semantics import catalog
from delivery_semantics.audit import audits, pipeline_audit
from delivery_semantics.faults.nemesis import java_abs, java_string_hash
from delivery_semantics.plumbing.connect import ConnectCluster, ConnectError
from delivery_semantics.plumbing.endpoints import Database
from delivery_semantics.reporting import report
from delivery_semantics.workload import connector_pipeline
from delivery_semantics.workload.connector_pipeline import Names, PipelineSpec

DB = Database("127.0.0.1", 5434, "outbox_app", "s3cret", "outbox_cdc")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (PipelineSpec("debezium"), "unknown pipeline 'debezium'"),
        (PipelineSpec("debezium_outbox", "coordinator_kill"), "needs a transactional source"),
        (PipelineSpec("debezium_outbox", "lost_ack"), "connector pipelines do not run"),
        (PipelineSpec("debezium_outbox", events=0), "events must be an integer from 1"),
        (PipelineSpec("debezium_outbox", txn_size=-5), "txn_size must be an integer from 1"),
        (PipelineSpec("debezium_outbox", rate=0), "rate must be a positive number"),
        (PipelineSpec("debezium_outbox", run_id="x; DROP TABLE runs"), "must be letters, digits and _"),
    ],
)
def test_a_bad_run_is_refused_before_any_endpoint_is_looked_up(spec, message):
    with pytest.raises(catalog.CatalogError, match=message):
        connector_pipeline.validate(spec)


def test_a_fault_run_is_paced_over_the_load_seconds_and_a_clean_one_is_not():
    _, _, paced = connector_pipeline.validate(PipelineSpec("debezium_outbox", "connect_worker_kill", 3000))
    assert paced.rate == 100 and paced.run_id.startswith("p")
    _, _, clean = connector_pipeline.validate(PipelineSpec("debezium_outbox", "none", 3000))
    assert clean.rate is None
    _, _, asked = connector_pipeline.validate(PipelineSpec("debezium_outbox_eos", "coordinator_kill", 3000, rate=7))
    assert asked.rate == 7


def test_everything_a_run_makes_is_named_from_its_id():
    n = Names("p20261126t124933_d7345f")
    assert (n.topic, n.outbox, n.sink) == (
        "semantics-pipeline-p20261126t124933_d7345f",
        "outbox_p20261126t124933_d7345f",
        "sink_p20261126t124933_d7345f",
    )
    assert n.slot == n.slot.lower() and len(n.slot) <= 63, "a PostgreSQL replication slot's name"
    assert n.audit == "pipeline_p20261126t124933_d7345f"


def test_the_connectors_take_their_pipelines_settings():
    n = Names("p1")
    alo, eos = catalog.PIPELINES["debezium_outbox"], catalog.PIPELINES["debezium_outbox_eos"]
    ref = "${file:/secrets/x.properties:password}"
    src, src_eos = connector_pipeline.source_config(alo, n, DB, ref), connector_pipeline.source_config(eos, n, DB, ref)
    assert src["database.password"] == ref and DB.password not in json.dumps(src)
    assert src["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert src["transforms.outbox.type"] == "io.debezium.transforms.outbox.EventRouter"
    assert src["transforms.outbox.route.topic.replacement"] == n.topic
    assert src["table.include.list"] == f"public.{n.outbox}" and src["slot.name"] == n.slot
    assert "exactly.once.support" not in src
    assert (src_eos["exactly.once.support"], src_eos["transaction.boundary"]) == ("required", "poll")
    sink, sink_eos = connector_pipeline.sink_config(alo, n, DB, ref), connector_pipeline.sink_config(eos, n, DB, ref)
    assert sink["connection.password"] == ref and DB.password not in json.dumps(sink)
    assert (sink["insert.mode"], sink["primary.key.mode"], sink["collection.name.format"]) == ("insert", "none", n.sink)
    assert "consumer.override.isolation.level" not in sink
    assert sink_eos["consumer.override.isolation.level"] == "read_committed"
    assert sink["connection.url"] == "jdbc:postgresql://127.0.0.1:5434/outbox_cdc"


def test_the_audit_made_for_a_run_is_a_valid_audit_of_three_stages(tmp_path, monkeypatch):
    monkeypatch.setenv("SEMANTICS_PIPELINES_DIR", str(tmp_path))
    for p in catalog.PIPELINES.values():
        path = pipeline_audit.write_audit(p, "connect_worker_kill", Names("p2"))
        a = audits.load(path)
        assert (a.name, a.judged_as, a.topic, a.windowed) == ("pipeline_p2", p.name, Names("p2").topic, True)
        assert a.transactional is p.transactional
        assert a.record["event_id"] == {"header": "id"}, "the outbox event router's id header"
        assert (a.outbox_conn_id, a.sink_conn_id) == ("cdc_outbox", "outbox_db")
        assert a.sink_label == f"public.{Names('p2').sink}"


def test_two_windows_one_mid_load_and_one_once_every_row_is_due():
    start = datetime(2026, 11, 26, 12, 0, 0, 300_000, tzinfo=UTC)
    mid, last = pipeline_audit.window_ends(start, start + timedelta(seconds=30))
    assert mid == datetime(2026, 11, 26, 12, 0, 15, tzinfo=UTC)
    assert last - (start + timedelta(seconds=30)) >= timedelta(seconds=2 * pipeline_audit.GRACE_SECONDS)
    [only] = pipeline_audit.window_ends(start, start + timedelta(seconds=1))
    assert only > start + timedelta(seconds=2 * pipeline_audit.GRACE_SECONDS)


def test_the_coordinator_partition_is_javas_string_hash():
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_abs(java_string_hash("polygenelubricants")) == 0
    assert java_string_hash("héllo-€") == 289801325, "over UTF-16 code units"
    # Java's own String.hashCode gave these (a one-line class run with `java`, 2026-11-26).
    assert java_string_hash("semantics-connect-eos-src_try1-0") == -1702419045
    assert java_abs(java_string_hash("semantics-connect-eos-src_try1-0")) % 50 == 45


class _Connect(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/":
            self._send(200, {"version": "4.1.1"})
        else:
            self._send(404, {"error_code": 404, "message": f"Connector {self.path.split('/')[2]} not found"})

    def do_PUT(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        name = self.path.split("/")[2]
        puts = self.server.puts[name] = self.server.puts.get(name, 0) + 1
        if name == "flaky" and puts <= 2:
            msg = "Failed to write to config topic; this may be due to a transient error and the request can be safely retried"
            self._send(500, {"error_code": 500, "message": msg})
        elif name == "bad":
            self._send(400, {"error_code": 400, "message": "Connector configuration is invalid"})
        else:
            self._send(201, {"name": name})

    def _send(self, code, body):
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def connect_worker():
    server = HTTPServer(("127.0.0.1", 0), _Connect)
    server.puts = {}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.url = f"http://127.0.0.1:{server.server_port}"
    yield server
    server.shutdown()


def test_the_connect_client_falls_back_to_the_next_worker_and_names_each_refusal(connect_worker):
    connect_worker = connect_worker.url
    down = "http://127.0.0.1:9"  # discard: nothing listens
    assert ConnectCluster("kafka_connect", urls=[down, connect_worker]).version() == "4.1.1"
    with pytest.raises(ConnectError, match=r"HTTP 404 Connector nope not found"):
        ConnectCluster("kafka_connect", urls=[connect_worker]).status("nope")
    with pytest.raises(ConnectError, match=r"cannot be reached: http://127.0.0.1:9 \(.*\)$"):
        ConnectCluster("kafka_connect", urls=[down]).version()


def test_the_pipeline_table_shows_counts_latency_and_verdicts():
    row = {c: None for c in report.PIPELINE_COLUMNS} | {
        "pipeline": "debezium_outbox",
        "scenario": "connect_worker_kill",
        "outbox_rows": 3000,
        "duplicate_events": 370,
        "lost": 0,
        "sink_duplicates": 370,
        "sink_lost": 0,
        "end_to_end_lost": 0,
        "throughput_eps": 96.7,
        "latency_p50_ms": 8376.3,
        "latency_p99_ms": 20431.3,
        "verdict": "kept",
        "expectation": "duplicate_events > 0, lost_acked = 0",
        "meets_expectation": True,
    }
    text = report.pipeline_text([row])
    assert text.splitlines()[2].split() == [
        "debezium_outbox",
        "connect_worker_kill",
        "3000",
        "370",
        "0",
        "370",
        "0",
        "0",
        "97",
        "8376",
        "20431",
        "kept",
        "duplicate_events",
        ">",
        "0,",
        "lost_acked",
        "=",
        "0",
        "yes",
    ]


def test_the_connect_client_repeats_what_connect_calls_transient_and_nothing_else(connect_worker):
    cluster = ConnectCluster("kafka_connect", urls=[connect_worker.url])
    cluster.put("flaky", {"connector.class": "x"})
    assert connect_worker.puts["flaky"] == 3, "two transient refusals, then the write"
    with pytest.raises(ConnectError, match=r"HTTP 400 Connector configuration is invalid"):
        cluster.put("bad", {"connector.class": "x"})
    assert connect_worker.puts["bad"] == 1, "a refusal is not repeated"
    connect_worker.puts["flaky"] = 0
    with pytest.raises(ConnectError, match=r"HTTP 500 Failed to write to config topic"):
        cluster.call("PUT", "/connectors/flaky/config", {}, retry_for=0)
