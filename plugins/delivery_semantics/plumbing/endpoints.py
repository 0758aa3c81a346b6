"""Where Kafka, the ledger database and Spark are: resolved from Airflow connections.

Connections come from `AIRFLOW_CONN_<ID>` (JSON or URI) when set, which is how the local stack,
the CLI and the tests configure them, and otherwise from Airflow itself (metadata DB or a
secrets backend) when running inside a task. Nothing here logs a password.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from delivery_semantics import locations

KAFKA_CONN_ID = "kafka_default"
LEDGER_CONN_ID = "ledger_db"
SPARK_CONN_ID = "spark_default"
TOXIPROXY_CONN_ID = "toxiproxy_default"


class EndpointError(RuntimeError):
    """A connection is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Connection:
    conn_id: str
    conn_type: str = ""
    host: str = ""
    port: int | None = None
    login: str = ""
    password: str = field(default="", repr=False)
    schema: str = ""
    extra: dict = field(default_factory=dict)


def get_connection(conn_id: str) -> Connection:
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw:
        return _parse(conn_id, raw)
    try:
        from airflow.sdk import BaseHook
    except ImportError:
        raise EndpointError(f"connection {conn_id!r} is not set: export AIRFLOW_CONN_{conn_id.upper()}") from None
    try:
        c = BaseHook.get_connection(conn_id)
    except Exception as e:
        raise EndpointError(f"connection {conn_id!r} is not defined in Airflow: {type(e).__name__}") from None
    return _ours(conn_id, c)


def _parse(conn_id: str, raw: str) -> Connection:
    """An AIRFLOW_CONN_* value, JSON or URI, read by Airflow's own Connection class (which also
    registers its secrets with Airflow's log masker)."""
    from airflow.sdk import Connection as AirflowConnection

    raw = raw.strip()
    try:
        c = (
            AirflowConnection.from_json(raw, conn_id=conn_id)
            if raw.startswith("{")
            else AirflowConnection.from_uri(raw, conn_id=conn_id)
        )
        extra = c.extra_dejson
    except Exception as e:  # the message could quote the value: name the variable only
        raise EndpointError(
            f"AIRFLOW_CONN_{conn_id.upper()} cannot be parsed as a connection (JSON or URI): {type(e).__name__}"
        ) from None
    return _ours(conn_id, c, extra)


def _ours(conn_id: str, c, extra: dict | None = None) -> Connection:
    return Connection(
        conn_id,
        c.conn_type or "",
        c.host or "",
        int(c.port) if c.port else None,
        c.login or "",
        c.password or "",
        c.schema or "",
        extra if extra is not None else (c.extra_dejson or {}),
    )


# --------------------------------------------------------------------------- Kafka


def kafka_config(conn_id: str = KAFKA_CONN_ID) -> dict[str, str]:
    """librdkafka client settings from the connection. Its extra holds librdkafka keys as-is
    (`security.protocol`, `sasl.mechanism`, `ssl.ca.location`, `ssl.certificate.location`,
    `ssl.key.location`, `sasl.oauthbearer.token.endpoint.url`, ...), its login the SASL user (under
    OAUTHBEARER the OIDC client id), and its password field the one secret: the SASL password, under
    OAUTHBEARER the OIDC client secret, or under security.protocol SSL the client key's password."""
    c = get_connection(conn_id)
    if c.conn_type != "kafka":
        # A database's or a notifier's password must never become a SASL password sent to a broker.
        raise EndpointError(f"connection {conn_id!r} is of type {c.conn_type or '(none)'!r}, not a kafka connection")
    conf = {str(k): str(v) for k, v in c.extra.items()}
    if "bootstrap.servers" not in conf:
        if not c.host:
            raise EndpointError(f"connection {conn_id!r} names no bootstrap.servers (extra) or host")
        conf["bootstrap.servers"] = f"{c.host}:{c.port or 9092}"
    oauth = _mechanism(conf) == "OAUTHBEARER"
    if c.login:
        conf.setdefault("sasl.oauthbearer.client.id" if oauth else "sasl.username", c.login)
    if c.password and conf.get("security.protocol", "").upper() == "SSL":
        conf["ssl.key.password"] = c.password
    elif c.password:
        conf["sasl.oauthbearer.client.secret" if oauth else "sasl.password"] = c.password
    return conf


def _mechanism(conf: dict[str, str]) -> str:
    return (conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "GSSAPI").upper()


