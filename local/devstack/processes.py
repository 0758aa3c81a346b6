"""How a service's process is spawned, found again by its pid file, awaited and stopped, and how
the stack says what it did and what went wrong."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from devstack.paths import PRIVATE_UMASK, REPO


class StackError(RuntimeError):
    """A start-up precondition failed; the message names the component and the cause."""


def report(component: str, state: str) -> None:
    print(f"{component:<12} {state}", flush=True)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone. So does a thread of another process whose
    # id a stale pid file names (a broker's JVM reused a stopped worker's pid as a thread id):
    # that pid is not a process.
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ", 1)[1][0] == "Z":
                return False
        with open(f"/proc/{pid}/status") as f:
            tgid = next((line.split()[1] for line in f if line.startswith("Tgid:")), None)
        return tgid is None or int(tgid) == pid
    except OSError:
        return False


def read_pid(pid_file: Path) -> int | None:
    """The pid a pid file names; None when the file was written for a process that has ended and
    the kernel has given its pid to another since (toxiproxy took a stopped broker's, and `stack
    start` took the broker for running). spawn's files carry the process's start time to tell."""
    try:
        pid, *started = pid_file.read_text().split()
        pid = int(pid)
    except (OSError, ValueError):
        return None
    return None if started and start_time(pid) not in (None, started[0]) else pid


def start_time(pid: int) -> str | None:
    """When the process `pid` started, in clock ticks since boot (/proc/<pid>/stat's 22nd field)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def spawn(cmd: list[str], log_file: Path, pid_file: Path, env: dict | None = None) -> int:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=REPO,
            # Every service's files are its owner's, whoever starts it (the controller, or the
            # nemesis's backend restarting a broker from a test).
            umask=PRIVATE_UMASK,
        )
    pid_file.write_text(f"{proc.pid} {start_time(proc.pid) or ''}".strip())
    return proc.pid


def wait_until(predicate, timeout: float, what: str, log_file: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    hint = f"; see {log_file}" if log_file else ""
    raise StackError(f"{what} did not come up within {timeout:.0f}s{hint}")


def terminate(pid: int | None, grace: float) -> None:
    if not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)


def stop_together(members, pid_of, kill, grace: float = 30) -> None:
    """SIGTERM to each, a shared grace, then SIGKILL to whatever is left."""
    for x in members:
        pid = pid_of(x)
        if pid:
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_of(x) for x in members):
        time.sleep(0.3)
    for x in members:
        kill(x)
        report(x.name, "stopped")


MIN_JAVA = 17


def java_version() -> int:
    java = shutil.which("java")
    if not java:
        raise StackError("java: no `java` on PATH; install a JDK 17 or newer (local/setup does it)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    try:
        raw = out.split('"')[1]
        major = int(raw.split(".")[0])
        return 8 if major == 1 else major
    except (IndexError, ValueError):
        raise StackError(f"java: cannot read the version from `java -version`: {out.strip()[:200]}") from None
