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
