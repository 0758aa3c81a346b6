"""The stack's OAuth 2 token issuer, for the brokers' OAUTHBEARER listener: the issuer is a test
fixture, the brokers' validation and the clients' token flow are Kafka's and librdkafka's own.

One process (`python -m devstack.oidc`) serves, on loopback:
- GET /jwks: the issuer's public key (RS256), which the brokers validate tokens against;
- POST /token: the client-credentials grant (RFC 6749 4.4): the client's id and secret by HTTP Basic
  authentication or in the form, a signed JWT back (issuer, subject = the client id, audience
  `kafka`, scope, an hour's life);
- POST /rogue/token: the same grant answered by another issuer with a key of its own, that no broker
  trusts: a client given it must be refused by the brokers.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from devstack.paths import LOGS, REPO, RUN, VAR
from devstack.ports import HOST, port_open
from devstack.processes import pid_alive, read_pid, report, spawn, terminate, wait_until
from devstack.service import Process, Service

OIDC_PORT = int(os.environ.get("SEMANTICS_OIDC_PORT", "8180"))
ISSUER = f"http://{HOST}:{OIDC_PORT}"
TOKEN_URL = f"{ISSUER}/token"
ROGUE_TOKEN_URL = f"{ISSUER}/rogue/token"
JWKS_URL = f"{ISSUER}/jwks"
AUDIENCE = "kafka"
SCOPE = "kafka"
CLIENT_ID = "semantics-client"
KEYS = VAR / "oidc"
PID = RUN / "oidc.pid"
LOG = LOGS / "oidc.log"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _key(name: str):
    """The issuer's RSA key (made once, mode 600)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    path = KEYS / f"{name}.pem"
    if not path.exists():
        KEYS.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def jwk(name: str) -> dict:
    numbers = _key(name).public_key().public_numbers()
    as_bytes = lambda n: n.to_bytes((n.bit_length() + 7) // 8, "big")
    return {
        "kty": "RSA",
        "use": "sig",
        "alg": "RS256",
        "kid": name,
        "n": _b64(as_bytes(numbers.n)),
        "e": _b64(as_bytes(numbers.e)),
    }


def token(client_id: str, issuer: str = ISSUER, key_name: str = "issuer", lifetime: int = 3600) -> str:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": key_name}
    claims = {"iss": issuer, "sub": client_id, "aud": AUDIENCE, "scope": SCOPE, "iat": now, "exp": now + lifetime}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = _key(key_name).sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def client_secret() -> str:
    from devstack.credentials import passwords

    return passwords()["OIDC_CLIENT_SECRET"]


class _Issuer(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):  # the path and status only: never a header or a form
        sys.stderr.write(f"{self.command} {self.path.split('?')[0]} {args[1] if len(args) > 1 else ''}\n")

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/jwks":
            return self._send(200, {"keys": [jwk("issuer")]})
        return self._send(404, {"error": "not_found"})

    def do_POST(self):
        if self.path not in ("/token", "/rogue/token"):
            return self._send(404, {"error": "not_found"})
        length = min(int(self.headers.get("Content-Length") or 0), 64 * 1024)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode(errors="replace")).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                pair = base64.b64decode(auth[6:]).decode()
            except ValueError:
                return self._send(401, {"error": "invalid_client"})
            client_id, _, secret = (urllib.parse.unquote_plus(p) for p in pair.partition(":"))
        if form.get("grant_type") != "client_credentials":
            return self._send(400, {"error": "unsupported_grant_type"})
        if client_id != CLIENT_ID or not hmac.compare_digest((secret or "").encode(), self.server.secret.encode()):
            return self._send(401, {"error": "invalid_client"})
        rogue = self.path == "/rogue/token"
        issued = token(client_id, f"{ISSUER}/rogue" if rogue else ISSUER, "rogue" if rogue else "issuer")
        return self._send(200, {"access_token": issued, "token_type": "Bearer", "expires_in": 3600, "scope": SCOPE})


def serve() -> None:
    jwk("issuer"), jwk("rogue")  # made before the first request
    server = ThreadingHTTPServer((HOST, OIDC_PORT), _Issuer)
    server.secret = client_secret()
    server.serve_forever()


def pid() -> int | None:
    found = read_pid(PID)
    return found if pid_alive(found) else None


def start() -> str:
    if pid():
        return "already running"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'local'}:{REPO / 'plugins'}"}
    spawn([sys.executable, "-m", "devstack.oidc"], LOG, PID, env=env)
    wait_until(lambda: port_open(OIDC_PORT) or not pid(), 30, "the token issuer", LOG)
    if not pid():
        raise RuntimeError(f"the token issuer exited; see {LOG}")
    return f"started, issuer {ISSUER}"


def connections() -> dict[str, dict]:
    from devstack.credentials import SECURE_HOST, TLS_CA
    from devstack.kafka import BROKERS

    return {
        # The OAUTHBEARER listener, direct: OIDC client credentials (login: the client id; password:
        # its secret), tokens from the stack's issuer, validated by the brokers against its JWKS.
        "kafka_oauth": {
            "conn_type": "kafka",
            "login": CLIENT_ID,
            "password": client_secret(),
            "extra": {
                "bootstrap.servers": ",".join(f"{SECURE_HOST}:{b.oauth_port}" for b in BROKERS),
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
                "sasl.oauthbearer.scope": SCOPE,
                "ssl.ca.location": str(TLS_CA),
            },
        }
    }


SERVICE = Service(
    "oidc",
    lambda: report("oidc", start()),
    lambda: terminate(pid(), grace=5) or report("oidc", "stopped"),
    (Process("oidc", OIDC_PORT, pid),),
    connections,
)

if __name__ == "__main__":
    serve()
