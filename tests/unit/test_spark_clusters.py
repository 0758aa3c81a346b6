"""Spark where teams run it (plumbing/spark_clusters.py): on YARN and Kubernetes the driver runs in
the cluster, and what it reads (the results database, Kafka's SASL login, an audit's stores) reaches
it by reference: a credentials file shipped with the application, or a Kubernetes Secret named by
secretKeyRef. Neither cluster runs here, so these hold the exact spark-submit arguments and
environment each would get, through the CLI's command and through the Spark provider's own hook:
no secret in any of them, every secret referenced, and the audit file shipped."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
from pathlib import Path

import pytest
from conftest import REPO

from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing import spark_clusters
from delivery_semantics.plumbing.endpoints import EndpointError

SASL_PASSWORD = "kafka-Secret-9f2e"
LEDGER_PASSWORD = "ledger-Secret-41aa"
OUTBOX_PASSWORD = "outbox-Secret-77c1"
SECRETS = (SASL_PASSWORD, LEDGER_PASSWORD, OUTBOX_PASSWORD)
UPLOAD = "s3a://team-bucket/spark-uploads"


@pytest.fixture
def connections(monkeypatch, tmp_path):
    conns = {
        "kafka_team": {
            "conn_type": "kafka",
            "login": "orders-svc",
            "password": SASL_PASSWORD,
            "extra": {
                "bootstrap.servers": "b1.example:9096",
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512",
            },
        },
        "ledger_db": {
            "conn_type": "postgres",
            "host": "ledger.example",
            "port": 5432,
            "login": "semantics",
            "password": LEDGER_PASSWORD,
            "schema": "semantics",
        },
        "outbox_team": {
            "conn_type": "postgres",
            "host": "orders-db.example",
            "port": 5432,
            "login": "reader",
            "password": OUTBOX_PASSWORD,
            "schema": "orders",
        },
        "spark_k8s": {
            "conn_type": "spark",
            "host": "k8s://https://kube.example",
            "port": 6443,
            "extra": {
                "conf": {
                    "spark.kubernetes.namespace": "team-orders",
                    "spark.kubernetes.container.image": "registry.example/spark-semantics:4.2.0",
                    "spark.kubernetes.file.upload.path": UPLOAD,
                }
            },
        },
        "spark_yarn": {"conn_type": "spark", "host": "yarn", "extra": {"queue": "audits"}},
    }
    for conn_id, c in conns.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(c))
    monkeypatch.setenv("SEMANTICS_SPARK_JARS", "/opt/spark-jars/kafka-clients-4.1.1.jar,/opt/spark-jars/delta.jar")
    monkeypatch.setenv("SEMANTICS_SPARK_READER_JAR", "/opt/semantics-java/platform-reader.jar")
    monkeypatch.setenv("SEMANTICS_KEYSTORE_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    audit = tmp_path / "team" / "orders.yaml"
    audit.parent.mkdir()
    audit.write_text("topic: orders\n")
    return audit


def _app_env():
    return spark_submit.spark_application_env(kafka_conn_id="kafka_team", source_conn_id="outbox_team")


def _assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
        assert base64.b64encode(secret.encode()).decode() not in text


def test_on_kubernetes_every_secret_reaches_the_driver_through_a_secret_and_none_is_an_argument(connections):
    args = ["--audit", str(connections), "--reconciliation-id", "audit:orders:r1"]
    sub = spark_submit.submission(args, _app_env(), spark_conn_id="spark_k8s")
    cmd = spark_submit.command_of(sub)
    _assert_no_secret(json.dumps(cmd))
    assert sub.process_env == {}, "spark-submit's own environment holds nothing of the application's"
    assert cmd[cmd.index("--master") + 1] == "k8s://https://kube.example:6443"
    assert cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert cmd[cmd.index("--files") + 1] == str(connections), "the audit file, shipped"
    assert cmd[-4:] == ["--audit", "orders.yaml", "--reconciliation-id", "audit:orders:r1"], "found by name"
    secret = sub.secret
    name = secret["metadata"]["name"]
    assert secret["metadata"]["namespace"] == "team-orders" and secret["kind"] == "Secret"
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    refs = {
        a.split("=", 1)[0].removeprefix("--conf ").removeprefix("spark.kubernetes.driver.secretKeyRef."): a.split(
            "=", 1
        )[1]
        for a in cmd
        if a.startswith("spark.kubernetes.driver.secretKeyRef.")
    }
    assert refs == {k: f"{name}:{k}" for k in values}, "each secret by reference, each reference a secret"
    assert values["SEMANTICS_JDBC_PASSWORD"] == LEDGER_PASSWORD
    assert values["SEMANTICS_SOURCE_JDBC_PASSWORD"] == OUTBOX_PASSWORD
    assert SASL_PASSWORD in values["SEMANTICS_KAFKA_SPARK_OPTIONS"], "the JAAS config built at submit time"
    assert "PYTHONPATH" not in values and "PYSPARK_PYTHON" not in values, "the worker's own paths stay here"
    driver_env = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in cmd if a.startswith("spark.kubernetes.driverEnv.")}
    assert set(driver_env) == {
        "spark.kubernetes.driverEnv.SEMANTICS_LAKEHOUSE",
        "spark.kubernetes.driverEnv.SEMANTICS_SOURCE_DIALECT",
    }


def test_on_yarn_the_secrets_travel_in_a_private_credentials_file_the_driver_loads(connections, tmp_path, monkeypatch):
    args = ["--audit", str(connections), "--reconciliation-id", "audit:orders:r1"]
    sub = spark_submit.submission(args, _app_env(), spark_conn_id="spark_yarn")
    cmd = spark_submit.command_of(sub)
    _assert_no_secret(json.dumps(cmd))
    assert sub.process_env == {} and sub.secret is None
    assert cmd[cmd.index("--master") + 1] == "yarn" and cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    files = cmd[cmd.index("--files") + 1].split(",")
    assert files[0] == str(connections)
    credentials, _, alias = files[1].partition("#")
    assert alias == spark_clusters.APPLICATION_ENV_FILE
    assert stat.S_IMODE(os.stat(credentials).st_mode) == 0o600
    assert f"spark.yarn.appMasterEnv.{spark_clusters.APPLICATION_ENV}={alias}" in cmd
    # The driver, in its container's working directory where YARN put the file under its alias:
    driver = tmp_path / "container"
    driver.mkdir()
    (driver / alias).write_bytes(Path(credentials).read_bytes())
    monkeypatch.chdir(driver)
    monkeypatch.setenv(spark_clusters.APPLICATION_ENV, alias)
    monkeypatch.delenv("SEMANTICS_JDBC_PASSWORD", raising=False)
    spark_clusters.load_application_env()
    assert os.environ["SEMANTICS_JDBC_PASSWORD"] == LEDGER_PASSWORD
    with spark_clusters.submitted(sub):
        pass
    assert not Path(credentials).exists(), "removed once the application was submitted"


def test_a_packed_environment_for_native_dependencies_reaches_yarn_by_the_connections_conf(connections, monkeypatch):
    """docs/DEPLOY.md: an environment packed once (venv-pack) with the package's native requirements,
    named by `spark.archives` and `spark.pyspark.python` in the Spark connection's conf, is what the
    driver and executors run; this worker's own Python is not sent."""
    archive = "hdfs:///envs/delivery-semantics-0.67.0.tar.gz#environment"
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_YARN",
        json.dumps(
            {
                "conn_type": "spark",
                "host": "yarn",
                "extra": {"conf": {"spark.archives": archive, "spark.pyspark.python": "./environment/bin/python"}},
            }
        ),
    )
    monkeypatch.setenv("PYSPARK_PYTHON", "/home/airflow/.venv/bin/python")
    sub = spark_submit.submission(["--audit", str(connections)], _app_env(), spark_conn_id="spark_yarn")
    cmd = spark_submit.command_of(sub)
    assert f"spark.archives={archive}" in cmd and "spark.pyspark.python=./environment/bin/python" in cmd
    assert not [a for a in cmd if "/home/airflow/.venv" in a], "the worker's Python stays on the worker"


