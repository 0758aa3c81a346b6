-- What each delivery mode and consumer strategy is judged on: its isolation level and promise.
-- The catalog (plugins/delivery_semantics/catalog.py) defines them; schema.migrate writes them
-- here every time it runs, so the views read the catalog's mapping instead of repeating it.
CREATE TABLE catalog_judged (
    name       text PRIMARY KEY,
    side       text NOT NULL CHECK (side IN ('producer', 'consumer')),
    isolation  text NOT NULL CHECK (isolation IN ('read_committed', 'read_uncommitted')),
    promise    text NOT NULL
);

CREATE OR REPLACE VIEW v_run_results AS
SELECT r.run_id, r.created_at, r.ended_at, r.mode, r.scenario, r.topic, r.messages, r.status AS load_status,
       r.sessions, r.acked, r.failed, r.unknown, r.records_per_sec, r.ack_p50_ms, r.ack_p99_ms,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked AS lost,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'producer'::text AS side, NULL::text AS source_run_id, s.stale_overwrites
FROM runs r
JOIN catalog_judged j ON j.name = r.mode
JOIN reconcile_summary s ON s.reconciliation_id = r.run_id AND s.isolation = j.isolation
UNION ALL
SELECT c.consumer_run_id, c.created_at, c.ended_at, c.strategy, c.scenario, s.topic, src.messages, c.status,
       c.sessions, src.acked, src.failed, src.unknown, c.records_per_sec, NULL::double precision,
       NULL::double precision,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'consumer'::text, c.source_run_id, s.stale_overwrites
FROM consumer_runs c
JOIN runs src ON src.run_id = c.source_run_id
JOIN catalog_judged j ON j.name = c.strategy
JOIN reconcile_summary s ON s.reconciliation_id = c.consumer_run_id AND s.isolation = j.isolation;
