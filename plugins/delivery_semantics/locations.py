"""Where the platform's settings and files are, wherever it is installed.

A setting is `SEMANTICS_<NAME>` in the environment or, inside Airflow, `<name>` in the `[semantics]`
section of Airflow's configuration (the provider declares the section; `AIRFLOW__SEMANTICS__<NAME>`
sets it as every Airflow option is set). The files the platform ships (the SQL migrations, the Spark
applications, the Java sources) come from the installed package; its state (reports, the lakehouse,
builds) lies under one home. Nothing is found from where a source file lies: copied into a managed
Airflow's plugins folder, that points at folders that do not exist there.
"""

from __future__ import annotations

import importlib.resources
import os
import sys
from pathlib import Path

PACKAGE = "delivery_semantics"
# The package's copy of the repository's folders, made by the build (setup.py's SHIPPED).
SHIPPED = "_shipped"

# Every setting, as the provider declares them in Airflow's [semantics] section and docs/SETTINGS.md
# lists them: name, what it is, its default.
OPTIONS: dict[str, tuple[str, str]] = {
    "home": (
        "the platform's home: its audits/ and modes/ folders, var/ and .cache/ (a checkout: the repository)",
        "semantics in AIRFLOW_HOME",
    ),
    "var": (
        "what the platform writes: reports, the lakehouse, builds (the local stack's data and secrets too)",
        "var in the home",
    ),
    "audits_dir": (
        "the audit files, one DAG each (audit_<name>), where no DAG file names a folder",
        "audits in the home",
    ),
    "modes_dir": ("the mode files, one DAG each (semantics_mode_<name>)", "modes in the home"),
    "pipelines_dir": (
        "where a connector pipeline's run writes the audit it makes for itself (pipeline_<run>.yaml)",
        "pipelines in var",
    ),
    "sql_dir": ("the schema's migrations and views, applied by semantics init or db migrate", "the package's sql"),
    "spark_apps": ("the checker's Spark applications", "the package's spark_apps"),
    "reports_dir": ("where report and the matrix write HTML reports", "reports in var"),
    "lakehouse": (
        "the lakehouse the deduplicated copies go to: a folder every executor can write, or a URI (s3a://bucket/semantics)",
        "lakehouse in var",
    ),
    "data_roots": (
        "the folders or URI prefixes (comma separated) an audit's sink.path and dedup_copy.path must lie under",
        "the lakehouse and the audit file's folder",
    ),
    "data_disks": (
        "folders (separated by :) where the cluster's, the ledger's and the lakehouse's data live: a run their free space cannot hold is refused",
        "no check",
    ),
    "keystore_dir": (
        "the private folder (0700) of the PKCS12 keystores made from a connection's TLS client key",
        "semantics-keystores-<uid> in the temporary folder",
    ),
    "teams": ("the operator's YAML file: each team's folders and the connections their files may name", "one team"),
    "platform_connections": (
        "more connection ids no file may name (comma separated), beside ledger_db, spark_default, toxiproxy_default, kafka_connect, kafka_connect_eos",
        "none",
    ),
    "run_max_seconds": ("the longest a load may take", "21600"),
    "run_memory_mb": ("what a run's producers may hold together", "8192"),
    "spark_max_cores": ("the most cores an audit's spark: may ask (spark.cores.max, driver and executor cores)", "8"),
    "spark_max_executors": ("the most executors an audit may ask", "8"),
    "spark_max_memory_mb": ("the most memory of each kind an audit may ask", "16384"),
    "spark_max_seconds": ("the timeout of a task that submits a Spark application", "7200"),
    "min_schedule_minutes": ("the shortest interval a file's schedule may fire at", "5"),
    "retention_days": ("how long gc keeps a run's topic and records", "7"),
    "spark_conf": (
        "Spark settings (a JSON object) over the platform's defaults and under an audit's spark: and the Spark connection's conf",
        "{}",
    ),
    "spark_jars": (
        "the Kafka source's and Delta's jars (comma separated), or a folder of them",
        ".cache/spark/jars in the home",
    ),
    "spark_reader_jar": (
        "the checker's platform-topic reader, built (no JDK needed where it is given)",
        "the installed package's jar, else compiled on first use",
    ),
    "spark_class_archive": (
        "the JVM class archive that shortens a local Spark driver's start",
        "made once per JVM and Spark build",
    ),
    "kafka_retry_seconds": ("how long the checker tries Kafka (and the results database) again before exit 75", "120"),
    "kafka_client_jars": (
        "the kafka-clients jars the Java load client compiles and runs against",
        "none: the Java client cannot run",
    ),
    "java_build": ("where the Java load client is compiled", "java in var"),
    "java_classes": (
        "the Java load client, built (a JRE is then enough)",
        "the installed package's jar, else compiled on first use",
    ),
    "nemesis_backend": (
        "how faults reach brokers: docker (compose), or a class as module:Class",
        "the local stack's processes",
    ),
    "compose_project": ("the compose project the docker nemesis acts on (its containers' labels)", "none"),
    "docker_socket": ("the Docker Engine's socket, for the docker nemesis", "/var/run/docker.sock"),
}


