"""The trust boundary, tried as a hostile but ordinary user would (docs/SECURITY.md): someone who may
trigger a DAG (its form's fields, the CLI's --set) or commit a mode or audit file, and nothing more.
Every attempt is refused in one line before any client, JVM, protoc or Spark starts; canaries show
that no code ran and no listener was reached. No service is needed: a socket of this test stands in
for an attacker's host, and the Java runner and protoc run as they would on a worker."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, cli

from delivery_semantics import catalog, client_settings, files, forms, mode_files, modes
from delivery_semantics.audit import audits, schemas
from delivery_semantics.workload import java_client, settings

SCHEMAS = REPO / "audits" / "schemas"
CONTROL = ["\r", "\n", "\t", "\x00", "\x1b", "\x7f"]


class Listener:
    """A TCP listener on 127.0.0.1 that counts who connects: the attacker's host."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def _injection(port: int) -> str:
    """A client.id that, split at its \r, would make the Java runner read three more settings."""
    return (
        f"x\rconf\tbootstrap.servers\t127.0.0.1:{port}\rconf\tsecurity.protocol\tSASL_PLAINTEXT"
        "\rconf\tsasl.mechanism\tPLAIN"
    )


# --------------------------------------------------------------------------- producer settings


FORBIDDEN = [
    # (client, key, value, why)
    ("librdkafka", "plugin.library.paths", "/tmp/x.so", "loads code"),
    ("librdkafka", "interceptor.test.config1", "x", "loads code"),
    ("librdkafka", "metadata.broker.list", "evil:9092", "replaces the cluster"),
    ("librdkafka", "bootstrap.servers", "evil:9092", "replaces the cluster"),
    ("librdkafka", "test.mock.num.brokers", 3, "replaces the cluster"),
    ("librdkafka", "enable.ssl.certificate.verification", False, "the Kafka connection sets it"),
    ("librdkafka", "enable.sasl.oauthbearer.unsecure.jwt", True, "the Kafka connection sets it"),
    ("librdkafka", "https.ca.location", "/tmp/ca", "the Kafka connection sets it"),
    ("librdkafka", "ssl.endpoint.identification.algorithm", "none", "the Kafka connection sets it"),
    ("librdkafka", "sasl.password", "x", "the Kafka connection sets it"),
    ("librdkafka", "security.protocol", "PLAINTEXT", "the Kafka connection sets it"),
    ("librdkafka", "oauthbearer_token_refresh_cb", "x", "loads code"),
    ("librdkafka", "transactional.id", "mine", "the platform sets it"),
    ("librdkafka", "delivery.report.only.error", True, "the platform sets it"),
    ("java", "security.providers", "evil.Provider", "loads code"),
    ("java", "config.providers", "file", "loads code"),
    ("java", "interceptor.classes", "evil.Interceptor", "loads code"),
    ("java", "partitioner.class", "evil.Partitioner", "loads code"),
    ("java", "metric.reporters", "evil.Reporter", "is not a setting"),
    ("java", "sasl.jaas.config", "x", "the Kafka connection sets it"),
    ("java", "sasl.login.callback.handler.class", "x", "the Kafka connection sets it"),
    ("java", "ssl.truststore.location", "/tmp/t", "the Kafka connection sets it"),
    ("java", "bootstrap.servers", "evil:9092", "replaces the cluster"),
    ("java", "key.serializer", "x", "the platform sets it"),
]


@pytest.mark.parametrize(("client", "key", "value", "why"), FORBIDDEN, ids=lambda v: str(v)[:40])
def test_keys_that_load_code_replace_the_cluster_or_weaken_security_are_refused_everywhere(client, key, value, why):
    for check in (client_settings.form_setting, client_settings.file_setting):
        with pytest.raises(catalog.ModeError, match=why):
            check(client, key, value)


@pytest.mark.parametrize(
    "key", ["Bootstrap.Servers", " bootstrap.servers", "bootstrap.servers ", "BOOTSTRAP.SERVERS", "bootstrap.servers\r"]
)
def test_case_and_whitespace_variants_of_an_owned_key_are_refused(key):
    with pytest.raises(catalog.ModeError):
        client_settings.form_setting("librdkafka", key, "evil:1")


