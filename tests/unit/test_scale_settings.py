"""Where the checker runs and what it keeps: Spark settings in layers, the deduplicated copy's
store, and a continuous audit's horizon, as audit files and connections give them."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from conftest import REPO

from checker.dedup_copy import DedupCopy, sql_string
from delivery_semantics.audit import audits
from delivery_semantics.audit.stores.spark_jdbc import libpq_params
from delivery_semantics.plumbing import endpoints, spark
from delivery_semantics.plumbing.endpoints import EndpointError
from delivery_semantics.plumbing.spark import spark_conf, spark_master

ORDERS = REPO / "audits" / "orders.yaml"
STREAM = REPO / "audits" / "orders_stream.yaml"


def _audit(tmp_path, edit, base=ORDERS):
    spec = yaml.safe_load(base.read_text())
    edit(spec)
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_spark_settings_layer_defaults_environment_audit_and_connection(monkeypatch):
    monkeypatch.delenv("SEMANTICS_SPARK_CONF", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    local = spark_conf("local[2]")
    assert (local["spark.sql.shuffle.partitions"], local["spark.driver.memory"]) == ("8", "2g")
    assert local["spark.sql.adaptive.enabled"] == "true", "AQE sizes the shuffles"
    cluster = spark_conf("spark://127.0.0.1:7077")
    assert cluster["spark.sql.shuffle.partitions"] == "32", "a cluster's AQE coalesces from 32"
    assert "spark.driver.extraJavaOptions" not in cluster and cluster["spark.sql.adaptive.enabled"] == "true"

    monkeypatch.setenv("SEMANTICS_SPARK_CONF", json.dumps({"spark.driver.memory": "3g", "spark.executor.cores": 2}))
    audit = {"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": "32"}
    conn = {"conn_type": "spark", "host": "spark://m", "port": 7077, "extra": {"conf": {"spark.driver.memory": "5g"}}}
    assert spark_conf("local[2]", audit)["spark.driver.memory"] == "4g", "the audit over the environment"
    assert spark_conf("local[2]")["spark.executor.cores"] == "2", "the environment over the defaults"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))
    layered = spark_conf(spark_master(), audit)
    assert spark_master() == "spark://m:7077"
    assert (layered["spark.driver.memory"], layered["spark.sql.shuffle.partitions"]) == ("5g", "32")

    monkeypatch.setenv("SEMANTICS_SPARK_CONF", "spark.driver.memory=3g")
    with pytest.raises(EndpointError, match="SEMANTICS_SPARK_CONF is not a JSON object"):
        spark_conf("local[2]")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT")
    monkeypatch.setattr(endpoints, "get_connection", _no_connection)
    assert spark_master() == "local[2]", "no Spark connection: local mode"


def test_a_local_driver_starts_from_the_class_archive_once_there_is_one(monkeypatch, tmp_path):
    monkeypatch.delenv("SEMANTICS_SPARK_CONF", raising=False)
    monkeypatch.setattr(endpoints, "get_connection", _no_connection)
    archive = tmp_path / "driver-classes.jsa"
    monkeypatch.setenv("SEMANTICS_SPARK_CLASS_ARCHIVE", str(archive))
    assert spark_conf("local[2]")["spark.driver.extraJavaOptions"] == "-XX:+UseParallelGC", "none yet"
    archive.write_bytes(b"")
    assert (
        spark_conf("local[2]")["spark.driver.extraJavaOptions"] == f"-XX:+UseParallelGC -XX:SharedArchiveFile={archive}"
    )
    assert "spark.driver.extraJavaOptions" not in spark_conf("spark://m:7077"), (
        "a cluster's driver is not ours to start"
    )
    monkeypatch.setenv("SEMANTICS_SPARK_CONF", json.dumps({"spark.driver.extraJavaOptions": "-Xss4m"}))
    assert spark_conf("local[2]")["spark.driver.extraJavaOptions"] == "-Xss4m", "the environment's options win whole"
    monkeypatch.delenv("SEMANTICS_SPARK_CLASS_ARCHIVE")
    default = spark.spark_class_archive()
    assert default.parent == REPO / ".cache" / "spark" and default.name.startswith("driver-classes-")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "another-jdk"))
    assert spark.spark_class_archive() != default, "one archive per JVM"


def _no_connection(conn_id):
    raise EndpointError(f"connection {conn_id!r} is not set")


def test_an_audits_spark_section_and_copy_store_are_read_and_checked(tmp_path):
    spark = {"spark.executor.memory": "4g", "spark.sql.adaptive.enabled": True, "spark.executor.instances": 3}
    path = _audit(tmp_path, lambda s: s.update(spark=spark, dedup_copy={"store": "lakehouse", "path": "lake"}))
    audit = audits.load(path)
    assert audit.spark_conf == {
        "spark.executor.memory": "4g",
        "spark.sql.adaptive.enabled": "true",
        "spark.executor.instances": "3",
    }
    assert audit.dedup_copy == {"store": "lakehouse", "path": str(tmp_path / "lake")}, "the audit's folder's"
    for edit, message in [
        (lambda s: s.update(spark={"executor.memory": "4g"}), r"spark: 'executor.memory' is not one of"),
        (lambda s: s.update(dedup_copy={"store": "s3"}), r"dedup_copy.store: 's3' is not one of"),
    ]:
        bad = _audit(tmp_path, edit)
        with pytest.raises(audits.AuditError, match=f"^{bad}: {message}"):
            audits.load(bad)


def test_a_continuous_audit_keeps_a_week_of_sightings_unless_it_says_otherwise(tmp_path):
    assert audits.load(STREAM).dedup_horizon.total_seconds() == 3 * 3600, "the sample keeps 3h"
    assert audits.load(_audit(tmp_path, lambda s: s["window"].pop("dedup_horizon"), STREAM)).dedup_horizon.days == 7
    assert (
        audits.load(
            _audit(tmp_path, lambda s: s["window"].update(dedup_horizon="36h"), STREAM)
        ).dedup_horizon.total_seconds()
        == 36 * 3600
    )
    for edit, message in [
        (lambda s: s["window"].update(dedup_horizon="1 week"), r"window.dedup_horizon: '1 week' is not a duration"),
        (
            lambda s: s["window"].update(grace="2h", dedup_horizon="2h"),
            r"window.dedup_horizon: 2h must be longer than the grace \(2h\)",
        ),
    ]:
        bad = _audit(tmp_path, edit, STREAM)
        with pytest.raises(audits.AuditError, match=f"^{bad}: {message}"):
            audits.load(bad)


def test_the_copy_goes_to_the_lakehouse_unless_told_and_needs_one(monkeypatch):
    monkeypatch.setenv("SEMANTICS_LAKEHOUSE", "/data/lake/")
    assert DedupCopy.choose("lakehouse").location == "/data/lake/dedup_events"
    assert DedupCopy.choose("lakehouse", {"path": "s3a://b/semantics"}).location == "s3a://b/semantics/dedup_events"
    assert DedupCopy.choose("lakehouse", {"store": "postgres"}) == DedupCopy("postgres")
    assert not DedupCopy.choose("off").wanted and DedupCopy.choose("off").session_conf == {}
    assert "io.delta.sql.DeltaSparkSessionExtension" in DedupCopy.choose("lakehouse").session_conf.values()
    monkeypatch.delenv("SEMANTICS_LAKEHOUSE")
    with pytest.raises(ValueError, match="the lakehouse copy needs SEMANTICS_LAKEHOUSE"):
        DedupCopy.choose("lakehouse")
    monkeypatch.delenv("SEMANTICS_LAKEHOUSE", raising=False)
    assert spark.lakehouse().endswith("var/lakehouse"), "the platform's default"


def test_a_partition_is_named_as_a_spark_literal_and_the_copy_connects_as_libpq():
    assert sql_string("audit:o:manual__x") == "'audit:o:manual__x'"
    assert sql_string("a'b\\c") == "'a\\'b\\\\c'"
    assert libpq_params("jdbc:postgresql://db:5433/semantics?sslmode=require&ApplicationName=x", "u", "p") == {
        "host": "db",
        "port": 5433,
        "dbname": "semantics",
        "user": "u",
        "password": "p",
        "sslmode": "require",
    }
    with pytest.raises(ValueError, match="needs a PostgreSQL results database"):
        libpq_params("jdbc:mariadb://db/x", "u", "p")


_CONCURRENT_COPIES = r"""
import datetime, json, sys, threading
from pyspark.sql import SparkSession
from checker.dedup_copy import DedupCopy, prepare, write_lakehouse
from delivery_semantics.plumbing.spark import SPARK_CONF_LOCAL

