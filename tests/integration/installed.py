"""A team's install of the platform, away from the repository (docs/DEPLOY.md): the wheel built from
a copy of the sources the package is made of, installed on a path of its own, an AIRFLOW_HOME of its
own, and a DAG folder holding only the team's audit files and a DAG file of a few lines. Airflow
itself is the repository's environment's (the same pins a constraints file gives): no repository
folder is on the path, and nothing from the checkout's plugins/, dags/ or SEMANTICS_HOME is used."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO

TEAM_DAG_FILE = '''"""Team orders' audits, one Airflow DAG per file of audits/ (delivery-semantics)."""

from pathlib import Path

from delivery_semantics.entry.dag_factory import audit_dags

globals().update(audit_dags(Path(__file__).with_name("audits")))
'''

# The checkout's environment the team's has none of.
CHECKOUT_ONLY = (
    "PYTHONPATH",
    "SEMANTICS_HOME",
    "SEMANTICS_VAR",
    "SEMANTICS_NEMESIS_BACKEND",
    "SEMANTICS_KAFKA_CLIENT_JARS",
    "AIRFLOW_HOME",
    "AIRFLOW__CORE__DAGS_FOLDER",
    "AIRFLOW__CORE__PLUGINS_FOLDER",
)


@dataclass(frozen=True)
class Install:
    root: Path
    wheel: Path
    site: Path
    dags: Path
    env: dict[str, str]
    bin: Path = Path(sys.executable).parent

    def airflow(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / "airflow"), *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _without_a_jdk(path: str, folder: Path, keep: tuple[str, ...] = ()) -> Path:
    """One folder of links to every program on `path` but a JDK's (java, javac, keytool, ...: those
    whose real file lies in a JVM's folder) other than those named in `keep`: a worker's PATH with no
    JDK on it, or with a JRE's `java` alone."""
    folder.mkdir()
    for entry in path.split(os.pathsep):
        for program in sorted(Path(entry).glob("*")) if Path(entry).is_dir() else ():
            target = program.resolve()
            jdk = "/jvm/" in str(target) and program.name not in keep
            if (folder / program.name).exists() or jdk or not os.access(program, os.X_OK):
                continue
            if program.is_file():
                (folder / program.name).symlink_to(target)
    return folder


def build_wheel(out: Path) -> Path:
    subprocess.run([str(REPO / "local" / "package"), str(out)], check=True, capture_output=True, timeout=300)
    [wheel] = out.glob("delivery_semantics-*.whl")
    return wheel


def install(
    root: Path,
    audit_files: dict[str, str],
    spark_connection: str | None = None,
    fresh: bool = False,
    no_jdk: bool = False,
    jre_only: bool = False,
) -> Install:
    """The wheel installed under `root`, with a DAG folder of `audit_files` (name: text) and the team's
    DAG file; `spark_connection` (an AIRFLOW_CONN_ value) as its spark_default. `fresh`: in a new
    virtualenv of its own, Airflow and the providers installed there with a constraints file (the
    repository's lock, as a team uses Airflow's), as docs/DEPLOY.md says; else on a path of its own
    beside the repository's environment's Airflow. `no_jdk`: no `java` on its PATH and no JAVA_HOME,
    as on a managed Airflow's worker; `jre_only`: `java` alone of the JDK's programs (no `javac`)."""
    wheel = build_wheel(root / "dist")
    site = root / "site"
    bin_dir = Path(sys.executable).parent
    if fresh:
        venv = root / "venv"
        base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        subprocess.run([str(base), "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        bin_dir = venv / "bin"
        airflow = next(
            ln for ln in (REPO / "requirements.txt").read_text().splitlines() if ln.startswith("apache-airflow==")
        )
        subprocess.run(
            [
                str(bin_dir / "pip"),
                "install",
                "-q",
                "--constraint",
                str(REPO / "requirements.lock"),
                airflow.split()[0],
                f"delivery-semantics[airflow,spark] @ {wheel.as_uri()}",
            ],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        site = next((venv / "lib").glob("python3.*/site-packages"))
    else:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "-q",
                "--target",
                str(site),
                str(wheel),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    dags = root / "dags"
    (dags / "audits").mkdir(parents=True)
    (dags / "team_orders.py").write_text(TEAM_DAG_FILE)
    for name, text in audit_files.items():
        (dags / "audits" / name).write_text(text)
    (root / "plugins").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in CHECKOUT_ONLY}
    # The repository's environment's programs (spark-submit among them) are not on its PATH.
    env["PATH"] = os.pathsep.join(
        [str(bin_dir), *(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)]
    )
    env.update(
        PYTHONPATH="" if fresh else str(site),
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(root / "plugins"),
    )
    if spark_connection:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection
    if no_jdk or jre_only:
        env.pop("JAVA_HOME", None)
        others = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != bin_dir)
        kept = ("java",) if jre_only else ()
        env["PATH"] = os.pathsep.join([str(bin_dir), str(_without_a_jdk(others, root / "bin", kept))])
    return Install(root, wheel, site, dags, env, bin_dir)