@pytest.mark.parametrize("client", catalog.CLIENTS)
@pytest.mark.parametrize("char", CONTROL, ids=repr)
def test_no_control_character_passes_in_any_key_or_value(client, char):
    for key in ("client.id", "acks", "linger.ms", "compression.type"):
        with pytest.raises(catalog.ModeError) as e:
            client_settings.file_setting(client, key, f"1{char}conf\tbootstrap.servers\tevil:1")
        assert "\n" not in str(e.value) and "\r" not in str(e.value)
    with pytest.raises(catalog.ModeError):
        client_settings.file_setting(client, f"linger.ms{char}", "5")


def test_the_r_injection_is_refused_from_a_form_from_set_and_from_a_mode_file(tmp_path, listener):
    hostile = _injection(listener.port)
    with pytest.raises(catalog.ModeError, match=r"client.id is not a setting a form or --set may give"):
        settings.resolve(modes.get_mode("idempotent"), "java", {"client.id": hostile})
    path = tmp_path / "team.yaml"
    path.write_text(json.dumps({"client": "java", "settings": {"client.id": hostile}, "promise": "no_acked_loss"}))
    with pytest.raises(mode_files.ModeFileError, match=r"settings.client.id: client.id=.*holds no control character"):
        mode_files.load(path)
    res = cli(
        "load", "run", "--mode", "idempotent", "--client", "java", "--messages", "5", "--set", f"linger.ms={hostile}"
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert listener.connections == 0


def test_values_are_bounded_before_any_process_starts():
    with pytest.raises(catalog.ModeError, match=r"buffer.memory=.* must be an integer from 1048576 to 1073741824"):
        settings.resolve(modes.get_mode("idempotent"), "java", {"buffer.memory": "1000000000000000"})
    with pytest.raises(catalog.ModeError, match=r"buffer.memory=1000000000000000.0 must be an integer from"):
        settings.resolve(modes.get_mode("idempotent"), "java", {"buffer.memory": 1e15})
    with pytest.raises(catalog.ModeError, match=r"queue.buffering.max.kbytes"):
        settings.resolve(modes.get_mode("idempotent"), "librdkafka", {"queue.buffering.max.kbytes": 2**31 - 1})


def test_the_forms_schema_offers_the_tuning_keys_only():
    schema = forms.single_run_form()["producer_settings"]
    offered = set(schema["propertyNames"]["enum"])
    assert {"acks", "linger.ms", "buffer.memory", "request.required.acks"} <= offered
    assert not offered & {"bootstrap.servers", "client.id", "plugin.library.paths", "security.providers"}


@pytest.fixture(scope="module")
def canary_library(tmp_path_factory) -> tuple[Path, Path]:
    """A shared library whose constructor writes a marker file when it is loaded."""
    folder = tmp_path_factory.mktemp("canary")
    marker = folder / "loaded"
    source = folder / "canary.c"
    source.write_text(
        "#include <stdio.h>\n"
        f'__attribute__((constructor)) static void canary(void) {{ FILE *f = fopen("{marker}", "w"); '
        "if (f) fclose(f); }\n"
    )
    library = folder / "libcanary.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library, marker


def test_plugin_library_paths_is_refused_before_librdkafka_opens_it(canary_library, tmp_path):
    library, marker = canary_library
    # The canary works: loading it writes the marker (so its absence below means it never loaded).
    probe = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(library)!r})"], check=True)
    assert probe.returncode == 0 and marker.exists()
    marker.unlink()
    with pytest.raises(catalog.ModeError, match=r"loads code"):
        settings.resolve(modes.get_mode("idempotent"), "librdkafka", {"plugin.library.paths": str(library)})
    path = tmp_path / "team.yaml"
    spec = {"client": "librdkafka", "settings": {"plugin.library.paths": str(library)}, "promise": "no_acked_loss"}
    path.write_text(json.dumps(spec))
    with pytest.raises(mode_files.ModeFileError, match=r"loads code"):
        mode_files.load(path)
    res = cli("load", "run", "--mode", "idempotent", "--messages", "5", "--set", f"plugin.library.paths={library}")
    assert res.returncode == 2 and "loads code" in res.stderr
    assert not marker.exists(), "the library was opened"


