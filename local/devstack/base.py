"""What every service of the local stack shares: where it lives (.cache/ for downloads, var/ for
state and logs), the loopback host, and how a process is spawned, awaited and stopped."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

REPO = Path(os.environ.get("SEMANTICS_HOME", Path(__file__).resolve().parents[2]))
CACHE = REPO / ".cache"
VAR = Path(os.environ.get("SEMANTICS_VAR", REPO / "var"))
LOGS = VAR / "logs"
RUN = VAR / "run"
KAFKA_LIB = CACHE / "kafka" / "lib"
SPARK_JARS = CACHE / "spark" / "jars"
TOXIPROXY_BIN = CACHE / "toxiproxy" / "bin" / "server"
CONFIG = REPO / "local" / "config"

HOST = "127.0.0.1"
MIN_JAVA = 17


# Everything the stack makes (its data folders, Kafka's segments, logs, keys) is its owner's alone:
# the stack's processes inherit this from the controller.
PRIVATE_UMASK = 0o077


def write_private(path: Path, text: str) -> Path:
    """A file only its owner may read, created so from the start (no moment at the umask's mode),
    in a folder only its owner may enter."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file that already existed keeps its mode through O_CREAT
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def reserve_ports(ports) -> None:
    """The stack's listening ports that lie in the kernel's ephemeral range, taken out of it: an
    outgoing connection that picked one made a restarted broker fail to bind ("Address already in
    use"). Needs root; elsewhere it does nothing, and a collision stays possible."""
    reserved = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        current = reserved.read_text().strip()
        have = set()
        for part in filter(None, current.split(",")):
            a, _, b = part.partition("-")
            have.update(range(int(a), int(b or a) + 1))
        missing = sorted(p for p in ports if low <= p <= high and p not in have)
        if missing:
            reserved.write_text(",".join(filter(None, [current, *map(str, missing)])))
    except (OSError, ValueError):
        pass


class StackError(RuntimeError):
    """A start-up precondition failed; the message names the component and the cause."""


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


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_port_free(port: int, component: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise StackError(
                f"{component}: port {HOST}:{port} is already taken by another process ({e.strerror}); "
                f"stop that process or free the port, then run start again"
            ) from None


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


# --------------------------------------------------------------------------- prerequisites


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


def report(component: str, state: str) -> None:
    print(f"{component:<12} {state}", flush=True)
