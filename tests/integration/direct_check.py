"""An oracle for tests: the topic read back with one consumer, set against the ledger, in memory.
Small runs only; the product's checker is the Spark application."""

from __future__ import annotations

from dataclasses import dataclass

from delivery_semantics.history.ledger import Ledger
from delivery_semantics.workload import readback


@dataclass
class Observed:
    events: int
    acked: int
    distinct_in_topic: int
    records_in_topic: int
    duplicates: int  # extra copies beyond the first
    duplicated_events: int
    lost_acked: int
    lost_unacked: int
    unexpected: int

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.__dict__.items())


def observe(kafka_conf: dict, ledger: Ledger, run_id: str, isolation: str) -> Observed:
    run = ledger.get_run(run_id)
    records = readback.read_topic(kafka_conf, run["topic"], isolation, covering=run["acked_ends"])
    copies = readback.copies_by_event(records)
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            """SELECT e.event_id, bool_or(o.status = 'acked')
                       FROM ledger_events e LEFT JOIN ledger_outcomes o USING (run_id, event_id)
                       WHERE e.run_id = %s GROUP BY e.event_id""",
            (run_id,),
        )
        status = {eid: bool(acked) for eid, acked in cur.fetchall()}
    missing = [eid for eid in status if eid not in copies]
    return Observed(
        events=len(status),
        acked=sum(status.values()),
        distinct_in_topic=len(copies),
        records_in_topic=len(records),
        duplicates=sum(c - 1 for c in copies.values() if c > 1),
        duplicated_events=sum(1 for c in copies.values() if c > 1),
        lost_acked=sum(1 for eid in missing if status[eid]),
        lost_unacked=sum(1 for eid in missing if not status[eid]),
        unexpected=sum(1 for eid in copies if eid not in status),
    )


def written_ends(ledger: Ledger, run_id: str) -> dict[int, int]:
    """Where a fault-free run's records end in each partition of its fresh topic: its acked ends,
    and for acks=0 (no offsets known) the number of events sent there, the topic holding nothing
    else. For readback.read_topic's `covering`."""
    ends = {int(p): end for p, end in (ledger.get_run(run_id)["acked_ends"] or {}).items()}
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "SELECT \"partition\", count(*) FROM ledger_outcomes WHERE run_id = %s AND status = 'sent' GROUP BY 1",
            (run_id,),
        )
        for p, sent in cur.fetchall():
            ends[p] = max(ends.get(p, 0), sent)
    return ends
