"""Tests run against the real local stack (`make test` starts it). Nothing here is mocked."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "spark_apps"), str(REPO / "local")]

import devstack  # noqa: E402
from delivery_semantics.plumbing import endpoints, spark, topics  # noqa: E402
from delivery_semantics.plumbing.endpoints import kafka_config  # noqa: E402

ARTIFACTS = REPO / "artifacts"


@pytest.fixture(scope="session", autouse=True)
def stack_env():
    """The stack must already be up (make test starts it); export its environment."""
    os.environ.update(devstack.environment())
    down = [name for name, state, _, _ in devstack.status_rows() if state != "up"]
    if down:
        pytest.exit(
            f"local stack is not up ({', '.join(down)} down): run `make test`, or `local/stack start`", returncode=3
        )
    if "SEMANTICS_SPARK_CONF" not in os.environ:
        # The driver's class archive local/setup wrote, which the platform's own options name too.
        archive = spark.spark_class_archive()
        jvm = f"{SMALL_RUN_JVM} -XX:SharedArchiveFile={archive}" if archive.is_file() else SMALL_RUN_JVM
        # No test looks at an application's web UI, and its server takes a second or two to start.
        # The standalone cluster's executors start a JVM per application too (the rerun there: 188 s
        # against 214 s with theirs on C2); the archive is the driver's, whose class path it matches.
        os.environ["SEMANTICS_SPARK_CONF"] = json.dumps(
            {
                "spark.driver.extraJavaOptions": jvm,
                "spark.executor.extraJavaOptions": SMALL_RUN_JVM,
                "spark.ui.enabled": "false",
            }
        )
    ARTIFACTS.mkdir(exist_ok=True)
    return os.environ


# Every run here is small (thousands of events), so a Spark application is mostly JVM warm-up, and
# no JVM option changes a result. The client compiler alone saves about 10 s of each one's 40-55 s
# (a 3,000-event reconcile with the copy: 39.3/44.5 s against 48.6/56.5 s); big runs keep C2.
SMALL_RUN_JVM = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"


SECONDS_BY_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Each file's time, for the summary (CI's budget is spent by file); and a failure's cause printed as it happens, with the disk's free space and the stack's services
    that are down: a run stopped by CI's time limit never reaches pytest's summary, and a stack
    broken halfway (a full disk, a broker down) fails every test after it."""
    path = report.nodeid.split("::")[0]
    SECONDS_BY_FILE[path] = SECONDS_BY_FILE.get(path, 0.0) + report.duration
    if not report.failed:
        return
    free = shutil.disk_usage(REPO).free / 2**30
    try:
        down = ", ".join(name for name, state, _, _ in devstack.status_rows() if state != "up") or "none"
    except Exception as e:  # what is down is a hint; the failure is still reported
        down = f"unknown ({e})"
    cause = (report.longreprtext or "").strip().splitlines()[-12:]
    sys.stderr.write(
        f"\n--- {report.nodeid} failed in {report.when} ({free:.1f} GiB free; down: {down})\n" + "\n".join(cause) + "\n"
    )


def pytest_terminal_summary(terminalreporter):
    if not SECONDS_BY_FILE:
        return
    terminalreporter.section("time by file")
    for path, seconds in sorted(SECONDS_BY_FILE.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
    terminalreporter.write_line(f"{sum(SECONDS_BY_FILE.values()):8.1f} s  in all")


_SAMPLER = None


def pytest_sessionstart(session):
    """Every process's arguments, sampled through the run (secret_scan.ProcessSampler): a
    spark-submit or a JVM is gone by the run's end."""
    global _SAMPLER
    if _in_parallel():
        return
    import secret_scan

    try:
        _SAMPLER = secret_scan.ProcessSampler().start()
    except Exception as e:  # no stack: the tests that need it say so
        sys.stderr.write(f"\nsecret scan: processes not sampled ({type(e).__name__}: {str(e)[:200]})\n")


def pytest_sessionfinish(session, exitstatus):
    """The secret scan over the whole run (secret_scan.py): a secret of the stack in a process's
    arguments (sampled through the run, and at its end), a log, an artifact, a row of the results
    database or of Airflow's, or a record of the stack's topics fails the run, naming where, never
    the secret."""
    sampled = _SAMPLER.stop() if _SAMPLER is not None else []
    if not session.testscollected or exitstatus not in (0, 1) or _in_parallel():
        return
    import secret_scan

    try:
        found = sampled + secret_scan.findings()
    except Exception as e:  # the stack is down: the tests that needed it said so already
        sys.stderr.write(f"\nsecret scan: not run ({type(e).__name__}: {str(e)[:200]})\n")
        return
    if found:
        sys.stderr.write("\nsecret scan: secrets found in " + "; ".join(found[:20]) + "\n")
        session.exitstatus = 1
    else:
        sys.stderr.write(
            f"\nsecret scan: no secret in any process's arguments ({_SAMPLER.samples if _SAMPLER else 0} samples "
            "through the run, and at its end), log, artifact, result row, Airflow row or the stack's topics\n"
        )


# The suite runs in two phases (`make integration`): the rest in two processes (pytest-xdist, a
# file to a process), on their own topics and tables; then, one at a time, the files below and the
# tests marked `serial` (or using healthy_cluster_after) that stop, pause or cut off brokers,
# restart PostgreSQL, delete every run topic, or time what a busy machine would slow.
SERIAL_FILES = {
    "test_faults.py",
    "test_modes.py",  # isolated_leader
    "test_pipelines.py",
    "test_platform_faults.py",  # PostgreSQL restarted
    "test_stack.py",  # brokers stopped and proxies disabled
}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SERIAL_FILES or "healthy_cluster_after" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serial)


