"""docker-compose.yaml cannot run here (no engine), so its structure is checked instead."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import REPO

import devstack

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


# Each service of the local stack (local/devstack/services.py) and the compose services that are it.
AS_COMPOSE = {
    "postgres": {"postgres"},
    "postgres-cdc": {"postgres-cdc"},
    "mariadb": {"mariadb"},
    "tls": {"certs"},
    "toxiproxy": {"toxiproxy"},
    "oidc": {"oidc"},
    "kafka": {"kafka-1", "kafka-2", "kafka-3", "kafka-users"},
    "connect": {"connect-1", "connect-2", "connect-eos-1", "connect-eos-2"},
    "spark": {"spark-master", "spark-worker"},
    "spark-connect": {"spark-connect"},
}
# Beside the registry: Airflow's processes, and the mail catcher the smtp_alerts connection names
# (local/devstack/mail.py, started by the notification tests).
BESIDE = {*AIRFLOW_SERVICES, "mail"}


def _env(compose, service="airflow-scheduler") -> dict:
    return compose["services"][service]["environment"]


def _connection(compose, conn_id: str) -> dict:
    return json.loads(_env(compose)[f"AIRFLOW_CONN_{conn_id.upper()}"])


def test_every_service_of_the_local_stack_is_in_the_compose_file_and_nothing_else(compose):
    assert set(AS_COMPOSE) == {s.name for s in devstack.services.SERVICES}, "a stack service without its compose twin"
    assert set(compose["services"]) == set().union(*AS_COMPOSE.values()) | BESIDE


def test_airflow_has_every_connection_the_local_stack_publishes(compose):
    published = set(re.findall(r"^export AIRFLOW_CONN_(\w+)=", (REPO / "var" / "stack.env").read_text(), re.M))
    given = {k.removeprefix("AIRFLOW_CONN_") for k in _env(compose) if k.startswith("AIRFLOW_CONN_")}
    assert given == published
    for conn_id in ("kafka_connect", "kafka_connect_eos"):
        conn = _connection(compose, conn_id)
        hosts = [conn["host"], *(u.split("//")[1].split(":")[0] for u in conn["extra"]["fallback_urls"])]
        cluster = conn["extra"]["group.id"].removeprefix("semantics-")
        for host in hosts:  # a worker's REST id (host:port) is its compose service: the nemesis finds it so
            env = _env(compose, host)
            assert (env["CONNECT_CLUSTER"], compose["services"][host]["hostname"]) == (cluster, host)
        assert _env(compose, hosts[0])["CONNECT_EXACTLY_ONCE"] == ("enabled" if conn_id.endswith("eos") else "disabled")
    for conn_id, port in (("kafka_secure", 29091), ("kafka_mtls", 39091), ("kafka_oauth", 49091)):
        servers = _connection(compose, conn_id)["extra"]["bootstrap.servers"]
        assert servers == ",".join(f"kafka-{i}:{port + i}" for i in (1, 2, 3)), conn_id


def test_the_link_proxies_are_the_local_stacks_and_each_broker_reaches_its_peers_through_its_own(compose):
    """One proxy per direction and listener, as the local stack's (devstack.kafka.LINKS) and by the
    nemesis's names: broker S resolves each peer T to Toxiproxy's address in S's own links network,
    where the proxy link-S-T-<listener> listens on T's advertised port and forwards to T."""
    proxies = {p["name"]: p for p in json.loads((REPO / "docker" / "toxiproxy" / "toxiproxy.json").read_text())}
    links = {link.name: link for link in devstack.kafka.LINKS}
    assert set(proxies) == set(links) | {f"broker-{i}" for i in (1, 2, 3)}
    toxiproxy = compose["services"]["toxiproxy"]["networks"]
    for name, link in links.items():
        s, t = link.source.node_id, link.target.node_id
        address = toxiproxy[f"links-{s}"]["ipv4_address"]
        port = link.port
        assert proxies[name]["listen"] == f"{address}:{port}" and proxies[name]["upstream"] == f"kafka-{t}:{port}"
        broker = compose["services"][f"kafka-{s}"]
        assert f"kafka-{t}:{address}" in broker["extra_hosts"] and f"links-{s}" in broker["networks"]
        env = _env(compose, f"kafka-{t}")
        listener = "INTERNAL" if link.listener == "internal" else "CONTROLLER"
        assert f"{listener}://:{port}" in env["KAFKA_LISTENERS"].split(",")
        if listener == "INTERNAL":
            assert f"INTERNAL://kafka-{t}:{port}" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
        else:
            assert f"{t}@kafka-{t}:{port}" in env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    for i in (1, 2, 3):
        assert proxies[f"broker-{i}"]["upstream"] == f"kafka-{i}:19092"
        assert f"CLIENT://toxiproxy:{9091 + i}" in _env(compose, f"kafka-{i}")["KAFKA_ADVERTISED_LISTENERS"]


