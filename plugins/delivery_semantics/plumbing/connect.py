"""Kafka Connect's REST API, through an Airflow connection (`kafka_connect`: http, its host and
port, its login and password for the API's basic authentication, and in the extra `fallback_urls`:
the cluster's other workers, tried in turn while one is down, since any worker forwards to the
leader; and `secrets_dir`).

A connector's configuration never holds a secret: the REST API and the config topic show it to
whoever can read them. A database password goes to a file of mode 600 in the connection's
`secrets_dir`, a folder the workers' FileConfigProvider reads (and only that one), and the
configuration names it as `${file:<path>:password}` (`secret_reference`)."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from delivery_semantics import rule_catalog
from delivery_semantics.plumbing.endpoints import EndpointError, get_connection, private_dir

CONNECT_CONN_ID = "kafka_connect"
CONNECTOR_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"


class ConnectError(EndpointError):
    """Connect refused a request or cannot be reached; one line, without the configuration."""


class _TransientConnectError(ConnectError):
    pass


def _is_transient(status: int, message: str) -> bool:
    # 409: a rebalance is under way; 500 "...can be safely retried": the worker could not write
    # the config topic in time (seen right after an exactly-once cluster starts).
    return status == 409 or (status == 500 and "safely retried" in message)


class ConnectCluster:
    def __init__(self, conn_id: str = CONNECT_CONN_ID, urls: list[str] | None = None):
        self.conn_id = conn_id
        if urls is None:
            c = get_connection(conn_id)
            if not c.host:
                raise ConnectError(f"connection {conn_id!r} needs a host (the Connect REST URL)")
            host = c.host if "://" in c.host else f"{c.schema or 'http'}://{c.host}"
            urls = [f"{host}:{c.port}" if c.port else host, *c.extra.get("fallback_urls", [])]
            self._auth = "Basic " + base64.b64encode(f"{c.login}:{c.password}".encode()).decode() if c.login else None
            self.secrets_dir = c.extra.get("secrets_dir")
        else:
            self._auth, self.secrets_dir = None, None
        self.urls = [u.rstrip("/") for u in urls]

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 30, retry_for: float = 60):
        """The first worker that answers. Connect's own errors are not retried elsewhere, except
        those it calls transient (a rebalance under way, a config topic write that timed out):
        every request here is idempotent, so they are repeated for up to `retry_for` seconds."""
        deadline = time.monotonic() + retry_for
        while True:
            try:
                return self._call_once(method, path, body, timeout)
            except _TransientConnectError as e:
                if time.monotonic() >= deadline:
                    raise ConnectError(str(e)) from None
                time.sleep(1)

    def _call_once(self, method: str, path: str, body: dict | None, timeout: float):
        unreachable = []
        for base in self.urls:
            req = urllib.request.Request(  # noqa: S310 (http(s) to the Connect connection's URL)
                f"{base}{path}",
                method=method,
                data=json.dumps(body).encode() if body is not None else None,
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                    **({"Authorization": self._auth} if self._auth else {}),
                },
            )
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (http(s) to the Connect connection's URL)
                    raw = r.read()
                return json.loads(raw) if raw else None
            except urllib.error.HTTPError as e:
                try:
                    message = json.loads(e.read()).get("message", "")
                except Exception:
                    message = ""
                error = _TransientConnectError if _is_transient(e.code, message) else ConnectError
                raise error(f"Kafka Connect ({self.conn_id}) {method} {path}: HTTP {e.code} {message[:300]}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                unreachable.append(f"{base} ({getattr(e, 'reason', e)})")
        raise ConnectError(f"Kafka Connect ({self.conn_id}) cannot be reached: {'; '.join(unreachable)}")

    # ------------------------------------------------------------------ reads

    def version(self) -> str:
        return self.call("GET", "/", timeout=5)["version"]

    def plugins(self) -> list[str]:
        return [p["class"] for p in self.call("GET", "/connector-plugins")]

    def status(self, name: str) -> dict:
        return self.call("GET", f"/connectors/{_quoted(name)}/status")

    def settings_for_rules(self, name: str) -> dict[str, str]:
        """The settings of a running connector that the rule catalog reads (and its class), and no
        other: its passwords and URLs never leave this call. A name Connect does not know is
        refused as Connect says it."""
        if not re.fullmatch(CONNECTOR_NAME, name or ""):
            raise ConnectError(f"connector name {str(name)[:80]!r} is not {CONNECTOR_NAME}")
        config = self.call("GET", f"/connectors/{_quoted(name)}/config", retry_for=10)
        return {k: str(v) for k, v in config.items() if k in rule_catalog.CONNECTOR_KEYS}

    def task_worker(self, name: str, task: int = 0) -> str | None:
        """The worker (host:port) running one of a connector's tasks, if it runs."""
        for t in self.status(name).get("tasks", []):
            if t["id"] == task and t["state"] == "RUNNING":
                return t["worker_id"]
        return None

    def validate(self, connector_class: str, config: dict) -> list[str]:
        """Connect's own check of a configuration: the errors it gives, by setting."""
        plugin = connector_class.rsplit(".", 1)[-1]
        res = self.call("PUT", f"/connector-plugins/{_quoted(plugin)}/config/validate", config)
        return [f"{c['value']['name']}: {err}" for c in res.get("configs", []) for err in c["value"].get("errors", [])]

    # ------------------------------------------------------------------ writes

    def put(self, name: str, config: dict) -> None:
        self.call("PUT", f"/connectors/{_quoted(name)}/config", config)

    def delete(self, name: str) -> None:
        try:
            self.call("DELETE", f"/connectors/{_quoted(name)}")
        except ConnectError as e:
            if "HTTP 404" not in str(e):
                raise
        if self.secrets_dir:
            try:
                os.unlink(self._secret_file(name))
            except FileNotFoundError:
                pass

    def secret_reference(self, connector: str, value: str) -> str:
        """`value` written to the connector's secret file (mode 600, in the connection's secrets_dir)
        and the placeholder the workers' FileConfigProvider resolves to it."""
        if not self.secrets_dir:
            raise ConnectError(
                f"connection {self.conn_id!r} names no secrets_dir in its extra: Kafka Connect gets a connector's "
                "passwords through its FileConfigProvider from that folder, never in the configuration (docs/SECURITY.md)"
            )
        path = self._secret_file(connector)
        # A folder of this user's alone (made so, or refused as it is), and a file made new, never
        # through a link: another user who could plant `<connector>.properties` as a link would
        # otherwise have the password written where the link points.
        folder = private_dir("connect-secrets", Path(self.secrets_dir))
        tmp = folder / f".{connector}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, f"password={_properties_value(value)}\n".encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, path)  # a rename replaces a link planted at the name, never writes through it
        return "${file:" + path + ":password}"

    def _secret_file(self, connector: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,200}", connector):
            raise ConnectError(f"{connector[:60]!r} is not a connector name the platform makes")
        return os.path.join(self.secrets_dir, f"{connector}.properties")

    def wait_running(self, name: str, timeout: float = 120) -> dict:
        """Until the connector and all its tasks run; a failed one is an error with its trace's
        first line."""
        deadline, last = time.monotonic() + timeout, "no status yet"
        while time.monotonic() < deadline:
            try:
                st = self.status(name)
            except ConnectError as e:
                last = str(e)
                time.sleep(1)
                continue
            states = [st["connector"]["state"], *(t["state"] for t in st.get("tasks", []))]
            failed = [t for t in [st["connector"], *st.get("tasks", [])] if t["state"] == "FAILED"]
            if failed:
                trace = (failed[0].get("trace") or "").strip().splitlines()
                raise ConnectError(f"connector {name} failed: {trace[0][:400] if trace else 'no trace'}")
            if st.get("tasks") and all(s == "RUNNING" for s in states):
                return st
            last = f"states {states}"
            time.sleep(0.5)
        raise ConnectError(f"connector {name} is not running after {timeout:.0f}s: {last}")


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _properties_value(value: str) -> str:
    """A value as java.util.Properties reads it back exactly: ASCII, with its escapes."""
    out = []
    for i, ch in enumerate(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!" or (ch == " " and i == 0):
            out.append("\\" + ch)
        elif not " " <= ch <= "~":
            out.append("".join(f"\\u{unit:04x}" for unit in _utf16(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
