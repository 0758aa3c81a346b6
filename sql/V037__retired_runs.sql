-- A run's records retired by `local/semantics gc` once its topic is: its partitions of the ledger's
-- or the sink's tables, its per-event discrepancy rows and its deduplicated copies. Its summary and
-- verdict stay (reconcile_summary, v_run_results); this says when its events went and how much.
CREATE TABLE retired_runs (
    run_id          text PRIMARY KEY,
    side            text NOT NULL CHECK (side IN ('producer', 'consumer')),
    database_bytes  bigint NOT NULL,
    result_rows     bigint NOT NULL,
    copy_rows       bigint NOT NULL,
    lakehouse_bytes bigint,
    retired_at      timestamptz NOT NULL DEFAULT now()
);