class LocationError(RuntimeError):
    """A folder the platform needs is neither configured nor shipped: one line."""


def setting(name: str) -> str | None:
    """SEMANTICS_<NAME> from the environment, else [semantics] <name> from Airflow's configuration
    when this process runs inside Airflow (it is not imported for it: a Spark executor or the CLI
    reads the environment only, and importing Airflow's configuration writes a default airflow.cfg)."""
    if name not in OPTIONS:
        raise LocationError(f"no setting {name!r}")  # a misspelt name would read as unset
    value = os.environ.get(f"SEMANTICS_{name.upper()}")
    if value:
        return value
    configuration = sys.modules.get("airflow.configuration")
    if configuration is None:
        return None
    try:
        value = configuration.conf.get("semantics", name.lower(), fallback=None)
    except Exception:  # an Airflow still loading its configuration: the environment alone
        return None
    return value or None


def home() -> Path:
    """The platform's home: SEMANTICS_HOME (a checkout of the repository sets it to itself), else
    `semantics` in Airflow's home."""
    given = setting("home")
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("AIRFLOW_HOME") or "~/airflow").expanduser() / "semantics"


def state(*parts: str) -> Path:
    """Where the platform keeps what it writes (SEMANTICS_VAR, else `var` in its home)."""
    return Path(setting("var") or home() / "var", *parts)


def shipped(name: str) -> Path:
    """A folder the package ships (`sql`, `spark_apps`, `clients`): the installed package's copy, else
    the home's (a checkout runs from its own folders)."""
    packaged = importlib.resources.files(PACKAGE) / SHIPPED / name
    if packaged.is_dir():
        return Path(str(packaged))
    folder = home() / name
    if not folder.is_dir():
        raise LocationError(
            f"the platform's {name}/ is neither in the installed package nor in SEMANTICS_HOME ({home()}): "
            "install the delivery-semantics wheel, or set SEMANTICS_HOME to a checkout"
        )
    return folder


def package_text(*parts: str) -> str:
    """A file of the package itself (a JSON schema), wherever it is imported from: a folder, or the
    zip a cluster-mode Spark driver imports it from."""
    return importlib.resources.files(PACKAGE).joinpath(*parts).read_text()


def package_parent() -> Path:
    """The folder the package is imported from, for a child process's PYTHONPATH."""
    return Path(str(importlib.resources.files(PACKAGE))).parent


def sql_dir() -> Path:
    return Path(setting("sql_dir") or shipped("sql"))


def spark_apps_dir() -> Path:
    return Path(setting("spark_apps") or shipped("spark_apps"))


def audits_dir() -> Path:
    return Path(setting("audits_dir") or home() / "audits")


def modes_dir() -> Path:
    return Path(setting("modes_dir") or home() / "modes")


def pipelines_dir() -> Path:
    return Path(setting("pipelines_dir") or state("pipelines"))


def reports_dir() -> Path:
    return Path(setting("reports_dir") or state("reports"))


def lakehouse() -> str:
    """A folder every Spark executor can write, or a URI such as s3a://bucket/semantics."""
    return setting("lakehouse") or str(state("lakehouse"))


def cache(*parts: str) -> Path:
    """What set-up fetched or built once (Spark's jars, the driver class archive): `.cache` in the home."""
    return Path(home(), ".cache", *parts)