def _in_parallel() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def _retire_run_topics() -> None:
    from delivery_semantics.reporting import retention

    try:
        conf, db = kafka_config(), endpoints.ledger_database()
        refused = retention.retire(db, conf, retention.expired(db, conf, 0, sizes=False))
    except Exception as e:  # the module's own tests said what is wrong with the stack
        refused = [f"{type(e).__name__}: {str(e)[:200]}"]
    if refused:
        sys.stderr.write(f"\nrun topics not retired: {'; '.join(refused[:5])}\n")


@pytest.fixture(scope="module", autouse=True)
def retire_run_topics_before_each_module(stack_env):
    """Run topics are retired as `local/semantics gc --keep-days 0` would, before each module that
    runs alone: a broker the nemesis restarts recovers and catches up every partition it holds, and
    with every run's topic kept (hundreds by the end of the suite) each heal took seconds longer.
    Before, not after: the next module's retirement takes the topics this one made (3-4 s each
    saved). Never in the parallel phase, where another process's run may be under way."""
    if not _in_parallel():
        _retire_run_topics()


@pytest.fixture
def kafka_conf():
    return kafka_config()


@pytest.fixture
def fresh_topic(kafka_conf):
    """A new RF=3, min ISR 2 topic, deleted afterwards."""
    created = []

    def make(prefix: str = "test", partitions: int = 3, config: dict | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        topics.ensure_topic(kafka_conf, name, partitions=partitions, config=config)
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            topics.delete_topic(kafka_conf, name)
        except Exception:
            pass


def recreate_topic(conf: dict, name: str, partitions: int = 3) -> None:
    topics.recreate_topic(conf, name, partitions)


def run(cmd: list[str], timeout: float = 600, env: dict | None = None, check: bool = False):
    res = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if check and res.returncode != 0:
        raise AssertionError(f"{cmd} exited {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


# Where a test's subject is not how Spark starts, its Spark applications go to the stack's Spark
# Connect server, whose driver is already running: no JVM start of 40-55 s each (CI's budget). Local
# mode (the demo, the DAG files' own tests), spark-submit to the standalone cluster and a killed
# checker keep tests of their own.
def through_spark_connect() -> dict[str, str]:
    """The environment that makes `spark_default` the Spark Connect server, for a command."""
    return {"AIRFLOW_CONN_SPARK_DEFAULT": os.environ["AIRFLOW_CONN_SPARK_CONNECT"]}


@contextlib.contextmanager
def spark_connect_default():
    """`spark_default` as the Spark Connect server in this process (and the commands it runs)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in through_spark_connect().items():
            patch.setenv(name, value)
        yield


def semantics(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """The product's command line (as `local/semantics` runs it) with its Spark on the Connect server."""
    return run([sys.executable, "-m", "delivery_semantics.entry.cli", *args], timeout, through_spark_connect())


def airflow_query(sql: str, **params) -> list[dict]:
    """Rows of the stack's Airflow database."""
    from sqlalchemy import create_engine, text

    engine = create_engine(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    try:
        with engine.connect() as c:
            return [dict(r._mapping) for r in c.execute(text(sql), params)]
    finally:
        engine.dispose()


def airflow_xcom(dag_id: str, task_id: str, key: str):
    """The newest value of an XCom."""
    [row] = airflow_query(
        "SELECT value FROM xcom WHERE dag_id = :d AND task_id = :t AND key = :k ORDER BY timestamp DESC LIMIT 1",
        d=dag_id,
        t=task_id,
        k=key,
    )
    value = row["value"]
    return json.loads(value) if isinstance(value, str | bytes) else value


def assert_judged(res) -> list[dict]:
    """A judging command's exit code is its verdict's (docs/OPERATIONS.md): 1 when a summary's promise,
    or its sink's, is broken, else 0; its summaries, one JSON line each."""
    summaries = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    broken = any("broken" in (s.get("verdict"), s.get("sink_verdict")) for s in summaries)
    assert summaries and res.returncode == (1 if broken else 0), (res.returncode, res.stderr[-3000:])
    if broken:
        assert res.stderr.rstrip().endswith("verdict broken (exit 1)"), res.stderr[-500:]
    return summaries


@pytest.fixture
def healthy_cluster_after(kafka_conf):
    """For tests that stop brokers: bring every broker back through `stack start` and assert the
    cluster is whole again (3 brokers, full ISR on the internal topics)."""
    yield
    res = run([str(REPO / "local" / "stack"), "start"], timeout=300)
    assert res.returncode == 0, res.stderr
    devstack.wait_for_cluster(timeout=120)
    md = topics.admin_client(kafka_conf).list_topics(timeout=10)
    assert len(md.brokers) == 3
    for t in md.topics:
        topics.wait_for_full_isr(kafka_conf, t, timeout=120)


def spark_cluster_apps() -> list[str]:
    """The names of the applications the stack's Spark standalone master has run and runs."""
    import urllib.request

    from devstack.spark import MASTER_UI_PORT

    with urllib.request.urlopen(f"http://127.0.0.1:{MASTER_UI_PORT}/json/", timeout=5) as r:
        state = json.loads(r.read())
    return [a["name"] for a in state.get("completedapps", []) + state.get("activeapps", [])]