copy = DedupCopy("lakehouse", sys.argv[1])
builder = SparkSession.builder.master("local[2]").config("spark.jars", sys.argv[2])
for k, v in {**copy.session_conf, **SPARK_CONF_LOCAL}.items():
    builder = builder.config(k, v)
# A checkpoint every three commits (Delta's default is ten): the reruns below pass one in four writes.
builder = builder.config("spark.databricks.delta.properties.defaults.checkpointInterval", "3")
spark = builder.config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
cols = "event_id string, reconciliation_id string, key string, seq bigint, publish_at timestamp, partition int, offset bigint, value binary"

def rows(rid, n):
    at = datetime.datetime(2026, 11, 28, tzinfo=datetime.timezone.utc)
    return spark.createDataFrame([(f"{rid}-{i}", rid, "k", i, at, 0, i, b"v%d" % i) for i in range(n)], cols)

written = {}
def write(rid, n):
    written[rid] = write_lakehouse(spark, copy, rows(rid, n), rid)
# The snapshot made ahead of a write, on a table that does not exist yet: nothing, and no error.
early = prepare(spark, copy)
early.join(120)
assert not early.is_alive()
# Two reconciliations at once on a table that does not exist yet: both create it.
threads = [threading.Thread(target=write, args=(rid, n)) for rid, n in (("audit:o:a'1", 3), ("r2", 5))]
for t in threads: t.start()
for t in threads: t.join()
write("r2", 4)  # a rerun replaces its own partition
# Past the checkpoint interval (3 commits here): the table is then read from a Parquet checkpoint.
# Each write with the table's snapshot being made beside it, as the checker makes it.
for n in range(1, 5):
    prepare(spark, copy)
    write("r3", n)
