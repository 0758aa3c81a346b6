"""The PostgreSQL sink a consumer writes: the records it applied (sink_events) and the entity
state they update (sink_state, the latest version per key).

A batch is applied in one database transaction, in one of two ways:
- naive: every delivery is appended and overwrites its key's state, so a redelivered batch is
  written twice and rolls the state back to older versions until it catches up;
- dedup (seed 000's remedy): a delivery whose event id is already in the sink is skipped
  (insert-skip), and a key's state is replaced only by a newer version: (publish_at, seq) greater
  than the stored one. The sequence breaks ties because one producer batch shares a publish time.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg2.extras

from delivery_semantics.history.ledger import connect
from delivery_semantics.plumbing.endpoints import Database

_EVENT_COLUMNS = (
    "consumer_run_id, event_id, dedup_key, key, seq, publish_at, source_partition, source_offset, "
    "session, state_applied"
)
_EVENT_ROW = "(%s, %s, %s, %s, %s, to_timestamp(%s / 1000.0), %s, %s, %s, %s)"
_STATE_ROW = "(%s, %s, %s, %s, to_timestamp(%s / 1000.0))"
_STATE_UPSERT = (
    "INSERT INTO sink_state (consumer_run_id, key, event_id, seq, publish_at) VALUES %s "
    "ON CONFLICT (consumer_run_id, key) DO UPDATE SET event_id = EXCLUDED.event_id, "
    "seq = EXCLUDED.seq, publish_at = EXCLUDED.publish_at, updated_at = now()"
)


@dataclass(frozen=True, slots=True)
class SinkRecord:
    event_id: str
    key: str | None
    seq: int | None
    publish_at_ms: int | None
    partition: int
    offset: int


class Sink:
    def __init__(self, db: Database, consumer_run_id: str, dedup: bool):
        self.consumer_run_id, self.dedup = consumer_run_id, dedup
        self.conn = connect(db)

    def close(self) -> None:
        self.conn.close()

    def apply(self, records: list[SinkRecord], session: int) -> int:
        """Applies a batch in one transaction; returns how many records were written (under dedup,
        the ones not seen before)."""
        if not records:
            return 0
        with self.conn, self.conn.cursor() as cur:
            return self._apply_dedup(cur, records, session) if self.dedup else self._apply_naive(cur, records, session)

    def _apply_naive(self, cur, records: list[SinkRecord], session: int) -> int:
        rid = self.consumer_run_id
        psycopg2.extras.execute_values(
            cur,
            f"INSERT INTO sink_events ({_EVENT_COLUMNS}) VALUES %s",
            [
                (rid, r.event_id, None, r.key, r.seq, r.publish_at_ms, r.partition, r.offset, session, True)
                for r in records
            ],
            template=_EVENT_ROW,
            page_size=1000,
        )
        last = {r.key: r for r in records if r.key is not None}  # applied in order, each key ends at its last
        if last:
            psycopg2.extras.execute_values(
                cur,
                _STATE_UPSERT,
                [(rid, k, r.event_id, r.seq, r.publish_at_ms) for k, r in last.items()],
                template=_STATE_ROW,
                page_size=1000,
            )
        return len(records)

    def _apply_dedup(self, cur, records: list[SinkRecord], session: int) -> int:
        rid = self.consumer_run_id
        seen: set[str] = set()
        unique = [r for r in records if not (r.event_id in seen or seen.add(r.event_id))]
        inserted = psycopg2.extras.execute_values(
            cur,
            f"INSERT INTO sink_events ({_EVENT_COLUMNS}) VALUES %s "
            "ON CONFLICT (consumer_run_id, dedup_key) DO NOTHING RETURNING event_id",
            [
                (rid, r.event_id, r.event_id, r.key, r.seq, r.publish_at_ms, r.partition, r.offset, session, False)
                for r in unique
            ],
            template=_EVENT_ROW,
            page_size=1000,
            fetch=True,
        )
        new_ids = {row[0] for row in inserted}
        newest: dict[str, SinkRecord] = {}
        for r in unique:
            if r.event_id in new_ids and r.key is not None:
                cur_best = newest.get(r.key)
                if cur_best is None or _version(r) > _version(cur_best):
                    newest[r.key] = r
        if newest:
            applied = psycopg2.extras.execute_values(
                cur,
                _STATE_UPSERT + " WHERE (EXCLUDED.publish_at, EXCLUDED.seq) > (sink_state.publish_at, sink_state.seq) "
                "RETURNING event_id",
                [(rid, k, r.event_id, r.seq, r.publish_at_ms) for k, r in newest.items()],
                template=_STATE_ROW,
                page_size=1000,
                fetch=True,
            )
            if applied:
                cur.execute(
                    "UPDATE sink_events SET state_applied = true WHERE consumer_run_id = %s AND dedup_key = ANY(%s)",
                    (rid, [row[0] for row in applied]),
                )
        return len(new_ids)


def _version(r: SinkRecord) -> tuple[int, int]:
    return (r.publish_at_ms if r.publish_at_ms is not None else -1, r.seq if r.seq is not None else -1)
