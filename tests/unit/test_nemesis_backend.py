"""The nemesis's backend is named by SEMANTICS_NEMESIS_BACKEND: `docker`, or `module:Class`; the
production nemesis never imports the local stack. The docker backend speaks the Docker Engine's API
on its socket: here an engine of a few containers answers it on a socket of the test's own, and
records what it was asked."""

import http.server
import json
import socketserver
import threading
import urllib.parse

import pytest
from conftest import REPO

from delivery_semantics.faults import nemesis


def test_the_docker_backend_by_name(monkeypatch):
    monkeypatch.setenv("SEMANTICS_NEMESIS_BACKEND", "docker")
    monkeypatch.setenv("SEMANTICS_COMPOSE_PROJECT", "semantics")
    assert isinstance(nemesis.backend_from_env(), nemesis.DockerComposeBackend)
    monkeypatch.delenv("SEMANTICS_COMPOSE_PROJECT")
    with pytest.raises(nemesis.NemesisError, match="SEMANTICS_COMPOSE_PROJECT is not set"):
        nemesis.backend_from_env().kill(1)


class _Engine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The Docker Engine's container endpoints over a few containers: each with compose labels and a
    state that kill, start, stop, pause and unpause change as the engine's would."""

    daemon_threads = True

    def __init__(self, path: str, containers: dict[str, dict]):
        self.containers = containers  # id: {"labels": {...}, "running": bool, "paused": bool}
        self.calls: list[tuple[str, str, dict]] = []
        super().__init__(path, _EngineHandler)


