"""Where and how the platform's Spark applications run: the Spark connection's master and
settings, the jars and the Python files they ship, the cluster's shared secret, the lakehouse
folder, and local mode's driver class archive."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

from delivery_semantics import locations
from delivery_semantics.plumbing import spark_clusters
from delivery_semantics.plumbing.endpoints import SPARK_CONN_ID, EndpointError, get_connection, private_dir

# Spark settings, lowest first: these defaults (local mode's, or a cluster's), SEMANTICS_SPARK_CONF
# (a JSON object in the environment), an audit's `spark:` section, and the `conf` of the Spark
# connection's extra, which says where the application runs and with what.
SPARK_CONF_ANYWHERE = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    # AQE sizes the shuffles from what they hold: a few partitions for a small run, more for 10M events.
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "64m",
    # The checker caches lean reads (ids as numbers, no payloads): compressing them costs more CPU
    # than it saves. At 10M events, 100 s instead of 104-108 s (docs/BENCHMARKS.md).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}
# Local mode has 2 cores; the default 200 shuffle partitions would be 200 tiny tasks.
SPARK_CONF_LOCAL = {
    **SPARK_CONF_ANYWHERE,
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    # In local mode the tasks run in the driver's JVM. The checker allocates a short-lived row per
    # record read; the throughput collector spends less on that than G1, the JVM's default, with
    # its write barriers: at 10M events, 39.8-42.6 s against 44.0-45.3 s (docs/BENCHMARKS.md).
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
    # Delta rebuilds a table's state in 50 tasks by default, at each write of the lakehouse copy:
    # on 2 cores, 13 writes took 147 s, and 69 s in 2 tasks.
    "spark.databricks.delta.snapshotPartitions": "2",
}
# On a cluster AQE coalesces each shuffle from 32 partitions: a small run does not pay for 200 tasks a
# stage (a 27-record run took minutes on the stack's standalone worker with Spark's 200), and a big
# one raises it in the connection's conf (docs/SCALE.md). The driver only holds the summaries.
SPARK_CONF_CLUSTER = {**SPARK_CONF_ANYWHERE, "spark.sql.shuffle.partitions": "32", "spark.driver.memory": "1g"}


def spark_master(conn_id: str = SPARK_CONN_ID) -> str:
    """Where the Spark connection says applications run (local[2] when there is none)."""
    try:
        c = get_connection(conn_id)
    except EndpointError:
        return "local[2]"
    host = c.host or "local[2]"
    master = f"{host}:{c.port}" if c.port and not host.startswith(("local", "yarn")) else host
    if master.startswith("sc://") and c.password and "token=" in master:
        raise EndpointError(f"connection {conn_id!r}: the Connect token is the password field, not in the URL")
    try:
        spark_clusters.cluster_manager(master)
    except EndpointError as e:
        raise EndpointError(f"connection {conn_id!r}: {e}") from None
    return master


def spark_conf(master: str, audit_conf: dict | None = None, conn_id: str = SPARK_CONN_ID) -> dict[str, str]:
    """The settings of a platform Spark application running at `master`, lowest layer first."""
    base = SPARK_CONF_LOCAL if master.startswith("local") else SPARK_CONF_CLUSTER
    try:
        env = json.loads(locations.setting("spark_conf") or "{}")
    except json.JSONDecodeError as e:
        raise EndpointError(f"SEMANTICS_SPARK_CONF is not a JSON object: {e}") from None
    try:
        extra = get_connection(conn_id).extra.get("conf") or {}
    except EndpointError:
        extra = {}
    for name, layer in (("SEMANTICS_SPARK_CONF", env), (f"connection {conn_id!r} extra conf", extra)):
        if not isinstance(layer, dict):
            raise EndpointError(f"{name} must be an object of Spark settings")
    if master.startswith("local") and (archive := spark_class_archive()).is_file():
        options = f"{base['spark.driver.extraJavaOptions']} -XX:SharedArchiveFile={archive}"
        base = {**base, "spark.driver.extraJavaOptions": options}
    return {k: str(v) for k, v in {**base, **env, **(audit_conf or {}), **extra}.items()}


def pyspark_jars() -> Path:
    """The jars of the pyspark installed here: Spark's own."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def spark_class_archive() -> Path:
    """Local mode's Spark driver class archive (the JVM's class data sharing: the classes an
    application loads, parsed and verified once, mapped at each start; about 5 s of each
    application here, docs/BENCHMARKS.md). local/setup writes it (reconcile.write_class_archive):
    one per JVM and Spark build, or the file SEMANTICS_SPARK_CLASS_ARCHIVE names."""
    given = locations.setting("spark_class_archive")
    if given:
        return Path(given)
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else Path(shutil.which("java") or "java")
    # A JVM refuses an archive whose jars are not the very files it was made from (their times):
    # a reinstalled pyspark, of the same version, needs an archive of its own.
    jars = pyspark_jars()
    try:
        java = java.resolve(strict=True)
        build = f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{jars}:{jars.stat().st_mtime_ns}"
    except OSError:
        build = f"no java:{pyspark.__version__}"
    key = hashlib.sha256(build.encode()).hexdigest()[:16]
    return locations.cache("spark", f"driver-classes-{key}.jsa")


