"""The unit tier: no Kafka, PostgreSQL or Airflow services. Spark runs in local mode in-process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "spark_apps")]
# A checkout is the platform's home: its sql/, spark_apps/, audits/ and var/ (delivery_semantics.locations).
os.environ.setdefault("SEMANTICS_HOME", str(REPO))
# A run is validated with the nemesis's backend it would heal with. The unit tier has no stack to
# heal: the docker backend's constructor touches nothing.
os.environ.setdefault("SEMANTICS_NEMESIS_BACKEND", "docker")
# Python UDFs (the Protobuf decoder) run in this interpreter, which has pandas and protobuf.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The Java client's settings are checked by its ProducerConfig in a JVM: the jars `local/setup` fetched.
os.environ.setdefault("SEMANTICS_KAFKA_CLIENT_JARS", str(REPO / ".cache" / "kafka" / "lib"))


def cli(*args: str, **extra_env: str):
    """`local/semantics ARGS` as a user runs it, without the stack's connections."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
    env.update(extra_env, PYTHONPATH=str(REPO / "plugins"))
    return subprocess.run(
        [sys.executable, "-m", "delivery_semantics.entry.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from delivery_semantics.plumbing.spark import spark_jars

    session = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", spark_jars())  # Avro's from_avro among them
        .appName("unit")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Tiny frames, a new plan for each: compiling each costs more than running it interpreted
        # (test_anomalies.py 155 s against 203 s). The integration tier runs them compiled.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
