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

    def airflow(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def build_wheel(out: Path) -> Path:
    subprocess.run([str(REPO / "local" / "package"), str(out)], check=True, capture_output=True, timeout=300)
    [wheel] = out.glob("delivery_semantics-*.whl")
    return wheel


def install(root: Path, audit_files: dict[str, str], spark_connection: str | None = None) -> Install:
    """The wheel installed under `root`, with a DAG folder of `audit_files` (name: text) and the team's
    DAG file; `spark_connection` (an AIRFLOW_CONN_ value) as its spark_default."""
    wheel = build_wheel(root / "dist")
    site = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
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
    env.update(
        PYTHONPATH=str(site),
        AIRFLOW_HOME=str(root / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(root / "plugins"),
    )
    if spark_connection:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection
    return Install(root, wheel, site, dags, env)
