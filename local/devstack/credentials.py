"""The stack's secrets: generated passwords (var/secrets.env, mode 600), and the local CA and
broker certificate of the SASL_SSL listeners (var/tls). Nothing here is ever printed or committed."""

from __future__ import annotations

import os
import secrets
import shutil
import string
import subprocess

from devstack.paths import REPO, VAR, write_private
from devstack.ports import HOST
from devstack.processes import StackError, report
from devstack.service import Service

SCRAM_USER = "semantics"
# The hostname the SASL_SSL listener advertises and its certificate names.
SECURE_HOST = "localhost"
TLS_DIR = VAR / "tls"
TLS_CA = TLS_DIR / "ca.pem"
TLS_KEYSTORE = TLS_DIR / "broker.p12"
# The client certificate of the mutual-TLS listeners, signed by the CA; its key is encrypted.
TLS_CLIENT_CERT = TLS_DIR / "client.pem"
TLS_CLIENT_KEY = TLS_DIR / "client.key"

SECRETS_FILE = VAR / "secrets.env"


SECRET_NAMES = (
    "SEMANTICS_DB_PASSWORD",
    "AIRFLOW_DB_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "KAFKA_SCRAM_PASSWORD",  # the SCRAM-SHA-512 user of the SASL_SSL listener
    "TLS_STORE_PASSWORD",  # the brokers' PKCS12 keystore
    "OUTBOX_OWNER_PASSWORD",  # the application that writes the outbox database
    "OUTBOX_READER_PASSWORD",  # the read-only role audits read it with
    "CLIENT_KEY_PASSWORD",  # the key of the mutual-TLS client certificate
    "SPARK_AUTH_SECRET",  # spark.authenticate between the standalone master, its worker and applications
    "CONNECT_REST_PASSWORD",  # Kafka Connect's REST API (basic authentication)
    "OIDC_CLIENT_SECRET",  # the OAUTHBEARER listener's client, at the stack's token issuer
    "SPARK_CONNECT_TOKEN",  # the Spark Connect server's bearer token
)


def passwords() -> dict[str, str]:
    """Passwords for the local roles, made once per stack (a name added later is made when first
    needed) and never committed or printed."""
    out = {}
    if SECRETS_FILE.exists():
        for line in SECRETS_FILE.read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    missing = [k for k in SECRET_NAMES if k not in out]
    if missing:
        VAR.mkdir(parents=True, exist_ok=True)
        alphabet = string.ascii_letters + string.digits
        out.update({k: "".join(secrets.choice(alphabet) for _ in range(24)) for k in missing})
        write_private(SECRETS_FILE, "".join(f"{k}={v}\n" for k, v in out.items()))
    return out


def secret(name: str) -> str:
    """One of the stack's generated passwords (SECRET_NAMES)."""
    return passwords()[name]


def make_tls() -> str:
    """A local CA; one certificate for the brokers' TLS listeners that names localhost and
    127.0.0.1, in a PKCS12 keystore; and a client certificate for the mutual-TLS listeners, its
    key encrypted with CLIENT_KEY_PASSWORD. Made once each; the keys never leave var/tls (mode 700)."""
    made = []
    if not (TLS_KEYSTORE.exists() and TLS_CA.exists()):
        _make_ca_and_broker()
        made.append("local CA and broker certificate")
    if not (TLS_CLIENT_CERT.exists() and TLS_CLIENT_KEY.exists()):
        _make_client()
        made.append("client certificate")
    for p in TLS_DIR.iterdir():
        p.chmod(0o644 if p in (TLS_CA, TLS_CLIENT_CERT) else 0o600)  # certificates are public; keys are not
    where = TLS_DIR.relative_to(REPO) if TLS_DIR.is_relative_to(REPO) else TLS_DIR
    return f"{' and '.join(made)} made in {where}" if made else "CA, broker keystore and client certificate present"


def _openssl(steps) -> None:
    if not shutil.which("openssl"):
        raise StackError("tls: openssl is missing (Debian: openssl)")
    # Passwords on the environment, not the command line.
    env = {
        **os.environ,
        "TLS_STORE_PASSWORD": passwords()["TLS_STORE_PASSWORD"],
        "CLIENT_KEY_PASSWORD": passwords()["CLIENT_KEY_PASSWORD"],
    }
    for args in steps:
        res = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, env=env)  # noqa: S607 (Debian's openssl, installed by local/setup)
        if res.returncode != 0:
            raise StackError(f"tls: openssl {args[0]} failed: {res.stderr.strip()[-400:]}")


SUBJECT = "/O=delivery-semantics local stack/CN="


def _make_ca_and_broker() -> None:
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    TLS_DIR.chmod(0o700)
    ca_key, key, csr, cert, ext = (TLS_DIR / n for n in ("ca.key", "broker.key", "broker.csr", "broker.pem", "san.ext"))
    ext.write_text(f"subjectAltName=DNS:{SECURE_HOST},IP:{HOST}\n")
    _openssl((
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", TLS_CA, "-days", "825",
         "-subj", SUBJECT + "local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", SUBJECT + SECURE_HOST],
        ["x509", "-req", "-in", csr, "-CA", TLS_CA, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "825", "-extfile", ext],
        ["pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", TLS_CA, "-name", "broker",
         "-out", TLS_KEYSTORE, "-passout", "env:TLS_STORE_PASSWORD"],
    ))  # fmt: skip


def _make_client() -> None:
    csr = TLS_DIR / "client.csr"
    _openssl((
        # PKCS#8, encrypted: the form both librdkafka and the JVM read.
        ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-aes-256-cbc",
         "-pass", "env:CLIENT_KEY_PASSWORD", "-out", TLS_CLIENT_KEY],
        ["req", "-new", "-key", TLS_CLIENT_KEY, "-passin", "env:CLIENT_KEY_PASSWORD", "-out", csr,
         "-subj", SUBJECT + "semantics-client"],
        ["x509", "-req", "-in", csr, "-CA", TLS_CA, "-CAkey", TLS_DIR / "ca.key", "-CAcreateserial",
         "-out", TLS_CLIENT_CERT, "-days", "825"],
    ))  # fmt: skip


# Not a process: the certificates the brokers' TLS listeners and the clients need, made once.
TLS = Service("tls", lambda: report("tls", make_tls()))