class _EngineHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def address_string(self):
        return "engine"

    def _answer(self, status: int, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        engine: _Engine = self.server
        if url.path == "/containers/json":
            wanted = set(json.loads(query["filters"])["label"])
            found = [
                {"Id": cid, "Labels": c["labels"]}
                for cid, c in engine.containers.items()
                if wanted <= {f"{k}={v}" for k, v in c["labels"].items()}
            ]
            return self._answer(200, found)
        cid = url.path.split("/")[2]
        c = engine.containers[cid]
        return self._answer(200, {"State": {"Running": c["running"], "Paused": c["paused"]}})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        _, _, cid, action = url.path.split("/")
        engine: _Engine = self.server
        engine.calls.append((action, cid, dict(urllib.parse.parse_qsl(url.query))))
        c = engine.containers.get(cid)
        if c is None:
            return self._answer(404, {"message": f"No such container: {cid}"})
        if action == "kill" or action == "stop":
            c.update(running=False, paused=False)
        elif action in ("start", "restart"):
            c.update(running=True)
        elif action == "pause":
            c.update(paused=True)
        elif action == "unpause":
            c.update(paused=False)
        self._answer(204)


def _labels(project: str, service: str, role: str | None) -> dict:
    labels = {"com.docker.compose.project": project, "com.docker.compose.service": service}
    return labels | ({"semantics.nemesis": role} if role else {})


@pytest.fixture
def engine(tmp_path):
    containers = {
        "b1": _labels("semantics", "kafka-1", "broker"),
        "b2": _labels("semantics", "kafka-2", "broker"),
        "other-b2": _labels("another-team", "kafka-2", "broker"),
        "w1": _labels("semantics", "connect-1", "connect-worker"),
        "db": _labels("semantics", "postgres-cdc", "outbox-db"),
        "pg": _labels("semantics", "postgres", None),
    }
    server = _Engine(
        str(tmp_path / "docker.sock"),
        {k: {"labels": v, "running": True, "paused": False} for k, v in containers.items()},
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_docker_backend_acts_on_the_projects_brokers_through_the_engines_api(engine):
    backend = nemesis.DockerComposeBackend(socket_path=engine.server_address, project="semantics")
    backend.kill(2)
    assert engine.calls[0] == ("kill", "b2", {"signal": "SIGKILL"}), "kafka-2 of this project, not another's"
    assert engine.containers["other-b2"]["running"] and not backend.is_running(2)
    backend.start(2)
    backend.pause(1)
    backend.resume(1)
    backend.resume(1)  # not paused any more: no second unpause
    backend.stop(1)
    assert [(a, c) for a, c, _ in engine.calls] == [
        ("kill", "b2"),
        ("start", "b2"),
        ("pause", "b1"),
        ("unpause", "b1"),
        ("stop", "b1"),
    ]
    assert engine.calls[-1][2] == {"t": "60"}, "a controlled shutdown gets the broker's grace"
    backend.kill_worker("connect-1:8083")
    backend.start_worker("connect-1:8083")
    backend.restart_outbox_db()
    assert [(a, c) for a, c, _ in engine.calls[-3:]] == [("kill", "w1"), ("start", "w1"), ("restart", "db")]
    assert backend.link_proxies(1) == nemesis.link_proxies(1, (1, 2, 3)) and len(backend.link_proxies(1)) == 8
    assert backend.fetch_proxies(3) == ["link-1-3-internal", "link-2-3-internal"]


@pytest.mark.parametrize(
    "act, message",
    [
        (lambda b: b.kill(4), "no container of service 'kafka-4' in compose project 'semantics'"),
        (lambda b: b.kill_worker("postgres:5432"), "service 'postgres' is not a connect-worker"),
        (lambda b: b.kill_worker("kafka-1:19092"), "service 'kafka-1' is not a connect-worker"),
    ],
)
def test_the_docker_backend_touches_no_container_without_the_role_the_fault_needs(engine, act, message):
    """A worker id comes from a pipeline file: it may name any service of the project; only one the
    deployment labelled as a Connect worker is acted on."""
    backend = nemesis.DockerComposeBackend(socket_path=engine.server_address, project="semantics")
    with pytest.raises(nemesis.NemesisError) as e:
        act(backend)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not [c for c in engine.calls if c[0] != "GET"], "nothing was done"


def test_an_unreachable_engine_is_one_line(tmp_path):
    backend = nemesis.DockerComposeBackend(socket_path=str(tmp_path / "none.sock"), project="semantics")
    with pytest.raises(nemesis.NemesisError) as e:
        backend.is_running(1)
    assert str(e.value).startswith(f"the Docker Engine at {tmp_path}/none.sock: ") and "\n" not in str(e.value)


def test_the_local_stacks_backend_by_module_and_class(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "local"))
    monkeypatch.setenv("SEMANTICS_NEMESIS_BACKEND", "devstack.nemesis_backend:ProcessBackend")
    backend = nemesis.backend_from_env()
    assert backend.name == "local" and backend.broker_ids == (1, 2, 3)
    assert len(backend.link_proxies(1)) == 8  # 2 peers, both ways, 2 listeners


@pytest.mark.parametrize(
    "name, message",
    [
        ("", "use docker, or module:Class"),
        ("local", "use docker, or module:Class"),
        ("no_such_module:Backend", "No module named 'no_such_module'"),
        ("delivery_semantics.faults.nemesis:Timeline", "is not a nemesis Backend"),
    ],
)
def test_an_unusable_backend_is_refused_in_one_line(monkeypatch, name, message):
    monkeypatch.setenv("SEMANTICS_NEMESIS_BACKEND", name)
    with pytest.raises(nemesis.NemesisError) as e:
        nemesis.backend_from_env()
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_production_code_does_not_import_the_local_stack():
    for path in (REPO / "plugins").rglob("*.py"):
        assert "import devstack" not in path.read_text() and "from devstack" not in path.read_text(), path


def test_a_pid_file_naming_a_thread_of_another_process_names_no_process(monkeypatch):
    """A stopped worker's pid, reused as a thread id by a broker's JVM, kept `stack start` from
    starting the worker again: it took the thread for the worker and waited for it to answer."""
    import os
    import threading

    monkeypatch.syspath_prepend(str(REPO / "local"))
    from devstack.processes import pid_alive

    ids, started, done = [], threading.Event(), threading.Event()
    t = threading.Thread(target=lambda: (ids.append(threading.get_native_id()), started.set(), done.wait(10)))
    t.start()
    try:
        started.wait(10)
        assert ids[0] != os.getpid() and not pid_alive(ids[0])
        assert pid_alive(os.getpid())
    finally:
        done.set()
        t.join()


def test_a_pid_file_naming_a_pid_another_process_took_since_names_no_process(monkeypatch, tmp_path):
    """A broker stopped, toxiproxy started with its pid, and `stack start` took toxiproxy for the
    broker and left the broker down: a spawned process's pid file names it only while it runs."""
    import os

    monkeypatch.syspath_prepend(str(REPO / "local"))
    from devstack.processes import pid_alive, read_pid, spawn, terminate

    pid_file = tmp_path / "sleeper.pid"
    pid = spawn(["sleep", "30"], tmp_path / "sleeper.log", pid_file)
    try:
        assert read_pid(pid_file) == pid and pid_alive(pid)
    finally:
        terminate(pid, grace=5)
    assert not pid_alive(read_pid(pid_file))
    # The same file, had the kernel given that pid to this test's own process.
    pid_file.write_text(f"{os.getpid()} {pid_file.read_text().split()[1]}")
    assert read_pid(pid_file) is None
    # A pid file with the pid alone (a server's own, such as MariaDB's) names what runs with it.
    pid_file.write_text(str(os.getpid()))
    assert read_pid(pid_file) == os.getpid()