def spark_jars(platform_reader: bool = True) -> str:
    """Comma-separated jars for spark-submit: the Kafka source, Delta, Avro, the JDBC drivers
    (fetched once, or the jars or folder in SEMANTICS_SPARK_JARS), and for the platform's own runs
    the checker's platform topic reader (spark_apps/java: SEMANTICS_SPARK_READER_JAR, else the
    installed package's jar, else compiled against them on first use). An audit reads its topic with Spark's Kafka source: a
    team's worker needs no JDK for it."""
    given = locations.setting("spark_jars")
    if given and Path(given).is_dir():
        found = sorted(str(p) for p in Path(given).glob("*.jar"))
    elif given:
        found = given.split(",")
    else:
        found = sorted(str(p) for p in locations.cache("spark", "jars").glob("*.jar"))
    if not found:
        raise EndpointError("no Spark jars: set SEMANTICS_SPARK_JARS or run local/setup")
    return ",".join([*found, platform_reader_jar(found)] if platform_reader else found)


def reads_platform_topics(app_args: list[str]) -> bool:
    """Whether the checker's arguments name platform runs (their topics are read by the platform's
    reader), not an audit."""
    return "--audit" not in app_args


def platform_reader_jar(jars: list[str]) -> str:
    """The checker's reader of platform runs' topics, as a jar: given, shipped, or compiled against
    Spark's own jars (pyspark's) and the Kafka client among `jars`."""
    from delivery_semantics.plumbing import javac

    given = locations.setting("spark_reader_jar")
    if given:
        return given
    if prebuilt := javac.prebuilt():
        return str(prebuilt)
    spark_own = sorted(str(p) for p in pyspark_jars().glob("*.jar"))
    kafka = [j for j in jars if Path(j).name.startswith("kafka-clients-")]
    if not kafka:
        raise EndpointError("no kafka-clients jar among the Spark jars (SEMANTICS_SPARK_JARS)")
    try:
        return str(
            javac.jar(spark_apps_dir() / "java" / "PlatformTopicSource.java", os.pathsep.join(spark_own + kafka))
        )
    except javac.JavacError as e:
        raise EndpointError(str(e)) from None


def spark_py_files() -> str:
    """The checker's Python packages (spark_apps/checker and delivery_semantics) as one zip for
        --py-files: a cluster's executors import them in their Python workers (the COPY writer, the
        Protobuf decoder). Made once per content, in a private folder (private_dir), and made again
    when what it holds is not byte for byte the sources."""
    roots = [(spark_apps_dir(), "checker"), (locations.package_parent(), locations.PACKAGE)]
    members = sorted(
        (str(p.relative_to(root)), p)
        for root, package in roots
        for p in (root / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    digest = _content_digest((name, p.read_bytes()) for name, p in members)
    target = private_dir("py") / f"semantics-py-{digest[:16]}.zip"
    if target.exists() and _zip_digest(target) == digest:
        return str(target)
    partial = target.with_suffix(f".{os.getpid()}.part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for name, p in members:
            z.write(p, name)
    partial.replace(target)
    return str(target)


def _content_digest(members) -> str:
    digest = hashlib.sha256()
    for name, data in members:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def _zip_digest(path: Path) -> str | None:
    """The digest of what a zip holds, as _content_digest has it: a zip whose members differ from the
    sources by a byte (or that is not a zip) is made again."""
    try:
        with zipfile.ZipFile(path) as z:
            return _content_digest((i.filename, z.read(i)) for i in sorted(z.infolist(), key=lambda i: i.filename))
    except (OSError, zipfile.BadZipFile):
        return None


def spark_auth_env(conn_id: str = SPARK_CONN_ID) -> dict[str, str]:
    """A cluster's spark.authenticate secret, or a Spark Connect server's bearer token, from the
    Spark connection's password, as the environment variable Spark's driver (or Connect's client)
    reads it from (never a --conf: `ps` shows those)."""
    try:
        c = get_connection(conn_id)
    except EndpointError:
        return {}
    if not c.password:
        return {}
    if (c.host or "").startswith("sc://"):
        return {"SPARK_CONNECT_AUTHENTICATE_TOKEN": c.password}
    return {"_SPARK_AUTH_SECRET": c.password}


def lakehouse() -> str:
    """Where the platform's lakehouse tables (the deduplicated copies) live: SEMANTICS_LAKEHOUSE, a
    folder every Spark executor can write or a URI such as s3a://bucket/semantics, or var/lakehouse."""
    return locations.lakehouse()


def spark_apps_dir() -> Path:
    return locations.spark_apps_dir()