def test_the_nemesis_reaches_the_engine_and_only_the_containers_labelled_for_it(compose):
    env = _env(compose)
    assert env["SEMANTICS_NEMESIS_BACKEND"] == "docker" and env["SEMANTICS_COMPOSE_PROJECT"] == compose["name"]
    assert f"{env['SEMANTICS_DOCKER_SOCKET']}:/var/run/docker.sock".startswith("/var/run/docker.sock")
    assert "/var/run/docker.sock:/var/run/docker.sock" in compose["services"]["airflow-scheduler"]["volumes"]
    assert compose["services"]["airflow-scheduler"]["group_add"], "the socket's group"
    roles = {n: s.get("labels", {}).get("semantics.nemesis") for n, s in compose["services"].items()}
    assert {n: r for n, r in roles.items() if r} == {
        **{f"kafka-{i}": "broker" for i in (1, 2, 3)},
        **{w: "connect-worker" for w in AS_COMPOSE["connect"]},
        "postgres-cdc": "outbox-db",
    }
    mounts = {n: [str(v) for v in s.get("volumes", [])] for n, s in compose["services"].items()}
    assert [n for n, vs in mounts.items() if any("docker.sock" in v for v in vs)] == ["airflow-scheduler"]


def test_kafka_logins_match_the_local_stacks_listeners(compose):
    env = _env(compose, "kafka-1")
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols == {
        "CLIENT": "PLAINTEXT",
        "SECURE": "SASL_SSL",
        "MTLS": "SSL",
        "OAUTH": "SASL_SSL",
        "INTERNAL": "PLAINTEXT",
        "CONTROLLER": "PLAINTEXT",
    }
    assert env["KAFKA_LISTENER_NAME_SECURE_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-512"
    assert env["KAFKA_LISTENER_NAME_MTLS_SSL_CLIENT_AUTH"] == "required"
    assert env["KAFKA_SASL_OAUTHBEARER_JWT_VALIDATOR_CLASS"].endswith(".BrokerJwtValidator"), "signatures checked"
    oauth = _connection(compose, "kafka_oauth")
    issuer = env["KAFKA_SASL_OAUTHBEARER_EXPECTED_ISSUER"]
    assert oauth["extra"]["sasl.oauthbearer.token.endpoint.url"] == f"{issuer}/protocol/openid-connect/token"
    assert env["KAFKA_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL"] in env["KAFKA_OPTS"], "the brokers may fetch the keys"
    realm = json.loads((REPO / "docker" / "keycloak" / "semantics-realm.json").read_text())
    [client] = realm["clients"]
    assert (client["clientId"], client["secret"]) == (oauth["login"], "${OIDC_CLIENT_SECRET}")
    assert issuer.endswith(f"/realms/{realm['realm']}")


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
        if svc.get("restart") != "no":  # a one-shot (init, certificates, users) completes instead
            assert "healthcheck" in svc, f"{name} has no healthcheck"
    assert compose["services"]["kafka-1"]["image"].startswith("apache/kafka:4.")


def test_kafka_is_kraft(compose):
    for i in (1, 2, 3):
        env = _env(compose, f"kafka-{i}")
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_NODE_ID"] == i
        assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == 2 and env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3


def test_no_secret_is_committed_in_the_compose_file(compose):
    """Every password is a variable compose refuses to start without, and docker/.env.example lists
    each one (with a placeholder, never a value)."""
    raw = COMPOSE.read_text()
    needed = set(re.findall(r"\$\{(\w+):\?", raw))
    assert not re.findall(r"\$\{(\w+)\}", raw.replace("$${", "")), "every variable fails loudly when unset"
    example = dict(
        ln.split("=", 1)
        for ln in (REPO / "docker" / ".env.example").read_text().splitlines()
        if "=" in ln and ln[0] != "#"
    )
    assert needed <= set(example), f"not in docker/.env.example: {sorted(needed - set(example))}"
    assert {k for k, v in example.items() if k in needed and k.endswith(("PASSWORD", "SECRET", "TOKEN"))} == {
        k for k in needed if k.endswith(("PASSWORD", "SECRET", "TOKEN"))
    }
    assert all(v == "change-me" for k, v in example.items() if k.endswith(("PASSWORD", "SECRET", "TOKEN")))
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
