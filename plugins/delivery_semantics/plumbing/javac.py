"""The project's Java sources: the Java load client's runner (clients/java) and the checker's platform
topic reader (spark_apps/java). The installed package ships them built by Maven as one versioned jar
(`prebuilt`, made by local/package), so a worker with a JRE compiles nothing; a checkout, or a
package built without it, compiles them on first use. Each such build is kept under
SEMANTICS_JAVA_BUILD (var/java unless set) in a folder named by a hash of the source and the
classpath, so a changed source or jar builds again and an unchanged one never does. Needs a JDK;
an image with a JRE only builds them when it is built and names the results in its environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from delivery_semantics import locations


class JavacError(RuntimeError):
    """A source cannot be compiled; the message says why."""


def prebuilt() -> Path | None:
    """The Maven-built jar of both sources the installed package ships, or None where it has none."""
    try:
        folder = locations.shipped("jvm")
    except locations.LocationError:
        return None
    jars = sorted(folder.glob("delivery-semantics-jvm-*.jar"))
    return jars[-1] if jars else None


def _root() -> Path:
    return Path(locations.setting("java_build") or locations.state("java"))


def classes(source: Path, classpath: str) -> Path:
    """The folder of `source`'s compiled classes, compiled now unless it already was."""
    stamp = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    root = _root()
    out = root / stamp
    if out.is_dir():
        return out
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{stamp}.", dir=root))
    try:
        done = subprocess.run(
            ["javac", "-nowarn", "-d", str(tmp), "-cp", classpath, str(source)],  # noqa: S607 (the JDK's javac on PATH, checked by local/setup)
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise JavacError(f"javac is not installed: {source.name} is compiled on first use") from None
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise JavacError(f"javac failed on {source.name}: {lines[0] if lines else done.returncode}")
    try:
        tmp.rename(out)
    except OSError:  # another process compiled it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def jar(source: Path, classpath: str) -> Path:
    """`source` compiled and packed as a jar (for spark-submit's --jars), next to its classes."""
    folder = classes(source, classpath)
    out = folder.with_suffix(".jar")
    if out.is_file():
        return out
    fd, tmp = tempfile.mkstemp(prefix=f"{out.name}.", dir=folder.parent)
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*.class")):
            z.write(p, p.relative_to(folder).as_posix())
    os.replace(tmp, out)
    return out
