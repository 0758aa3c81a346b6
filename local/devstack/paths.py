"""Where the local stack lives (.cache/ for downloads, var/ for state and logs, local/config), and
the files only its owner may read."""

from __future__ import annotations

import os
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