# Amazon MSK's IAM login (`sasl.mechanism: AWS_MSK_IAM`, `aws.region`, optionally `aws.role.arn`): what
# apache-airflow-providers-apache-kafka does, the connection's extra naming the region instead of a
# callback. librdkafka signs a token with aws-msk-iam-sasl-signer-python (the `msk` extra) under
# OAUTHBEARER; the JVMs take the MSK IAM login module (the aws-msk-iam-auth jar on their class path).
MSK_IAM = "AWS_MSK_IAM"
MSK_IAM_KEYS = ("aws.region", "aws.role.arn")
MSK_IAM_JAVA = {
    "sasl.mechanism": MSK_IAM,
    "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
}


def librdkafka(conf: dict) -> dict:
    """A connection's settings as librdkafka takes them, where a client is made: MSK IAM becomes
    OAUTHBEARER with a token callback (a callable, which no environment or JSON carries); any other
    login is librdkafka's own already."""
    if _mechanism(conf) != MSK_IAM:
        return conf
    region, role = conf.get("aws.region"), conf.get("aws.role.arn")
    if not region:
        raise EndpointError("sasl.mechanism AWS_MSK_IAM needs aws.region in the connection's extra")
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d{1,2}", region):
        raise EndpointError("aws.region is not an AWS region name (eu-west-1, us-gov-west-1, ...)")

    def token(_config: str) -> tuple[str, float]:
        try:
            from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
        except ImportError:
            raise EndpointError(
                "AWS_MSK_IAM needs aws-msk-iam-sasl-signer-python (pip install 'delivery-semantics[msk]')"
            ) from None
        if role:
            signed, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(region, role)
        else:
            signed, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
        return signed, expiry_ms / 1000

    out = {k: v for k, v in conf.items() if k not in MSK_IAM_KEYS and k not in ("sasl.mechanism", "sasl.mechanisms")}
    return {**out, "sasl.mechanism": "OAUTHBEARER", "oauth_cb": token}


OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
# The JVM system property without which Kafka 4's clients fetch no token (KIP-1139's allowlist).
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


def oauth_java_options(conf: dict[str, str]) -> list[str]:
    """The JVM options a Java client of this connection needs (the token endpoint allowed), or none."""
    url = conf.get("sasl.oauthbearer.token.endpoint.url")
    if _mechanism(conf) != "OAUTHBEARER" or not url:
        return []
    if not _URL.fullmatch(url):
        raise EndpointError("sasl.oauthbearer.token.endpoint.url is not an http(s) URL without spaces or commas")
    return [f"-D{OAUTH_ALLOWED_URLS}={url}"]


_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+;=%-]+")


_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Keys with the same name and meaning in librdkafka and the Java client.
_JAVA_SAME_KEYS = {
    "bootstrap.servers",
    "security.protocol",
    "sasl.mechanism",
    "ssl.endpoint.identification.algorithm",
    "client.id",
    "client.rack",
}


def spark_kafka_options(conf: dict[str, str]) -> dict[str, str]:
    """librdkafka settings as options of Spark's Kafka source: the Java client's, `kafka.` prefix."""
    return {f"kafka.{k}": v for k, v in java_client_config(conf).items()}


def java_client_config(conf: dict[str, str]) -> dict[str, str]:
    """A connection's librdkafka settings as the Java client's (Spark's Kafka source, the Java load
    client). The SASL credentials become `sasl.jaas.config`, built here when the client starts: the
    result holds a secret and travels by environment or stdin only. Tuning keys of librdkafka's own
    are left out; a security setting the Java client cannot take is refused rather than dropped."""
    conf = {("sasl.mechanism" if k == "sasl.mechanisms" else k): v for k, v in conf.items()}
    out = {k: v for k, v in conf.items() if k in _JAVA_SAME_KEYS}
    if "ssl.ca.location" in conf:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = conf["ssl.ca.location"]
    if "ssl.certificate.location" in conf or "ssl.key.location" in conf:
        out.update(
            client_keystore(
                conf.get("ssl.certificate.location"), conf.get("ssl.key.location"), conf.get("ssl.key.password")
            )
        )
    protocol = conf.get("security.protocol", "PLAINTEXT").upper()
    if protocol.startswith("SASL") and _mechanism(conf) == "OAUTHBEARER":
        out.update(_oauth_java(conf))
    elif protocol.startswith("SASL") and _mechanism(conf) == MSK_IAM:
        role = conf.get("aws.role.arn")
        if role and not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", role):
            raise EndpointError("aws.role.arn is not an IAM role ARN")
        module = "software.amazon.msk.auth.iam.IAMLoginModule required"
        out.update(MSK_IAM_JAVA, **{"sasl.jaas.config": f'{module} awsRoleArn="{role}";' if role else f"{module};"})
    elif protocol.startswith("SASL"):
        mechanism = _mechanism(conf)
        if mechanism not in _JAAS_MODULES:
            raise EndpointError(f"sasl.mechanism {mechanism} is not supported: use one of {', '.join(_JAAS_MODULES)}")
        if not conf.get("sasl.username") or not conf.get("sasl.password"):
            raise EndpointError("SASL needs a user (the connection's login) and a password (its password field)")
        user, password = (conf[k].replace("\\", "\\\\").replace('"', '\\"') for k in ("sasl.username", "sasl.password"))
        out["sasl.jaas.config"] = f'{_JAAS_MODULES[mechanism]} required username="{user}" password="{password}";'
    return out