def test_the_spark_providers_own_hook_builds_a_yarn_command_with_no_secret(connections):
    """Through Airflow: the audit DAG's operator, completed as its task would be, then the command
    the provider's SparkSubmitHook runs, and the environment it gives that process."""
    from delivery_semantics.entry.dag_factory import PlatformSparkSubmitOperator

    op = PlatformSparkSubmitOperator(
        task_id="reconcile",
        app="reconcile.py",
        conn_id="spark_yarn",
        application_args=["--audit", str(connections), "--reconciliation-id", "audit:orders:r1"],
        kafka_conn_id="kafka_team",
        source_conn_id="outbox_team",
    )
    sub = spark_submit.prepare_spark_submit(op)
    hook = op._get_hook()
    cmd = hook._build_spark_submit_command(op.application)
    _assert_no_secret(json.dumps(cmd) + json.dumps(hook._env or {}))
    assert "--deploy-mode" in cmd and cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert f"{sub.credentials_file}#{spark_clusters.APPLICATION_ENV_FILE}" in cmd[cmd.index("--files") + 1]
    assert cmd[-4:] == ["--audit", "orders.yaml", "--reconciliation-id", "audit:orders:r1"]
    assert cmd[-5].endswith("spark_apps/reconcile.py")
    sub.credentials_file.unlink()


