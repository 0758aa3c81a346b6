"""The nemesis's backend is named by SEMANTICS_NEMESIS_BACKEND: `docker`, or `module:Class`; the
production nemesis never imports the local stack."""

import pytest
from conftest import REPO

from delivery_semantics.faults import nemesis


def test_the_docker_backend_by_name(monkeypatch):
    monkeypatch.setenv("SEMANTICS_NEMESIS_BACKEND", "docker")
    assert isinstance(nemesis.backend_from_env(), nemesis.DockerComposeBackend)


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
    from devstack.base import pid_alive

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
    from devstack.base import pid_alive, read_pid, spawn, terminate

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
