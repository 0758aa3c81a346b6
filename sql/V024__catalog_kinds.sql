-- The catalog's anomaly kinds as a table (catalog.KINDS; schema.migrate writes every row after
-- the migrations): what each kind means, its name in Jepsen's checker, the reconcile_summary
-- column that counts it, the audit stages that report it, and the guarantee it breaks. A
-- discrepancy's kind is one of them, by foreign key instead of a list in a CHECK that each new
-- kind had to rewrite.
CREATE TABLE catalog_kinds (
    name            text PRIMARY KEY,
    jepsen          text,
    summary_column  text,
    stages          text[] NOT NULL DEFAULT '{}',
    breaks          text,
    description     text
);
INSERT INTO catalog_kinds (name)
SELECT unnest(ARRAY['duplicate', 'lost_acked', 'lost_unacked', 'lost', 'unknown_landed', 'unexpected', 'late',
                    'out_of_order', 'aborted_visible', 'torn_transaction', 'inconsistent_offset', 'poll_skip',
                    'nonmonotonic_poll', 'malformed', 'stale_overwrite']);

ALTER TABLE reconcile_discrepancies DROP CONSTRAINT reconcile_discrepancies_kind_check;
ALTER TABLE reconcile_discrepancies ADD CONSTRAINT reconcile_discrepancies_kind_fkey
    FOREIGN KEY (kind) REFERENCES catalog_kinds (name);
ALTER TABLE audit_discrepancies DROP CONSTRAINT audit_discrepancies_kind_check;
ALTER TABLE audit_discrepancies ADD CONSTRAINT audit_discrepancies_kind_fkey
    FOREIGN KEY (kind) REFERENCES catalog_kinds (name);
