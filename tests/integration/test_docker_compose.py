"""docker-compose.yaml cannot run here (no engine), so its structure is checked instead."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import REPO

COMPOSE = REPO / "docker-compose.yaml"
AIRFLOW_SERVICES = [
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


def test_services_are_the_platform(compose):
    assert set(compose["services"]) == {
        "postgres",
        "kafka-1",
        "kafka-2",
        "kafka-3",
        "toxiproxy",
        "spark-master",
        "spark-worker",
        *AIRFLOW_SERVICES,
    }


def test_airflow_follows_the_official_pattern(compose):
    raw = COMPOSE.read_text()
    assert "x-airflow-common: &airflow-common" in raw
    for name in AIRFLOW_SERVICES:
        assert f"  {name}:\n    <<: *airflow-common" in raw, name
    commands = {n: compose["services"][n].get("command") for n in AIRFLOW_SERVICES[1:]}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    for name in AIRFLOW_SERVICES[1:]:
        deps = compose["services"][name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully"
        assert deps["postgres"]["condition"] == "service_healthy"


def test_same_code_is_mounted_and_spark_default_points_at_the_master(compose):
    sched = compose["services"]["airflow-scheduler"]
    mounts = {v.split(":")[0] for v in sched["volumes"]}
    assert {"./dags", "./plugins", "./spark_apps", "./sql", "./audits", "./modes"} <= mounts
    env = sched["environment"]
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (spark["conn_type"], spark["host"], spark["port"]) == ("spark", "spark://spark-master", 7077)
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert "bootstrap.servers" in json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]


def test_images_are_pinned_and_every_long_running_service_has_a_healthcheck(compose):
    for name, svc in compose["services"].items():
        image = svc.get("image")
        assert image, f"{name} has no image"
        tag = image.rsplit(":", 1)[-1] if ":" in image.split("/")[-1] else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{name}: image {image} is not pinned"
        if name != "airflow-init":
            assert "healthcheck" in svc, f"{name} has no healthcheck"
    assert compose["services"]["kafka-1"]["image"].startswith("apache/kafka:4.")


def test_kafka_is_kraft_with_clients_through_toxiproxy(compose):
    for i in (1, 2, 3):
        env = compose["services"][f"kafka-{i}"]["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_NODE_ID"] == i
        assert env["KAFKA_ADVERTISED_LISTENERS"].startswith(f"CLIENT://toxiproxy:{9091 + i}")
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == 2 and env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3
    proxies = json.loads((REPO / "docker" / "toxiproxy" / "toxiproxy.json").read_text())
    assert [p["upstream"] for p in proxies] == ["kafka-1:19092", "kafka-2:19092", "kafka-3:19092"]


def test_no_secret_is_committed_in_the_compose_file(compose):
    raw = COMPOSE.read_text()
    for var in ("POSTGRES_PASSWORD", "SEMANTICS_DB_PASSWORD", "AIRFLOW_DB_PASSWORD"):
        assert f"${{{var}:?" in raw, f"{var} must come from .env, with a clear error when unset"
    assert not (REPO / ".env").exists() or ".env" in (REPO / ".gitignore").read_text().split()


def test_the_spark_image_matches_the_pinned_pyspark():
    lock = (REPO / "requirements.lock").read_text()
    pinned = re.search(r"^pyspark==([\d.]+)", lock, re.M).group(1)
    image = (REPO / "docker" / "spark" / "Dockerfile").read_text()
    assert f"pyspark=={pinned}" in image
    # The executors' Python runs the Protobuf decoder: the same pandas, pyarrow and protobuf.
    for package in ("pandas", "pyarrow", "protobuf"):
        version = re.search(rf"^{package}==([\d.]+)", lock, re.M).group(1)
        assert f"{package}=={version}" in image, package
    assert f"<spark.version>{pinned}</spark.version>" in (REPO / "local/maven/spark/pom.xml").read_text()


def test_ports_bind_loopback_the_fault_proxy_is_unpublished_and_spark_authenticates(compose):
    """A deployment's hardening (docs/SECURITY.md): nothing published beyond the host, Toxiproxy's
    login-less API not at all, and every Spark daemon and application proves the cluster's secret,
    with the REST submission server (which would not) off."""
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    assert "ports" not in compose["services"]["toxiproxy"]
    for name in ("spark-master", "spark-worker"):
        env = compose["services"][name]["environment"]
        opts = env["SPARK_DAEMON_JAVA_OPTS"].split()
        assert "-Dspark.authenticate=true" in opts and "-Dspark.master.rest.enabled=false" in opts, name
        assert env["_SPARK_AUTH_SECRET"].startswith("${SPARK_AUTH_SECRET:?"), name
    spark = json.loads(compose["services"]["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["extra"]["conf"]["spark.authenticate"] == "true" and spark["password"].startswith(
        "${SPARK_AUTH_SECRET"
    )
