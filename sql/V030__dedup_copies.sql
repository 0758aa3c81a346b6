-- Where each reconciliation's deduplicated copy is: a partition of the lakehouse's Delta table
-- dedup_events (its path, and the Delta version that wrote it), or the rows of dedup_events here.
-- Written in the same transaction as the reconciliation's results: a partition no row names was
-- left by a checker killed before its results, and its rerun replaces it.
CREATE TABLE dedup_copies (
    reconciliation_id  text        PRIMARY KEY,
    store              text        NOT NULL CHECK (store IN ('lakehouse', 'postgres')),
    location           text        NOT NULL,
    delta_version      bigint,
    row_count          bigint      NOT NULL,
    written_at         timestamptz NOT NULL DEFAULT now()
);
