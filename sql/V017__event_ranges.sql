-- A generated run's write-ahead events as ranges, not rows. Its producer recorded each batch's
-- events before sending them as one row per event, which PostgreSQL derived from the batch's
-- range of n and indexed at the seal: most of what the ledger still cost a load
-- (docs/BENCHMARKS.md). Now a batch is one `ledger_event_ranges` row, [n_lo, n_hi) published at
-- one time, and the events are derived from it where they are read, the way Generator.event
-- derives them. Events that are not generated (a hand-made ledger) are rows, as before, in
-- `ledger_event_rows`: the table `ledger_events` was, with its partitions.
--
-- Readers keep one row per event: `ledger_events` is now a view of both.

ALTER TABLE ledger_events RENAME TO ledger_event_rows;

CREATE TABLE ledger_event_ranges (
    run_id       text        NOT NULL,
    n_lo         bigint      NOT NULL,
    n_hi         bigint      NOT NULL CHECK (n_hi > n_lo),
    keys         integer     NOT NULL CHECK (keys > 0),
    publish_at   timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (run_id);

-- Runs recorded before this version get a ranges partition too, so every run has the same ones.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'ledger_event_rows'::regclass
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF ledger_event_ranges %s',
                       replace(part.relname, 'ledger_events_', 'ledger_ranges_'), part.bound);
    END LOOP;
END $$;
