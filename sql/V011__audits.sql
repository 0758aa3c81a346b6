-- Audits of a team's own pipeline (audits/<name>.yaml): their reconciliations are tagged with
-- the audit's name, and one view shows each audit run at its mode's isolation level.
ALTER TABLE reconcile_summary ADD COLUMN audit text;
CREATE INDEX reconcile_summary_audit ON reconcile_summary (audit, first_reconciled_at) WHERE audit IS NOT NULL;