def _oauth_java(conf: dict[str, str]) -> dict[str, str]:
    """OIDC client credentials (librdkafka's `sasl.oauthbearer.method=oidc` settings) as the Java
    client's: the login callback handler fetches the token from the same endpoint with the same
    client; the secret is in the JAAS config, built here."""
    if (conf.get("sasl.oauthbearer.method") or "").lower() != "oidc":
        raise EndpointError(
            "sasl.mechanism OAUTHBEARER is supported with sasl.oauthbearer.method oidc (client credentials)"
        )
    missing = [
        k
        for k in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret")
        if not conf.get(k)
    ]
    if missing:
        raise EndpointError(
            f"OAUTHBEARER needs {', '.join(missing)} (the client id is the connection's login, its secret the password)"
        )
    oauth_java_options(conf)  # the endpoint is a plain URL
    quoted = lambda v: v.replace("\\", "\\\\").replace('"', '\\"')
    options = {"clientId": conf["sasl.oauthbearer.client.id"], "clientSecret": conf["sasl.oauthbearer.client.secret"]}
    if conf.get("sasl.oauthbearer.scope"):
        options["scope"] = conf["sasl.oauthbearer.scope"]
    # librdkafka's `key=value,key=value` extensions (Confluent Cloud's logicalCluster and identityPoolId)
    # are the JAAS config's extension_<key> options.
    for pair in filter(None, (conf.get("sasl.oauthbearer.extensions") or "").split(",")):
        key, _, value = pair.partition("=")
        if not re.fullmatch(r"[A-Za-z]+", key.strip()):
            raise EndpointError("sasl.oauthbearer.extensions: each is key=value, the key letters only")
        options[f"extension_{key.strip()}"] = value.strip()
    jaas = " ".join(f'{k}="{quoted(v)}"' for k, v in options.items())
    return {
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class": OAUTH_LOGIN_HANDLER,
        "sasl.oauthbearer.token.endpoint.url": conf["sasl.oauthbearer.token.endpoint.url"],
        "sasl.jaas.config": f"{OAUTH_LOGIN_MODULE} required {jaas};",
    }


def private_dir(name: str, path: Path | None = None) -> Path:
    """A folder only this user may enter (by default `semantics-<name>-<uid>` in the temporary
    folder), made so (0700) or, when it is there already, used only if it is a real folder of this
    user's with no access for others: another local user could otherwise plant a file the platform
    runs or reads with secrets."""
    path = path or Path(tempfile.gettempdir()) / f"semantics-{name}-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise EndpointError(
            f"{path}: not a private folder of this user's (mode {stat.S_IMODE(st.st_mode):o}, owner {st.st_uid}): "
            "make it 0700, or remove it"
        )
    return path


def keystore_dir() -> Path:
    configured = locations.setting("keystore_dir")
    return private_dir("keystores", Path(configured) if configured else None)