def test_predict_hands_librdkafkas_parser_the_rules_keys_only(canary_library):
    """`predict --set` checks a value with librdkafka's own parser, but only for the keys the rules
    read: a key that loads a library when set stays text, and a value that would split a line or
    end a C string is refused in one line."""
    from delivery_semantics import rule_catalog
    from delivery_semantics.clients import known_keys

    library, marker = canary_library
    res = cli("predict", "--set", f"producer.plugin.library.paths={library}", "--set", "producer.acks=all")
    assert res.returncode == 0, res.stderr
    assert not marker.exists(), "the library was opened"
    res = cli("predict", "--set", "producer.acks=1\r\nplugin.library.paths=/tmp/x.so")
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no control character" in res.stderr, res.stderr
    with pytest.raises(known_keys.SettingRefused, match="no control character"):
        known_keys.setting("producer", "acks", "1\x00", "librdkafka", rule_catalog.READS)
    # A topic's name and a connection id are checked before any request.
    res = cli("predict", "--kafka", "kafka_default", "--topic", "../orders", "--set", "producer.acks=1")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


# --------------------------------------------------------------------------- the Java runner's protocol


def test_the_java_protocol_carries_any_text_as_one_value_both_ways(listener):
    """Past the allowlist (as a bug in it would let through): a client.id with the injection and
    every control character arrives whole, and bootstrap.servers is still the platform's."""
    hostile = _injection(listener.port) + "\n\t\x00é\u2028\udcff"  # a lone surrogate: not UTF-8
    probe = {"client.id": hostile, "bootstrap.servers": "127.0.0.1:1"}
    done = subprocess.run(
        java_client.command("check"), input=java_client._conf_lines(probe).encode(), capture_output=True, timeout=60
    )
    lines = [java_client._fields(line) for line in done.stdout.split(b"\n") if line]
    reported = {java_client.text(f[1]): java_client.text(f[2]) for f in lines[1:] if f[0] == "setting"}
    assert lines[0] == ["ok"], done.stderr
    assert reported["client.id"] == hostile.replace("\udcff", "\ufffd"), "one value, bytes not UTF-8 replaced"
    assert reported["bootstrap.servers"] == "[127.0.0.1:1]"
    # The other way: the client's own error message echoes a value with \r and \n, and comes back as
    # one refusal, with no line of it read as a report.
    with pytest.raises(catalog.ModeError) as e:
        java_client.check({"acks": "x\rsetting\tacks\t1\nsetting\tretries\t0"}, False)
    assert str(e.value).startswith("the Java client refused the producer settings: Invalid value x")
    assert "\n" not in str(e.value) and "\r" not in str(e.value)
    assert listener.connections == 0


def test_the_java_runner_given_the_injection_never_reaches_the_attackers_host(listener):
    """The end-to-end case: a SASL connection with a fake password, the injection in client.id past
    the allowlist, one event sent. The runner connects to the connection's address (nothing
    listens there) and never to the listener."""
    from delivery_semantics.workload.generator import Generator

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # closed again: a cluster that is down
    conf = {
        "bootstrap.servers": f"127.0.0.1:{dead}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="canary-password";',
        "client.id": _injection(listener.port),
        "acks": "all",
        "max.block.ms": "3000",
        "delivery.timeout.ms": "3000",
        "request.timeout.ms": "2000",
        "linger.ms": "0",
    }
    client = java_client.JavaClient(conf, "orders", Generator("hostile", 1, 10, 0), transactional=False)
    try:
        client.send([(0, int(time.time() * 1000))])
        time.sleep(4)
    finally:
        client.proc.kill()
        client.proc.wait()
    assert listener.connections == 0, "the runner was steered to the listener"


# --------------------------------------------------------------------------- audit files


def _audit(tmp_path: Path, edit=None, name: str = "hostile") -> Path:
    shutil.copytree(SCHEMAS, tmp_path / "schemas", dirs_exist_ok=True)
    spec = {
        "topic": "orders",
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db"},
        "record": {
            "format": "avro",
            "schemas": {"1": "schemas/order_event-v1.avsc"},
            "event_id": {"field": "order.id"},
        },
        "outbox": {"table": "outbox", "columns": {"event_id": "id"}},
    }
    if edit:
        edit(spec)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def canary_plugin(tmp_path) -> tuple[Path, Path]:
    marker = tmp_path / "plugin-ran"
    script = tmp_path / "protoc-gen-canary"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    return script, marker