counts = {r["reconciliation_id"]: r["n"] for r in spark.read.format("delta").load(copy.location).groupBy("reconciliation_id").count().withColumnRenamed("count", "n").collect()}
import pyarrow.parquet as pq
from urllib.parse import unquote, urlparse
# The files of r3's last write (its 4 rows): how each column is encoded in each.
current = spark.read.format("delta").load(copy.location).where("reconciliation_id = 'r3'").inputFiles()
encodings = {}
for f in current:
    rg = pq.ParquetFile(unquote(urlparse(f).path)).metadata.row_group(0)
    for i in range(rg.num_columns):
        dictionary = any("DICTIONARY" in e for e in rg.column(i).encodings)
        encodings.setdefault(rg.column(i).path_in_schema, set()).add("dictionary" if dictionary else "plain")
encodings = {c: sorted(e) for c, e in encodings.items()}

# What each file added by the table's commit `version` keeps statistics of: its count, and the
# columns with a minimum.
def stats(location, version):
    with open(f"{location}/_delta_log/{version:020d}.json") as log:
        adds = [json.loads(line)["add"] for line in log if line.startswith('{"add"')]
    return sorted({c for a in adds for c in ["numRecords", *json.loads(a["stats"]).get("minValues", {})]})

# A table made before the copy chose its statistics columns (Delta's default: the first 32), then
# written twice by the copy: once as it was, then told.
old = DedupCopy("lakehouse", sys.argv[1] + "-old")
defaults = "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns"
spark.conf.unset(defaults)
rows("r0", 2).write.format("delta").partitionBy("reconciliation_id").save(old.location)
spark.conf.set(defaults, copy.session_conf[defaults])
old_versions = [write_lakehouse(spark, old, rows(rid, 3), rid)[0] for rid in ("r0", "r1")]
# Nothing to copy (an empty topic, or no record with an event id): a new reconciliation, a rerun
# that empties its partition, and a table that does not exist yet.
empty = {"new": write_lakehouse(spark, copy, rows("r4", 0), "r4"), "r5": write_lakehouse(spark, copy, rows("r5", 2), "r5")}
empty["rerun"] = write_lakehouse(spark, copy, rows("r5", 0), "r5")
fresh = DedupCopy("lakehouse", sys.argv[1] + "-fresh")
empty["fresh"] = write_lakehouse(spark, fresh, rows("r9", 0), "r9")
after = {r["reconciliation_id"]: r["n"] for r in spark.read.format("delta").load(copy.location).groupBy("reconciliation_id").count().withColumnRenamed("count", "n").collect()}
stats6 = stats(copy.location, 6)
print("RESULT " + json.dumps({"counts": counts, "written": written, "encodings": encodings, "stats": stats6, "old_stats": [stats(old.location, v) for v in old_versions], "empty": empty, "after": after}))
"""


def test_two_copies_written_at_once_each_land_whole_and_a_rerun_replaces_its_own(tmp_path):
    """The lakehouse copy's Delta write, in a Spark with Delta's runtime: two reconciliations'
    partitions written at once on a table neither found (each creates it), then a rerun of one
    with fewer rows, then reruns past the checkpoint Delta writes every ten commits. Each partition
    holds exactly its rows, and each write names its own commit."""
    import subprocess
    import sys

    from delivery_semantics.plumbing.spark import spark_jars

    script = tmp_path / "copies.py"
    script.write_text(_CONCURRENT_COPIES)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'spark_apps'}:{REPO / 'plugins'}"}
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "lake"), spark_jars()],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, next((ln for ln in res.stderr.splitlines() if "Error" in ln), res.stderr[-3000:])
    result = json.loads(next(ln for ln in res.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert result["counts"] == {"audit:o:a'1": 3, "r2": 4, "r3": 4}
    versions = {rid: v for rid, (v, _) in result["written"].items()}
    assert versions["r2"] == 2 and versions["audit:o:a'1"] in (0, 1), "the table's first two commits, then the rerun"
    assert result["written"]["r2"][1] == 4, "the rerun's commit and its rows"
    assert result["written"]["audit:o:a'1"][1] == 3
    # In every file, a column with a value per row is written without a dictionary; the key
    # (repeated) keeps its own.
    encodings = result["encodings"]
    assert {c: encodings[c] for c in ("event_id", "seq", "offset", "value", "key")} == {
        "event_id": ["plain"],
        "seq": ["plain"],
        "offset": ["plain"],
        "value": ["plain"],
        "key": ["dictionary"],
    }
    assert result["written"]["r3"] == [6, 4], "the fourth rerun is the seventh commit, read past a checkpoint"
    # Each file's statistics: its count, and the range of its positions and publish times only.
    assert result["stats"] == ["numRecords", "offset", "partition", "publish_at"]
    everything = ["event_id", "key", "numRecords", "offset", "partition", "publish_at", "seq"]
    assert result["old_stats"] == [everything, ["numRecords", "offset", "partition", "publish_at"]]
    # Nothing to copy: no crash, no rows, and a rerun with nothing empties its partition.
    assert result["empty"]["new"][1] == 0 and result["empty"]["rerun"][1] == 0 and result["empty"]["fresh"][1] == 0
    assert result["after"] == {"audit:o:a'1": 3, "r2": 4, "r3": 4}, "r5's rerun with no rows emptied it; r4 has none"
    table = tmp_path / "lake" / "dedup_events"
    assert list((table / "_delta_log").glob("*.checkpoint*")), "Delta wrote a checkpoint"
    # The query path without Spark reads the same table, checkpoint and all.
    from delivery_semantics.reporting.dedup import lakehouse_table

    def partitions() -> dict:
        rids = lakehouse_table(str(table)).to_table(columns=["reconciliation_id"]).column(0).to_pylist()
        return {r: rids.count(r) for r in set(rids)}

    assert partitions() == {"audit:o:a'1": 3, "r2": 4, "r3": 4}
    # The files the reruns replaced (r2's first write, r3's first three) are vacuumed, and only they:
    # not the current ones, nor a failed commit's (a writer that lost the race to create the table
    # and tried again), which no commit names.
    import deltalake

    from delivery_semantics.reporting.dedup import vacuum

    def data_files(pattern: str = "*.parquet") -> set[str]:
        return {f.name for f in table.glob(f"reconciliation_id=*/{pattern}")}

    live = {Path(unquote(urlparse(u).path)).name for u in deltalake.DeltaTable(str(table)).file_uris()}
    added = {
        Path(unquote(json.loads(line)["add"]["path"])).name
        for log in (table / "_delta_log").glob("*.json")
        for line in log.read_text().splitlines()
        if line.startswith('{"add"')
    }
    replaced, never_committed = added - live, data_files() - added
    assert live < added and len(replaced) >= 4, "r2's first write, and r3's first three"
    assert vacuum(retain_hours=24, location=str(table)) == [], "replaced within the last day"
    listed = vacuum(retain_hours=0, dry_run=True, location=str(table))
    assert {Path(f).name for f in listed} == replaced and data_files() >= replaced
    assert sorted(vacuum(retain_hours=0, location=str(table))) == sorted(listed)
    assert data_files() == live | never_committed
    assert data_files(".*.parquet.crc") >= {f".{f}.crc" for f in live}, "the current files keep their checksums"
    assert partitions() == {"audit:o:a'1": 3, "r2": 4, "r3": 4}
    assert vacuum(retain_hours=0, location=str(table)) == []


def test_the_spark_jars_are_a_folder_or_a_list_and_carry_the_platform_reader(monkeypatch, tmp_path):
    fetched = REPO / ".cache" / "spark" / "jars"
    monkeypatch.setenv("SEMANTICS_SPARK_JARS", str(fetched))
    monkeypatch.delenv("SEMANTICS_SPARK_READER_JAR", raising=False)
    *jars, reader = spark.spark_jars().split(",")
    assert jars == sorted(str(p) for p in fetched.glob("*.jar"))
    assert "deliverysemantics/PlatformTopicSource.class" in zipfile.ZipFile(reader).namelist()
    # The same source and jars: the same build, never compiled again.
    assert spark.spark_jars().split(",")[-1] == reader
    monkeypatch.setenv("SEMANTICS_SPARK_JARS", ",".join(jars[:2]))
    monkeypatch.setenv("SEMANTICS_SPARK_READER_JAR", "/opt/reader.jar")
    assert spark.spark_jars().split(",") == [*jars[:2], "/opt/reader.jar"]
    monkeypatch.delenv("SEMANTICS_SPARK_READER_JAR")
    with pytest.raises(EndpointError, match="no kafka-clients jar"):
        spark.spark_jars()
    monkeypatch.setenv("SEMANTICS_SPARK_JARS", str(tmp_path))
    with pytest.raises(EndpointError, match="no Spark jars"):
        spark.spark_jars()


def test_a_java_source_that_does_not_compile_is_one_line_and_leaves_nothing(monkeypatch, tmp_path):
    from delivery_semantics.plumbing import javac

    monkeypatch.setenv("SEMANTICS_JAVA_BUILD", str(tmp_path / "build"))
    broken = tmp_path / "Broken.java"
    broken.write_text("public class Broken { int x = ; }\n")
    with pytest.raises(javac.JavacError, match=r"^javac failed on Broken.java: .*Broken.java") as e:
        javac.jar(broken, "")
    assert "\n" not in str(e.value)
    assert list((tmp_path / "build").iterdir()) == []
