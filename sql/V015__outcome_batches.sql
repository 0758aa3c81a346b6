-- One outcome row per produced batch, not one per event: a 1M-event run wrote 1M outcome rows,
-- most of the ledger's cost in a load (docs/BENCHMARKS.md). A batch row holds the event numbers
-- it covers as ranges [n_lo[i], n_hi[i]), and per event, in n order, its partition, offset and ack
-- latency. Only a batch's clean outcomes go there (acked, sent, written); an event that failed, is
-- unknown or was aborted gets a row of its own, as every outcome did before this version.
--
-- Readers keep one row per event: `ledger_outcomes` is now a view that expands the batches and
-- adds the per-event rows, so SQL on it, and `ledger_event_status`, read as before.

ALTER TABLE ledger_outcomes RENAME TO ledger_event_outcomes;

CREATE TABLE ledger_batches (
    outcome_no    bigint      NOT NULL DEFAULT nextval('ledger_outcomes_outcome_no_seq'),
    run_id        text        NOT NULL,
    producer      integer     NOT NULL DEFAULT 0,
    session       integer     NOT NULL,
    status        text        NOT NULL CHECK (status IN ('acked', 'sent', 'written')),
    txn_no        bigint,
    n_lo          bigint[]    NOT NULL,
    n_hi          bigint[]    NOT NULL,
    partitions    integer[]   NOT NULL,
    offsets       bigint[]    NOT NULL,  -- NULL elements when sent with acks=0
    latencies_us  bigint[]    NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(n_lo) = cardinality(n_hi) AND cardinality(partitions) = cardinality(offsets)
           AND cardinality(partitions) = cardinality(latencies_us))
) PARTITION BY LIST (run_id);

-- Runs recorded before this version have no batch partition: give them one, so every run has
-- the same partitions.
DO $$
DECLARE part record;
BEGIN
    FOR part IN
        SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'ledger_events'::regclass
    LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF ledger_batches %s',
                       replace(part.relname, 'ledger_events_', 'ledger_batches_'), part.bound);
    END LOOP;
END $$;

-- The event numbers of a batch, in order.
CREATE FUNCTION batch_ns(n_lo bigint[], n_hi bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM unnest(n_lo, n_hi) AS r(lo, hi), generate_series(lo, hi - 1) AS n
$$;
