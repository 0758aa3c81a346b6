-- Maintaining two text b-trees per event while a producer wrote was most of PostgreSQL's cost in a
-- load (bench/ledger_copy.py). A run's partitions are now written unindexed. When a producer
-- session ends, Ledger.seal builds one b-tree, by a sort, over the run's event numbers; a
-- duplicate event in the run fails it. Every reader of outcomes aggregates a whole run (hash
-- joins), so outcomes need no index.
ALTER TABLE ledger_events DROP CONSTRAINT ledger_events_pkey;
DROP INDEX ledger_outcomes_event;

-- Runs recorded before this version: seal them now, under the name seal uses.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'ledger_events'::regclass
    LOOP
        EXECUTE format('CREATE UNIQUE INDEX IF NOT EXISTS %I ON %I (n)', part.relname || '_n', part.relname);
    END LOOP;
END $$;

-- The per-event LATERAL lookup needed the outcomes index; one pass over the run's outcomes
-- does not. A filter on run_id reaches the subquery (it is the window's partition).
CREATE OR REPLACE VIEW ledger_event_status AS
SELECT e.run_id, e.n, e.event_id, e.key, e.seq, e.publish_at,
       COALESCE(o.status, 'pending') AS status, o."partition", o."offset", o.latency_us, o.error,
       COALESCE(o.attempts, 0) AS attempts
FROM ledger_events e
LEFT JOIN (
    SELECT DISTINCT ON (x.run_id, x.event_id)
           x.run_id, x.event_id, x.status, x."partition", x."offset", x.latency_us, x.error,
           count(*) OVER (PARTITION BY x.run_id, x.event_id) AS attempts
    FROM ledger_outcomes x
    -- an ack wins over anything else; otherwise the latest outcome
    ORDER BY x.run_id, x.event_id, (x.status = 'acked') DESC, (x.status = 'sent') DESC, x.outcome_no DESC
) o ON o.run_id = e.run_id AND o.event_id = e.event_id;