@pytest.mark.parametrize("name", ["@args", "-Iother", "--plugin=x", ".hidden.proto", "schemas/@args"])
def test_a_schema_file_that_protoc_would_read_as_options_is_refused(tmp_path, canary_plugin, name):
    script, marker = canary_plugin
    options = f"--plugin=protoc-gen-canary={script}\n--canary_out={tmp_path}\nschemas/order_event.proto\n"
    (tmp_path / name.split("/")[-1]).write_text(options)
    (tmp_path / "schemas").mkdir(exist_ok=True)
    (tmp_path / "schemas" / name.split("/")[-1]).write_text(options)
    path = _audit(tmp_path, lambda s: s["record"].update(format="protobuf", schemas={"1": name}))
    with pytest.raises(audits.AuditError, match=r"a schema file is named by a path relative to the audit's folder"):
        schemas.load(audits.load(path))
    res = cli("audit", "validate", str(path))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not marker.exists(), "protoc ran the plugin"


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "/etc/passwd", "schemas/../../outside.avsc", "link.avsc"])
def test_a_schema_file_outside_the_audits_folder_is_never_read(tmp_path, name):
    outside = tmp_path.parent / "outside.avsc"
    outside.write_text('{"secret": "do-not-echo"}')
    (tmp_path / "link.avsc").symlink_to(outside)
    path = _audit(tmp_path, lambda s: s["record"].update(schemas={"1": name}))
    with pytest.raises(audits.AuditError) as e:
        schemas.load(audits.load(path))
    assert "outside the audit's folder" in str(e.value) or "named by a path relative" in str(e.value)
    assert "do-not-echo" not in str(e.value) and "root:" not in str(e.value)


def _nested(levels: int) -> str:
    text = '"string"'
    for i in range(levels):
        text = f'{{"type": "record", "name": "R{i}", "fields": [{{"name": "f", "type": {text}}}]}}'
    return text


def test_avro_schemas_that_crash_a_reader_are_refused_in_one_line(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "deep.avsc").write_text(_nested(3000))
    (tmp_path / "schemas" / "deep100.avsc").write_text(_nested(100))
    (tmp_path / "schemas" / "nofields.avsc").write_text('{"type": "record", "name": "E"}')
    (tmp_path / "schemas" / "--version").write_text("{}")
    for name, message in [
        ("schemas/deep.avsc", "not an Avro schema"),
        ("schemas/deep100.avsc", "nested deeper than"),
        ("schemas/nofields.avsc", "record E has no fields list"),
        ("schemas/--version", "not starting with '-'"),
    ]:
        path = _audit(tmp_path, lambda s, n=name: s["record"].update(schemas={"1": n}))
        with pytest.raises(audits.AuditError, match=message) as e:
            schemas.load(audits.load(path))
        assert "\n" not in str(e.value) and len(str(e.value)) < 600
        res = cli("audit", "validate", str(path))  # without --endpoints, the schemas are read too
        assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("notifier", "field"),
    [
        ({"smtp": {"to": "a@example.com", "files": ["/etc/passwd"]}}, "files"),
        ({"smtp": {"to": "a@example.com", "html_content": "{{ conn.kafka_default.password }}"}}, "html_content"),
        ({"smtp": {"to": "a@example.com", "subject": "{{ var.value.secret }}"}}, "subject"),
        ({"smtp": {"to": "a@example.com", "custom_headers": {"Bcc": "x@evil.example"}}}, "custom_headers"),
        ({"smtp": {"to": "a@example.com\r\nBcc: x@evil.example"}}, "to"),
        ({"slack": {"channel": "#x", "text": "{{ conn.outbox_db.password }}"}}, "text"),
    ],
)
def test_a_notifier_names_recipients_and_a_connection_only(tmp_path, notifier, field):
    path = _audit(tmp_path, lambda s: s.update(alerts={"notifier": notifier}))
    with pytest.raises(audits.AuditError, match=r"alerts.notifier") as e:
        audits.load(path)
    assert field in str(e.value) or "is not valid under" in str(e.value) or "does not match" in str(e.value)


