"""What each mode promises under each scenario, and what DESIGN.md §3 expects to be observed.

The verdict (kept / broken) judges a run against the guarantees in force: a mode's promise has
conditions (acks=1 keeps acked events only while the leader survives; idempotence holds within
one producer session), so a scenario that breaks a condition lifts that guarantee. The
expectation is the observation the scenario exists to show (for example duplicates > 0 for
at_least_once under lost_ack); a run that does not show it means the fault did not bite.

Pure Python, no dependencies: the Spark checker's driver imports it too.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_ISOLATION = {
    "at_most_once": "read_uncommitted", "at_least_once": "read_uncommitted",
    "at_least_once_all": "read_uncommitted", "idempotent": "read_uncommitted",
    "transactional": "read_committed",
}

# The consumer side: a consumer strategy is judged on what it wrote (a sink table, or an output
# topic read as its readers would), having read its input read_committed.
STRATEGY_ISOLATION = {
    "commit_before_process": "read_committed", "process_then_commit": "read_committed",
    "process_then_commit_dedup": "read_committed", "transactional_copy": "read_committed",
}
CONSUMER_SCENARIOS = ("none", "consumer_crash")

# What every judged run (producer mode or consumer strategy) is judged on.
JUDGED_ISOLATION = {**MODE_ISOLATION, **STRATEGY_ISOLATION}

PROMISE_TEXT = {
    "at_most_once": "never a duplicate; loss allowed",
    "at_least_once": "no loss of acked events while the leader survives; duplicates allowed",
    "at_least_once_all": "no loss of acked events with min.insync.replicas=2 and one broker down; duplicates allowed",
    "idempotent": "no duplicates from retries within one producer session; no acked loss",
    "transactional": "exactly once for read_committed readers, across restarts; aborted batches never visible",
    "commit_before_process": "never a duplicate in the sink; loss allowed (offsets are committed before the write)",
    "process_then_commit": "no loss in the sink; redeliveries duplicate and overwrite with stale versions",
    "process_then_commit_dedup": "no loss, no duplicate and no stale overwrite in the sink, across restarts",
    "transactional_copy": "output topic exactly once for read_committed readers, across restarts",
}

LEADER_LOST = {"leader_kill", "isolated_leader"}


@dataclass(frozen=True)
class Guarantees:
    no_duplicates: bool
    no_acked_loss: bool
    no_aborted_visible: bool
    no_stale_overwrite: bool = False

    def names(self) -> list[str]:
        return [n for n in ("no_duplicates", "no_acked_loss", "no_aborted_visible", "no_stale_overwrite")
                if getattr(self, n)]


def guarantees(mode: str, scenario: str = "none") -> Guarantees:
    """The guarantees in force for the mode's (or consumer strategy's) own isolation level under
    the scenario."""
    if mode in STRATEGY_ISOLATION:
        return Guarantees(no_duplicates=mode != "process_then_commit", no_acked_loss=mode != "commit_before_process",
                          no_aborted_visible=mode == "transactional_copy",
                          no_stale_overwrite=mode == "process_then_commit_dedup")
    if mode not in MODE_ISOLATION:
        raise ValueError(f"unknown mode {mode!r}")
    no_dup = mode in ("at_most_once", "idempotent", "transactional")
    if mode == "idempotent" and scenario == "producer_crash":
        no_dup = False            # a restarted producer has a new PID
    no_loss = mode != "at_most_once"
    if mode == "at_least_once" and scenario in LEADER_LOST:
        no_loss = False           # acks=1 keeps acked events only while the leader survives
    return Guarantees(no_dup, no_loss, mode == "transactional")


# (mode, scenario) -> {observation: ">0" | "=0"}: what DESIGN.md §3 says the pair must show.
EXPECTATIONS: dict[tuple[str, str], dict[str, str]] = {
    **{(m, "none"): {"lost": "=0", "duplicate_events": "=0"} for m in MODE_ISOLATION},
    ("at_least_once", "lost_ack"): {"duplicate_events": ">0", "lost_acked": "=0"},
    ("at_least_once_all", "lost_ack"): {"duplicate_events": ">0", "lost_acked": "=0"},
    ("idempotent", "lost_ack"): {"duplicate_events": "=0", "lost_acked": "=0"},
    ("transactional", "lost_ack"): {"duplicate_events": "=0", "lost_acked": "=0"},
    ("at_most_once", "leader_kill"): {"lost": ">0", "duplicate_events": "=0"},
    ("at_least_once_all", "leader_kill"): {"lost_acked": "=0"},
    ("idempotent", "leader_kill"): {"lost_acked": "=0", "duplicate_events": "=0"},
    ("transactional", "leader_kill"): {"lost_acked": "=0", "duplicate_events": "=0"},
    ("at_least_once", "isolated_leader"): {"lost_acked": ">0"},
    ("at_least_once_all", "isolated_leader"): {"lost_acked": "=0"},
    ("idempotent", "isolated_leader"): {"lost_acked": "=0"},
    ("transactional", "isolated_leader"): {"lost_acked": "=0", "duplicate_events": "=0"},
    ("at_most_once", "producer_crash"): {"duplicate_events": "=0"},
    ("at_least_once", "producer_crash"): {"lost_acked": "=0"},
    ("at_least_once_all", "producer_crash"): {"lost_acked": "=0"},
    ("idempotent", "producer_crash"): {"lost_acked": "=0"},
    ("transactional", "producer_crash"): {"lost_acked": "=0", "duplicate_events": "=0"},
    ("transactional", "txn_abort"): {"lost_acked": "=0", "duplicate_events": "=0", "aborted_visible": "=0"},
    **{(s, "none"): {"lost": "=0", "duplicate_events": "=0"} for s in STRATEGY_ISOLATION},
    ("commit_before_process", "consumer_crash"): {"lost": ">0", "duplicate_events": "=0"},
    ("process_then_commit", "consumer_crash"): {"duplicate_events": ">0", "lost": "=0"},
    ("process_then_commit_dedup", "consumer_crash"): {"duplicate_events": "=0", "lost": "=0", "stale_overwrites": "=0"},
    ("transactional_copy", "consumer_crash"): {"duplicate_events": "=0", "lost": "=0", "aborted_visible": "=0"},
}


def expectation(mode: str, scenario: str) -> dict[str, str]:
    return EXPECTATIONS.get((mode, scenario), {})


def expectation_text(mode: str, scenario: str) -> str:
    return ", ".join(f"{k} {v[0]} {v[1:]}" for k, v in expectation(mode, scenario).items()) or "-"


def _observed(counts: dict, name: str) -> int:
    if name == "lost":
        return int(counts.get("lost_acked", 0)) + int(counts.get("lost_unacked", 0))
    return int(counts.get(name) or 0)


def meets_expectation(mode: str, scenario: str, counts: dict) -> bool | None:
    exp = expectation(mode, scenario)
    if not exp:
        return None
    return all((_observed(counts, k) > 0) if v == ">0" else (_observed(counts, k) == 0) for k, v in exp.items())


def verdict(mode: str, scenario: str, isolation: str, counts: dict) -> tuple[str, list[str]]:
    """('kept' | 'broken' | 'n/a', kinds that broke it). Judged on the mode's own isolation level."""
    if JUDGED_ISOLATION.get(mode) != isolation:
        return "n/a", []
    g = guarantees(mode, scenario)
    broken = []
    if g.no_duplicates and int(counts.get("duplicate_events", 0)) > 0:
        broken.append("duplicate")
    if g.no_acked_loss and int(counts.get("lost_acked", 0)) > 0:
        broken.append("lost_acked")
    if g.no_aborted_visible and int(counts.get("aborted_visible", 0)) > 0:
        broken.append("aborted_visible")
    if g.no_stale_overwrite and int(counts.get("stale_overwrites") or 0) > 0:
        broken.append("stale_overwrite")
    return ("broken" if broken else "kept"), broken
