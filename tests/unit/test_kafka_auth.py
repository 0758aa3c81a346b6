"""Managed Kafka's logins from one connection (plumbing/endpoints.py): SASL/OAUTHBEARER with OIDC
client credentials as librdkafka takes them (sasl.oauthbearer.method=oidc) and as the Java client
and Spark's Kafka source take them (the login callback handler, the secret inside the JAAS config,
the token endpoint allowed in the JVM). The stack's OAUTHBEARER listener runs them for real
(tests/integration/test_oauth.py); here, the settings each client gets and what is refused."""

from __future__ import annotations

import json

import pytest

from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing import endpoints
from delivery_semantics.plumbing.endpoints import EndpointError

SECRET = 'oidc-"Secret"\\9'
TOKEN_URL = "https://idp.example/oauth2/token"


def _connection(monkeypatch, **extra):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_CLOUD",
        json.dumps(
            {
                "conn_type": "kafka",
                "login": "orders-audit",
                "password": SECRET,
                "extra": {
                    "bootstrap.servers": "pkc-1.example:9092",
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "OAUTHBEARER",
                    "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
                    "sasl.oauthbearer.scope": "kafka",
                    **extra,
                },
            }
        ),
    )
    return endpoints.kafka_config("kafka_cloud")


def test_librdkafka_gets_the_oidc_client_credentials(monkeypatch):
    conf = _connection(monkeypatch)
    assert conf["sasl.oauthbearer.client.id"] == "orders-audit"
    assert conf["sasl.oauthbearer.client.secret"] == SECRET
    assert "sasl.username" not in conf and "sasl.password" not in conf
    from confluent_kafka import Producer

    Producer(conf)  # librdkafka itself accepts every key (no broker is reached)


def test_the_java_client_fetches_its_token_from_the_same_endpoint_with_the_same_client(monkeypatch):
    java = endpoints.java_client_config(_connection(monkeypatch))
    assert java["sasl.mechanism"] == "OAUTHBEARER"
    assert java["sasl.login.callback.handler.class"] == endpoints.OAUTH_LOGIN_HANDLER
    assert java["sasl.oauthbearer.token.endpoint.url"] == TOKEN_URL
    assert java["sasl.jaas.config"] == (
        f"{endpoints.OAUTH_LOGIN_MODULE} required "
        'clientId="orders-audit" clientSecret="oidc-\\"Secret\\"\\\\9" scope="kafka";'
    )
    assert not [k for k in java if "secret" in k.lower() or k.startswith("sasl.oauthbearer.client")]
    options = endpoints.spark_kafka_options(_connection(monkeypatch))
    assert options["kafka.sasl.login.callback.handler.class"] == endpoints.OAUTH_LOGIN_HANDLER
    assert endpoints.oauth_java_options(java) == [f"-D{endpoints.OAUTH_ALLOWED_URLS}={TOKEN_URL}"]


def test_extensions_become_the_jaas_configs_extension_options(monkeypatch):
    conf = _connection(monkeypatch, **{"sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2"})
    jaas = endpoints.java_client_config(conf)["sasl.jaas.config"]
    assert jaas.endswith('scope="kafka" extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";')
    bad = _connection(monkeypatch, **{"sasl.oauthbearer.extensions": 'a"=1'})
    with pytest.raises(EndpointError, match="extensions"):
        endpoints.java_client_config(bad)


def test_spark_submission_allows_the_token_endpoint_in_both_jvms_and_carries_no_secret(monkeypatch):
    _connection(monkeypatch)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LEDGER_DB",
        json.dumps(
            {"conn_type": "postgres", "host": "db.example", "login": "s", "password": "p-ledger-1", "schema": "s"}
        ),
    )
    monkeypatch.setenv("SEMANTICS_SPARK_JARS", "/opt/jars/kafka-clients-3.9.2.jar")
    env = spark_submit.spark_application_env(kafka_conn_id="kafka_cloud")
    sub = spark_submit.submission(["--audit", "/x/orders.yaml", "--reconciliation-id", "r"], env, master="local[2]")
    allowed = f"-D{endpoints.OAUTH_ALLOWED_URLS}={TOKEN_URL}"
    assert allowed in sub.conf["spark.driver.extraJavaOptions"].split()
    assert allowed in sub.conf["spark.executor.extraJavaOptions"].split()
    cmd = json.dumps(spark_submit.command_of(sub))
    assert "Secret" not in cmd and "p-ledger-1" not in cmd
    assert "Secret" in sub.process_env["SEMANTICS_KAFKA_SPARK_OPTIONS"], "the JAAS config, by environment"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"sasl.oauthbearer.method": "default"}, "sasl.oauthbearer.method oidc"),
        ({"sasl.oauthbearer.token.endpoint.url": ""}, "needs sasl.oauthbearer.token.endpoint.url"),
        ({"sasl.oauthbearer.token.endpoint.url": "https://idp.example/a,file:///etc/passwd"}, "not an http"),
        ({"sasl.oauthbearer.token.endpoint.url": "file:///etc/passwd"}, "not an http"),
    ],
)
def test_an_oauth_connection_the_java_client_cannot_take_is_refused_in_one_line(monkeypatch, extra, said):
    conf = _connection(monkeypatch, **extra)
    with pytest.raises(EndpointError, match=said) as e:
        endpoints.java_client_config(conf)
    assert "\n" not in str(e.value) and SECRET not in str(e.value)