def test_the_notifier_sends_the_platforms_fixed_message():
    audit = audits.load(REPO / "audits" / "orders_stream.yaml")
    notify = audits.failure_callback(audit)
    kwargs = next(c.cell_contents for c in notify.__closure__ if isinstance(c.cell_contents, dict))
    assert kwargs == {"to": "orders-oncall@example.com", "smtp_conn_id": "smtp_alerts"}


@pytest.mark.parametrize(
    ("spark", "message"),
    [
        ({"spark.driver.extraJavaOptions": "-javaagent:/tmp/x.jar"}, "is not one of"),
        ({"spark.jars": "/tmp/evil.jar"}, "is not one of"),
        ({"spark.executor.plugins": "evil.Plugin"}, "is not one of"),
        ({"spark.driver.memory": "4g -Dx=y"}, "is not a size"),
    ],
)
def test_an_audits_spark_section_takes_sizes_only(tmp_path, spark, message):
    path = _audit(tmp_path, lambda s: s.update(spark=spark))
    with pytest.raises(audits.AuditError, match=message):
        audits.load(path)


@pytest.mark.parametrize("value", ["120\r\nSPARK_HOME=/tmp", 0, 3601, -1, 1.5, True, "120"])
def test_an_audits_kafka_retry_bound_is_a_whole_number_of_seconds_within_an_hour(tmp_path, value):
    """It reaches the Spark application as an environment variable: nothing but 1-3600 passes."""
    path = _audit(tmp_path, lambda s: s.update(kafka_retry_seconds=value))
    with pytest.raises(audits.AuditError, match="kafka_retry_seconds"):
        audits.load(path)
    assert audits.load(_audit(tmp_path, lambda s: s.update(kafka_retry_seconds=3))).spec["kafka_retry_seconds"] == 3


def test_sink_and_copy_paths_stay_under_the_operators_roots(tmp_path, monkeypatch):
    monkeypatch.setenv("SEMANTICS_LAKEHOUSE", str(tmp_path / "lake"))
    for edit, field in [
        (lambda s: s.update(dedup_copy={"store": "lakehouse", "path": "/etc"}), "dedup_copy.path"),
        (lambda s: s.update(dedup_copy={"store": "lakehouse", "path": "s3a://someone-else/x"}), "dedup_copy.path"),
    ]:
        with pytest.raises(audits.AuditError, match=f"{field}: .*outside the data roots"):
            audits.load(_audit(tmp_path, edit))
    lakehouse_audit = yaml.safe_load((REPO / "audits" / "orders_lakehouse.yaml").read_text())
    lakehouse_audit["sink"]["path"] = "../../../root"
    (tmp_path / "sinks.yaml").write_text(yaml.safe_dump(lakehouse_audit))
    with pytest.raises(audits.AuditError, match=r"sink.path: ../../../root: outside the data roots"):
        audits.load(tmp_path / "sinks.yaml")
    inside = audits.load(_audit(tmp_path, lambda s: s.update(dedup_copy={"store": "lakehouse", "path": "lake2"})))
    assert inside.dedup_copy["path"] == str(tmp_path / "lake2")
    monkeypatch.setenv("SEMANTICS_DATA_ROOTS", "s3a://team-bucket/semantics")
    uri = audits.load(
        _audit(tmp_path, lambda s: s.update(dedup_copy={"store": "lakehouse", "path": "s3a://team-bucket/semantics/x"}))
    )
    assert uri.dedup_copy["path"] == "s3a://team-bucket/semantics/x"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda s: s.update(topic="orders\n"), "topic"),
        (lambda s: s["connections"].update(kafka="kafka_default\n"), "connections.kafka"),
        (lambda s: s["outbox"].update(table="outbox\n"), "outbox.table"),
    ],
)
def test_a_pattern_matches_the_whole_string(tmp_path, edit, field):
    with pytest.raises(audits.AuditError, match=f"{field}: ") as e:
        audits.load(_audit(tmp_path, edit))
    assert "\n" not in str(e.value)


def test_a_grace_with_a_trailing_newline_is_one_line_not_a_traceback(tmp_path):
    stream = yaml.safe_load((REPO / "audits" / "orders_stream.yaml").read_text())
    stream["window"]["grace"] = "90s\n"
    path = tmp_path / "stream.yaml"
    path.write_text(yaml.safe_dump(stream))
    res = cli("audit", "validate", str(path))
    assert res.returncode == 2 and "window.grace" in res.stderr and "Traceback" not in res.stderr, res.stderr


