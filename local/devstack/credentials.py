"""The stack's secrets: generated passwords (var/secrets.env, mode 600), and the local CA and
broker certificate of the SASL_SSL listeners (var/tls). Nothing here is ever printed or committed."""

from __future__ import annotations

import os
import secrets
import shutil
import string
import subprocess

from devstack.base import HOST, REPO, VAR, StackError

SCRAM_USER = "semantics"
# The hostname the SASL_SSL listener advertises and its certificate names.
SECURE_HOST = "localhost"
TLS_DIR = VAR / "tls"
TLS_CA = TLS_DIR / "ca.pem"
TLS_KEYSTORE = TLS_DIR / "broker.p12"

SECRETS_FILE = VAR / "secrets.env"


SECRET_NAMES = (
    "SEMANTICS_DB_PASSWORD",
    "AIRFLOW_DB_PASSWORD",
    "AIRFLOW_ADMIN_PASSWORD",
    "KAFKA_SCRAM_PASSWORD",  # the SCRAM-SHA-512 user of the SASL_SSL listener
    "TLS_STORE_PASSWORD",  # the brokers' PKCS12 keystore
    "OUTBOX_OWNER_PASSWORD",  # the application that writes the outbox database
    "OUTBOX_READER_PASSWORD",  # the read-only role audits read it with
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
        SECRETS_FILE.touch(mode=0o600)
        SECRETS_FILE.chmod(0o600)
        SECRETS_FILE.write_text("".join(f"{k}={v}\n" for k, v in out.items()))
    return out


def secret(name: str) -> str:
    """One of the stack's generated passwords (SECRET_NAMES)."""
    return passwords()[name]


def make_tls() -> str:
    """A local CA, and one certificate for the brokers' SASL_SSL listeners that names localhost and
    127.0.0.1, in a PKCS12 keystore. Made once; the keys never leave var/tls (mode 700)."""
    if TLS_KEYSTORE.exists() and TLS_CA.exists():
        return "CA and broker keystore present"
    if not shutil.which("openssl"):
        raise StackError("tls: openssl is missing (Debian: openssl)")
    TLS_DIR.mkdir(parents=True, exist_ok=True)
    TLS_DIR.chmod(0o700)
    ca_key, key, csr, cert, ext = (TLS_DIR / n for n in ("ca.key", "broker.key", "broker.csr", "broker.pem", "san.ext"))
    ext.write_text(f"subjectAltName=DNS:{SECURE_HOST},IP:{HOST}\n")
    subj = "/O=delivery-semantics local stack/CN="
    steps = (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", TLS_CA, "-days", "825",
         "-subj", subj + "local CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", subj + SECURE_HOST],
        ["x509", "-req", "-in", csr, "-CA", TLS_CA, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
         "-days", "825", "-extfile", ext],
        # The store password on the environment, not the command line.
        ["pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", TLS_CA, "-name", "broker",
         "-out", TLS_KEYSTORE, "-passout", "env:TLS_STORE_PASSWORD"],
    )  # fmt: skip
    env = {**os.environ, "TLS_STORE_PASSWORD": passwords()["TLS_STORE_PASSWORD"]}
    for args in steps:
        res = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise StackError(f"tls: openssl {args[0]} failed: {res.stderr.strip()[-400:]}")
    for p in TLS_DIR.iterdir():
        p.chmod(0o644 if p == TLS_CA else 0o600)  # the CA certificate is public; the keys are not
    return f"local CA and broker certificate made in {TLS_DIR.relative_to(REPO) if TLS_DIR.is_relative_to(REPO) else TLS_DIR}"
