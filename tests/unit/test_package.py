"""The distribution a team installs (docs/DEPLOY.md): the wheel holds the package, the SQL migrations,
the Spark applications and the Java sources, the console script and the provider entry point; the
provider's information is what Airflow's schema accepts; and no module finds a folder from where its
source lies (a copy in a managed Airflow's plugins folder has none of the repository around it)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import zipfile

import jsonschema
import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run([str(REPO / "local" / "package"), str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    [built] = out.glob("delivery_semantics-*-py3-none-any.whl")
    return built


def test_the_wheel_ships_what_the_platform_reads_at_run_time(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = "delivery_semantics/_shipped/"
    assert {p.name for p in (REPO / "sql").glob("*.sql")} == {
        n.removeprefix(f"{shipped}sql/") for n in names if n.startswith(f"{shipped}sql/")
    }
    for must in (
        f"{shipped}spark_apps/reconcile.py",
        f"{shipped}spark_apps/checker/driver.py",
        f"{shipped}spark_apps/java/PlatformTopicSource.java",
        f"{shipped}clients/java/SemanticsProducer.java",
        "delivery_semantics/mode.schema.json",
        "delivery_semantics/audit/audit.schema.json",
        "delivery_semantics/reporting/results.schema.json",
        "delivery_semantics/reporting/templates/page.html",
        "delivery_semantics/entry/dag_factory.py",
    ):
        assert must in names, must
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    version = re.search(r'^version = "(.+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    jar = f"{shipped}jvm/delivery-semantics-jvm-{version}.jar"
    assert jar in names, "the Java sources built once by Maven, at the package's version"
    with zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(wheel).read(jar))) as built:
        classes = set(built.namelist())
        manifest = built.read("META-INF/MANIFEST.MF").decode()
    assert {"SemanticsProducer.class", "deliverysemantics/PlatformTopicSource.class"} <= classes
    assert f"Implementation-Version: {version}" in manifest
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [ln for ln in zipfile.ZipFile(wheel).read(meta).decode().splitlines() if ln.startswith("Requires-Dist:")]
    core = [r for r in requires if "extra ==" not in r]
    assert not [r for r in core if re.match(r"Requires-Dist: (apache-airflow|pytest|ruff|playwright|hypothesis)", r)]
    assert not [r for r in requires if "==" in r.split(";")[0]], "lower bounds, no pins: a team's constraints decide"
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "semantics = delivery_semantics.entry.cli:main" in entry
    assert "provider_info = delivery_semantics.entry.provider:get_provider_info" in entry


def test_the_provider_info_is_what_airflow_accepts():
    import importlib.resources

    from delivery_semantics import locations
    from delivery_semantics.entry.provider import get_provider_info

    schema = json.loads((importlib.resources.files("airflow") / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert set(info["config"]["semantics"]["options"]) == set(locations.OPTIONS)
    [plugin] = info["plugins"]
    module, _, name = plugin["plugin-class"].rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name).name == "delivery_semantics"


def test_no_module_finds_a_folder_from_where_its_source_lies():
    found = []
    for root in ("plugins/delivery_semantics", "spark_apps", "dags"):
        for path in (REPO / root).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"(?<![\w.])__file__", line):
                    found.append(f"{path.relative_to(REPO)}:{n}")
    assert found == []


def test_a_setting_comes_from_airflows_semantics_section_inside_airflow(monkeypatch):
    from delivery_semantics import locations

    monkeypatch.delenv("SEMANTICS_RUN_MAX_SECONDS", raising=False)
    monkeypatch.setenv("AIRFLOW__SEMANTICS__RUN_MAX_SECONDS", "1234")
    from airflow.configuration import conf  # noqa: F401 (inside Airflow, its configuration is loaded)

    assert locations.setting("run_max_seconds") == "1234"
    monkeypatch.setenv("SEMANTICS_RUN_MAX_SECONDS", "99")
    assert locations.setting("run_max_seconds") == "99", "the environment first"
    with pytest.raises(locations.LocationError):
        locations.setting("run_max_second")