def _alias_bomb(depth: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, depth + 1):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("kind", ["mode", "audit"])
def test_a_yaml_alias_bomb_is_refused_quickly_in_one_short_line(tmp_path, kind):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(7))
    started = time.monotonic()
    with pytest.raises(catalog.CatalogError) as e:
        (mode_files.load if kind == "mode" else audits.load)(path)
    assert time.monotonic() - started < 2
    assert len(str(e.value)) <= files.MESSAGE_CHARS and "\n" not in str(e.value)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (files.MAX_FILE_BYTES + 10))
    with pytest.raises(catalog.CatalogError, match=r"larger than"):
        (mode_files.load if kind == "mode" else audits.load)(big)


def test_a_dag_file_reading_a_bomb_gives_a_bounded_import_error(tmp_path):
    (tmp_path / "bomb.yaml").write_text(_alias_bomb(7))
    found = mode_files.discover(tmp_path)
    assert len(found) == 1 and isinstance(found[0][1], mode_files.ModeFileError)
    assert len(str(found[0][1])) <= files.MESSAGE_CHARS


# --------------------------------------------------------------------------- a record that is not a delivery


def _protobuf_fields():
    """The checker's Protobuf decoder over the example schema, reading order.id."""
    from delivery_semantics.audit.formats import protobuf_format

    audit = audits.load(
        _audit(
            Path(os.environ["HOSTILE_TMP"]),
            lambda s: s["record"].update(format="protobuf", schemas={"3": "schemas/order_event.proto"}),
        )
    )
    (ws,) = schemas.load(audit)["value"].values()
    return ws, protobuf_format.protobuf_decoder({3: (ws.descriptor, ws.file)}, ["order.id"])