def client_keystore(cert_path: str | None, key_path: str | None, key_password: str | None) -> dict[str, str]:
    """A TLS client certificate and key (PEM, as librdkafka takes them) as the Java client's PKCS12
    keystore settings. The keystore is written when a client starts (mode 600, in a folder of mode
    700: SEMANTICS_KEYSTORE_DIR, else the temporary folder), once per key: its name and its
    password are derived from the key, so no password is stored and a restart finds the same
    file. The settings hold that password: they travel by environment or stdin only."""
    import hmac

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    if not cert_path or not key_path:
        raise EndpointError("a TLS client certificate needs both ssl.certificate.location and ssl.key.location")
    try:
        certs = x509.load_pem_x509_certificates(Path(cert_path).read_bytes())
    except (OSError, ValueError) as e:
        raise EndpointError(
            f"ssl.certificate.location: {cert_path}: {type(e).__name__}: not a PEM certificate"
        ) from None
    try:
        key = serialization.load_pem_private_key(
            Path(key_path).read_bytes(), key_password.encode() if key_password else None
        )
    except OSError as e:
        raise EndpointError(f"ssl.key.location: {key_path}: {e.strerror}") from None
    except (ValueError, TypeError):
        raise EndpointError(
            f"ssl.key.location: {key_path}: the key cannot be read with the connection's password "
            "(wrong password, none given for an encrypted key, or not a PEM key)"
        ) from None
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    digest = hmac.new(
        b"delivery-semantics keystore",
        der + b"".join(c.public_bytes(serialization.Encoding.DER) for c in certs),
        hashlib.sha256,
    ).hexdigest()
    name, password = digest[:16], digest[16:48]
    folder = keystore_dir()
    path = folder / f"client-{name}.p12"
    if not path.exists():
        blob = pkcs12.serialize_key_and_certificates(
            b"client", key, certs[0], certs[1:] or None, serialization.BestAvailableEncryption(password.encode())
        )
        tmp = folder / f".{path.name}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(path),
        "ssl.keystore.password": password,
        "ssl.key.password": password,
    }


def mask_secrets(conf: dict) -> dict:
    """The config as stored with a run: secret values replaced."""
    return {
        k: ("****" if any(s in k for s in ("password", "secret", "sasl.oauthbearer", "ssl.key", "jaas")) else v)
        for k, v in conf.items()
    }


# --------------------------------------------------------------------------- PostgreSQL


@dataclass(frozen=True)
class Database:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    @property
    def sqlalchemy_url(self) -> str:
        from sqlalchemy.engine import URL

        return URL.create(
            "postgresql+psycopg2", self.user, self.password, self.host, self.port, self.database
        ).render_as_string(hide_password=False)

    @property
    def jdbc_url(self) -> str:
        """PostgreSQL's, the platform's own database; a team's store in another dialect makes its own
        (audit/stores)."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    def psycopg2_kwargs(self) -> dict:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "dbname": self.database,
            "connect_timeout": 5,
        }

    def spark_env(self, prefix: str = "SEMANTICS_JDBC", jdbc_url: str | None = None) -> dict[str, str]:
        """How a Spark application receives a database: environment, never arguments."""
        url = jdbc_url or self.jdbc_url
        return {f"{prefix}_URL": url, f"{prefix}_USER": self.user, f"{prefix}_PASSWORD": self.password}


def database(conn_id: str, default_port: int = 5432) -> Database:
    """A database from its connection: the ledger's (PostgreSQL), or a team's own (an outbox or a
    sink), whose store says its dialect's port (audit/stores)."""
    c = get_connection(conn_id)
    if not c.host or not c.schema:
        raise EndpointError(f"connection {conn_id!r} needs a host and a schema (the database name)")
    # Both go into a JDBC URL as they are: a host or a database name carrying `?`, `&`, `/` or `;`
    # would add driver options (a socket factory, a log file, local infile) to it.
    if not _HOST.fullmatch(c.host):
        raise EndpointError(f"connection {conn_id!r}: its host is not a host name or an IP address")
    if not _DATABASE.fullmatch(c.schema):
        raise EndpointError(f"connection {conn_id!r}: its schema (the database name) is not [A-Za-z0-9_$-]")
    return Database(c.host, c.port or default_port, c.login, c.password, c.schema)


_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\]")
_DATABASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_$-]{0,62}")


def ledger_database(conn_id: str = LEDGER_CONN_ID) -> Database:
    return database(conn_id)


def child_process_env(kafka_conf: dict, db: Database) -> dict[str, str]:
    """The environment for a platform process this one starts (a producer or consumer it will
    kill): the resolved endpoints as connection variables, so the child needs no Airflow context,
    and this package on its path. Environment, never arguments: `ps` shows arguments."""
    return {
        **os.environ,
        f"AIRFLOW_CONN_{KAFKA_CONN_ID.upper()}": json.dumps({"conn_type": "kafka", "extra": kafka_conf}),
        f"AIRFLOW_CONN_{LEDGER_CONN_ID.upper()}": json.dumps(
            {
                "conn_type": "postgres",
                "host": db.host,
                "port": db.port,
                "login": db.user,
                "password": db.password,
                "schema": db.database,
            }
        ),
        "PYTHONPATH": pythonpath_with_package(),
    }


def pythonpath_with_package() -> str:
    """PYTHONPATH with this package's parent directory first (once)."""
    plugins_dir = str(locations.package_parent())
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != plugins_dir]
    return os.pathsep.join([plugins_dir, *rest])
