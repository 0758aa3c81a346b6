"""Toxiproxy (built with `go install`): one proxy per broker for client traffic, and one per
broker-to-broker link, so the nemesis can cut a client path or a single link."""

from __future__ import annotations

import json
import os
import urllib.request

from devstack.kafka import BROKERS, LINKS
from devstack.paths import LOGS, RUN, TOXIPROXY_BIN, VAR
from devstack.ports import HOST, port_open, require_port_free
from devstack.processes import pid_alive, read_pid, report, spawn, terminate, wait_until
from devstack.service import Process, Service

TOXIPROXY_PORT = int(os.environ.get("SEMANTICS_TOXIPROXY_PORT", "8474"))
TOXIPROXY_PID = RUN / "toxiproxy.pid"
TOXIPROXY_LOG = LOGS / "toxiproxy.log"
TOXIPROXY_CONFIG = VAR / "toxiproxy.json"


def toxiproxy_url(path: str = "") -> str:
    return f"http://{HOST}:{TOXIPROXY_PORT}{path}"


def toxiproxy_pid() -> int | None:
    pid = read_pid(TOXIPROXY_PID)
    return pid if pid_alive(pid) else None


def _toxiproxy_proxies() -> list[dict]:
    clients = [
        {"name": b.name, "listen": f"{HOST}:{b.proxy_port}", "upstream": f"{HOST}:{b.client_port}", "enabled": True}
        for b in BROKERS
    ]
    links = [
        {"name": link.name, "listen": f"{link.address}:{link.port}", "upstream": f"{HOST}:{link.port}", "enabled": True}
        for link in LINKS
    ]
    return clients + links


def _toxiproxy_get(path: str):
    with urllib.request.urlopen(toxiproxy_url(path), timeout=2) as r:  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
        return json.loads(r.read())


def start_toxiproxy() -> str:
    if toxiproxy_pid():
        _ensure_proxies()
        return "already running"
    require_port_free(TOXIPROXY_PORT, "toxiproxy")
    for b in BROKERS:
        require_port_free(b.proxy_port, f"toxiproxy ({b.name} proxy)")
    TOXIPROXY_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    TOXIPROXY_CONFIG.write_text(json.dumps(_toxiproxy_proxies(), indent=2))
    spawn(
        [str(TOXIPROXY_BIN), "-host", HOST, "-port", str(TOXIPROXY_PORT), "-config", str(TOXIPROXY_CONFIG)],
        TOXIPROXY_LOG,
        TOXIPROXY_PID,
    )
    wait_until(
        lambda: (
            port_open(TOXIPROXY_PORT)
            and all(port_open(b.proxy_port) for b in BROKERS)
            and all(port_open(link.port, link.address) for link in LINKS)
        ),
        20,
        "toxiproxy",
        TOXIPROXY_LOG,
    )
    _ensure_proxies()
    return "started"


def _ensure_proxies() -> None:
    """Heal what a crashed fault run may have left behind: disabled proxies or leftover toxics;
    and create the proxies a Toxiproxy started by an older version of this file lacks."""
    existing = _toxiproxy_get("/proxies")
    missing = [p for p in _toxiproxy_proxies() if p["name"] not in existing]
    if missing:
        req = urllib.request.Request(  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
            toxiproxy_url("/populate"),
            method="POST",
            data=json.dumps(missing).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=5).read()  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
    for p in _toxiproxy_proxies():
        req = urllib.request.Request(  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
            toxiproxy_url(f"/proxies/{p['name']}"),
            method="POST",
            data=json.dumps({"enabled": True, "upstream": p["upstream"]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=2).read()  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
        for toxic in _toxiproxy_get(f"/proxies/{p['name']}/toxics"):
            urllib.request.urlopen(  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
                urllib.request.Request(toxiproxy_url(f"/proxies/{p['name']}/toxics/{toxic['name']}"), method="DELETE"),  # noqa: S310 (http to the stack's own Toxiproxy on loopback)
                timeout=2,
            ).read()


def stop_toxiproxy() -> None:
    terminate(toxiproxy_pid(), grace=5)


def connections() -> dict[str, dict]:
    return {"toxiproxy_default": {"conn_type": "http", "host": HOST, "port": TOXIPROXY_PORT}}


SERVICE = Service(
    "toxiproxy",
    lambda: report("toxiproxy", start_toxiproxy()),
    lambda: stop_toxiproxy() or report("toxiproxy", "stopped"),
    (Process("toxiproxy", TOXIPROXY_PORT, toxiproxy_pid),),
    connections,
)
