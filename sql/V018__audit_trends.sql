-- Trends of a team's audits, one row per check: each batch reconciliation and each window of a
-- continuous audit, with its loss and duplicate rates over the outbox events it judged. Daily
-- trends of the matrix's runs are v_trends (V005); their points are v_run_results.
CREATE VIEW v_audit_trends AS
SELECT audit, 'batch'::text AS source, reconciled_at AS at, reconciliation_id AS check_id,
       outbox_events AS events, lost_acked + lost_unacked AS lost, duplicate_events, 0::bigint AS late,
       loss_rate, duplicate_rate, verdict
FROM v_audit_results
UNION ALL
SELECT audit, 'window', window_end, reconciliation_id,
       outbox_due, lost_acked + lost_unacked, duplicate_events, late,
       (lost_acked + lost_unacked)::double precision / greatest(outbox_due, 1),
       duplicate_copies::double precision / greatest(outbox_due, 1),
       verdict
FROM audit_windows;