@pytest.fixture
def protobuf(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_TMP", str(tmp_path))
    return _protobuf_fields()


@pytest.mark.parametrize("indexes", [(-1,), (-2,), (99,), (1, 5), (2,), (1, -1), (0, 0)])
def test_a_protobuf_ghost_with_an_index_the_schema_lacks_is_malformed(protobuf, indexes):
    """Index -1 would be the schema's last message (OrderEvent) under Python's indexing: a record
    that carries an acked event's id would count as its delivery and hide its loss."""
    from delivery_semantics.records.wire import frame

    ws, fields = protobuf
    _, event = schemas.message_classes(ws)
    msg = event(version=1)
    msg.order.id = "acked-event"
    assert fields(frame(3, msg.SerializeToString(), (1,))) == ["acked-event"], "the planted event decodes"
    assert fields(frame(3, msg.SerializeToString(), indexes)) == [None]


def test_the_protobuf_decoder_never_crashes_and_never_invents_an_id(protobuf):
    """Random bytes, every truncation of a good record and index paths in and out of range: each
    decodes to the planted id or to nothing, and never raises."""
    from delivery_semantics.records.wire import frame

    ws, fields = protobuf
    _, event = schemas.message_classes(ws)
    msg = event(version=7)
    msg.order.id = "planted"
    good = frame(3, msg.SerializeToString(), (1,))
    rng = random.Random(54)
    for cut in range(len(good) + 1):
        assert fields(good[:cut])[0] in ("planted", None, "")
    for _ in range(3000):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        got = fields(raw)
        assert got[0] is None or "planted" not in got[0]
    for indexes in [(i,) for i in range(-3, 4)] + [(1, i) for i in range(-2, 3)]:
        got = fields(frame(3, msg.SerializeToString(), indexes))
        assert got == (["planted"] if indexes == (1,) else [None]) or (indexes[0] == 0 and got == [None])


# --------------------------------------------------------------------------- who sees what


def test_an_audits_event_ids_are_shown_only_to_who_may_read_its_dag(monkeypatch):
    """The page asks Airflow's auth manager (here one that lets a user read one DAG only) and
    shows the event ids to that user alone; verdicts and counts stay visible to every viewer."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from delivery_semantics.reporting import report, ui

    event = {"stage": "outbox_topic", "kind": "lost_acked", "event_id": "team-secret-id-1", "copies": 0}
    event |= {"partitions": None, "offsets": None, "window_end": None, "occurred_at": None}
    planted = ({"audit": "orders", "verdict": "broken", "lost_acked": 1}, [event])
    monkeypatch.setattr(report, "audit_discrepancies", lambda audit: planted)

    class OneDagAuthManager:
        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            return method == "GET" and details.id in user["dags"]

    import airflow.api_fastapi.app as airflow_app

    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: OneDagAuthManager())
    pages = {}
    for name, dags in (("reader", {"audit_orders"}), ("other", {"audit_payments"})):
        ui.app.dependency_overrides[get_user] = lambda dags=dags: {"dags": dags}
        try:
            pages[name] = TestClient(ui.app).get("/audits/orders")
        finally:
            ui.app.dependency_overrides.clear()
    assert pages["reader"].status_code == pages["other"].status_code == 200
    assert "team-secret-id-1" in pages["reader"].text
    assert "team-secret-id-1" not in pages["other"].text and "Event ids hidden" in pages["other"].text
    assert "broken" in pages["other"].text, "the verdict stays visible"
    assert ui.audit_dag_id("pipeline_p1") == "semantics_matrix" and ui.audit_dag_id("orders") == "audit_orders"


def test_security_md_lists_exactly_the_allowlists():
    text = (REPO / "docs" / "SECURITY.md").read_text()
    for client, policy in client_settings.POLICIES.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {client} |"))
        form, file = row.rstrip(" |").split(" | ")[1:3]
        named = lambda cell: {k.strip("` ") for k in cell.split(",")}
        assert named(form) == set(policy.keys(client_settings.FORM)), client
        assert named(file) == set(policy.keys(client_settings.FILE)) - set(policy.keys(client_settings.FORM)), client
    spark = text.split("**`spark:`** takes sizes only:", 1)[1].split(". Jars", 1)[0]
    assert {k.strip("`\n ") for k in spark.split(",")} == set(audits.SPARK_SETTINGS)
    from delivery_semantics.entry import prove

    topic = text.split("a topic may take\n", 1)[1].split("; a consumer", 1)[0]
    consumer = text.split("a consumer is described with\n", 1)[1].split(".\n", 1)[0]
    assert {k.strip("`\n ") for k in topic.split(",")} == set(prove.TOPIC_SETTINGS)
    assert {k.strip("`\n ") for k in consumer.split(",")} == set(prove.CONSUMER_SETTINGS)


def test_a_keystore_or_code_folder_others_can_enter_is_refused(tmp_path, monkeypatch):
    from delivery_semantics.plumbing import endpoints

    shared = tmp_path / "keystores"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SEMANTICS_KEYSTORE_DIR", str(shared))
    with pytest.raises(endpoints.EndpointError, match="not a private folder of this user's"):
        endpoints.keystore_dir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("SEMANTICS_KEYSTORE_DIR", str(tmp_path / "link"))
    with pytest.raises(endpoints.EndpointError, match="not a private folder"):
        endpoints.keystore_dir()
    monkeypatch.setenv("SEMANTICS_KEYSTORE_DIR", str(tmp_path / "new" / "stores"))
    made = endpoints.keystore_dir()
    assert made.is_dir() and made.stat().st_mode & 0o077 == 0


def test_the_spark_code_zip_is_made_again_when_it_is_not_the_sources(monkeypatch, tmp_path):
    from delivery_semantics.plumbing import endpoints, spark

    monkeypatch.setattr(endpoints.tempfile, "gettempdir", lambda: str(tmp_path))
    first = Path(spark.spark_py_files())
    assert first.parent.stat().st_mode & 0o077 == 0
    import zipfile

    with zipfile.ZipFile(first, "a") as z:  # a planted module beside the sources
        z.writestr("checker/evil.py", "import os\n")
    again = Path(spark.spark_py_files())
    assert again == first and "checker/evil.py" not in zipfile.ZipFile(again).namelist()


@pytest.mark.parametrize("share", [2, -0.1, "0.5", True, None])
def test_an_audits_min_id_share_is_a_number_from_0_to_1(tmp_path, share):
    path = _audit(tmp_path, lambda s: s["record"].update(min_id_share=share))
    with pytest.raises(audits.AuditError, match=r"record.min_id_share: "):
        audits.load(path)