def test_kubernetes_without_an_upload_folder_is_refused_in_one_line(connections, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_K8S", json.dumps({"conn_type": "spark", "host": "k8s://https://kube.example", "port": 6443})
    )
    with pytest.raises(EndpointError, match=r"spark\.kubernetes\.file\.upload\.path") as e:
        spark_submit.submission(["--run-id", "r"], {}, spark_conn_id="spark_k8s")
    assert "\n" not in str(e.value)


def test_client_mode_keeps_the_environment_in_the_process(connections):
    sub = spark_submit.submission(["--run-id", "r"], _app_env(), master="local[2]")
    assert sub.deploy_mode == "client" and sub.files == [] and sub.secret is None
    assert sub.process_env["SEMANTICS_JDBC_PASSWORD"] == LEDGER_PASSWORD
    _assert_no_secret(json.dumps(spark_submit.command_of(sub)))


def test_the_application_finds_the_package_in_its_zip_when_no_folder_holds_it():
    text = (REPO / "spark_apps" / "reconcile.py").read_text()
    assert "sys.path[:] = _FOLDERS + _ZIPPED" in text and "spark_clusters.load_application_env()" in text


def test_spark_connect_runs_the_application_as_python_with_the_token_in_its_environment(connections, monkeypatch):
    token = "connect-Token-55e1"
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CONNECT",
        json.dumps({"conn_type": "spark", "host": "sc://localhost", "port": 15002, "password": token}),
    )
    monkeypatch.delenv("SEMANTICS_SPARK_JARS")  # a worker with Python only: no jars, no JDK
    args = ["--audit", str(connections), "--reconciliation-id", "audit:orders:r1"]
    sub = spark_submit.submission(args, _app_env(), spark_conn_id="spark_connect")
    cmd = spark_submit.command_of(sub)
    assert sub.connect and cmd[0] == sys.executable, "this interpreter, no spark-submit"
    assert cmd[1].endswith("spark_apps/reconcile.py") and cmd[2:] == args, "the audit file is this worker's"
    assert "spark-submit" not in json.dumps(cmd) and token not in json.dumps(cmd)
    _assert_no_secret(json.dumps(cmd))
    env = sub.process_env
    assert env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] == token and env["SPARK_REMOTE"] == "sc://localhost:15002"
    assert env["SEMANTICS_JDBC_PASSWORD"] == LEDGER_PASSWORD
    assert Path(env[spark_clusters.CONNECT_PY_FILES]).name.startswith("semantics-py-")
    session = json.loads(env[spark_clusters.CONNECT_SESSION_CONF])
    assert session["spark.sql.session.timeZone"] == "UTC"
    assert [k for k in session if spark_clusters.session_setting(k)] and not spark_clusters.session_setting(
        "spark.sql.extensions"
    )
    with pytest.raises(EndpointError, match="password field"):
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_CONNECT",
            json.dumps({"conn_type": "spark", "host": "sc://h:1/;token=x", "password": token}),
        )
        spark_submit.submission(args, {}, spark_conn_id="spark_connect")
