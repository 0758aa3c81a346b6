-- Audits of a team's own pipeline (audits/<name>.yaml): their reconciliations are tagged with
-- the audit's name, and one view shows each audit run at its mode's isolation level.
ALTER TABLE reconcile_summary ADD COLUMN audit text;
CREATE INDEX reconcile_summary_audit ON reconcile_summary (audit, first_reconciled_at) WHERE audit IS NOT NULL;

CREATE VIEW v_audit_results AS
SELECT s.audit, s.reconciliation_id, s.first_reconciled_at AS reconciled_at, s.topic, s.mode, s.isolation,
       s.records_read, s.ledger_events AS outbox_events, s.ledger_acked AS outbox_acked, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected,
       s.out_of_order, s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by
FROM reconcile_summary s
JOIN catalog_judged j ON j.name = s.mode AND j.isolation = s.isolation
WHERE s.audit IS NOT NULL;