# --------------------------------------------------------------------------- Amazon MSK IAM

ROLE = "arn:aws:iam::123456789012:role/orders-audit"


def _msk(monkeypatch, **extra):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_MSK",
        json.dumps(
            {
                "conn_type": "kafka",
                "extra": {
                    "bootstrap.servers": "b-1.orders.kafka.eu-west-1.amazonaws.com:9098",
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "AWS_MSK_IAM",
                    "aws.region": "eu-west-1",
                    **extra,
                },
            }
        ),
    )
    return endpoints.kafka_config("kafka_msk")


def test_msk_iam_gives_the_jvms_the_iam_login_module(monkeypatch):
    java = endpoints.java_client_config(_msk(monkeypatch))
    assert java == {
        "bootstrap.servers": "b-1.orders.kafka.eu-west-1.amazonaws.com:9098",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "AWS_MSK_IAM",
        "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
        "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
    }
    with_role = endpoints.java_client_config(_msk(monkeypatch, **{"aws.role.arn": ROLE}))
    assert with_role["sasl.jaas.config"] == f'software.amazon.msk.auth.iam.IAMLoginModule required awsRoleArn="{ROLE}";'
    with pytest.raises(EndpointError, match="not an IAM role ARN"):
        endpoints.java_client_config(_msk(monkeypatch, **{"aws.role.arn": 'x" debug="true'}))


def test_msk_iam_gives_librdkafka_a_token_callback_signed_by_the_region(monkeypatch):
    import sys
    import types

    conf = endpoints.librdkafka(_msk(monkeypatch, **{"aws.role.arn": ROLE}))
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and callable(conf["oauth_cb"])
    assert not [k for k in conf if k.startswith("aws.")], "librdkafka refuses keys it does not know"
    with pytest.raises(EndpointError, match=r"delivery-semantics\[msk\]"):
        conf["oauth_cb"]("")
    calls = []
    signer = types.ModuleType("aws_msk_iam_sasl_signer")

    class MSKAuthTokenProvider:  # AWS's signer, which needs AWS credentials: its calls are recorded
        @staticmethod
        def generate_auth_token(region):
            calls.append(("region", region))
            return "signed-by-region", 1_800_000_000_000

        @staticmethod
        def generate_auth_token_from_role_arn(region, role):
            calls.append(("role", region, role))
            return "signed-by-role", 1_800_000_000_000

    signer.MSKAuthTokenProvider = MSKAuthTokenProvider
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", signer)
    assert conf["oauth_cb"]("") == ("signed-by-role", 1_800_000_000.0)
    from confluent_kafka import Producer

    Producer(conf)  # librdkafka takes the settings and sets the callback's token (no broker is reached)
    assert endpoints.librdkafka(_msk(monkeypatch))["oauth_cb"]("") == ("signed-by-region", 1_800_000_000.0)
    assert calls[0] == ("role", "eu-west-1", ROLE) and calls[-1] == ("region", "eu-west-1")
    assert endpoints.librdkafka({"bootstrap.servers": "x:9092"}) == {"bootstrap.servers": "x:9092"}
    with pytest.raises(EndpointError, match=r"aws\.region"):
        endpoints.librdkafka({"sasl.mechanism": "AWS_MSK_IAM"})
    for hostile in ("eu-west-1\nX", "eu-west-1.evil.example", "../../etc", "eu-west-1 -Dx=y"):
        with pytest.raises(EndpointError, match="not an AWS region name"):
            endpoints.librdkafka({"sasl.mechanism": "AWS_MSK_IAM", "aws.region": hostile})
