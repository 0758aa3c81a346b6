"""`local/semantics gc`: the platform's own run topics, kept for the retention after their last
use, then deleted with their sizes recorded; a team's topic is never a candidate."""

from __future__ import annotations

import re

from conftest import REPO, run

from delivery_semantics.plumbing import topics
from delivery_semantics.reporting.report import query
from delivery_semantics.workload import load

GC = [str(REPO / "local" / "semantics"), "gc"]


def test_gc_lists_then_deletes_run_topics_past_their_retention_and_leaves_a_teams_topic(kafka_conf, fresh_topic):
    team_topic = fresh_topic("team")
    s = load.start(load.LoadSpec(mode="at_least_once", messages=2000, seed=5))
    topic = query("SELECT topic FROM runs WHERE run_id = %s", (s.run_id,))[0]["topic"]

    kept = run([*GC, "--keep-days", "1", "--dry-run"], check=True)
    assert topic not in kept.stdout, "used today: inside a day's retention"

    listed = run([*GC, "--keep-days", "0", "--dry-run"], check=True)
    [line] = [ln for ln in listed.stdout.splitlines() if ln.startswith(topic + "\t")]
    size = line.split("\t")[3]
    assert re.fullmatch(r"[0-9.]+ (KiB|MiB)", size), line  # 2,000 events on three replicas, measured
    assert "(dry run)" in listed.stderr and team_topic not in listed.stdout
    held = set(topics.admin_client(kafka_conf).list_topics(timeout=10).topics)
    assert topic in held, "a dry run deletes nothing"

    done = run([*GC, "--keep-days", "0"], check=True)
    assert re.search(r"gc: \d+ topics unused for over 0 days deleted, ", done.stderr), done.stderr
    held = set(topics.admin_client(kafka_conf).list_topics(timeout=10).topics)
    assert topic not in held and team_topic in held
    [retired] = query("SELECT owner, bytes FROM retired_topics WHERE topic = %s", (topic,))
    assert retired["owner"] == f"run {s.run_id}" and retired["bytes"] > 2000 * 3 * 100
    assert query("SELECT retired_at FROM platform_topics WHERE topic = %s", (topic,))[0]["retired_at"]
    again = run([*GC, "--keep-days", "0", "--dry-run"], check=True)
    assert topic not in again.stdout, "a retired topic is not listed again"
    # The run's verdict outlives its records: the ledger keeps the run.
    assert query("SELECT count(*) AS n FROM ledger_events WHERE run_id = %s", (s.run_id,))[0]["n"] == 2000


def test_gc_refuses_bad_input_in_one_line_before_deleting_anything():
    for args, message in (
        (["--keep-days", "-1"], "not a whole number"),
        (["--keep-days", "x"], "not a whole number"),
        (["--keep-days", "99999999"], "out of range"),
    ):
        res = run([*GC, *args])
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) <= 3, res.stderr
