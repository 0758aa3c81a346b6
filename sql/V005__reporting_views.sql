-- Reporting views for SQL users and BI tools. A run is judged on its mode's own isolation level
-- (read_committed for transactional, read_uncommitted otherwise).

CREATE VIEW v_run_results AS
SELECT r.run_id, r.created_at, r.ended_at, r.mode, r.scenario, r.topic, r.messages, r.status AS load_status,
       r.sessions, r.acked, r.failed, r.unknown, r.records_per_sec, r.ack_p50_ms, r.ack_p99_ms,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked AS lost,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation
FROM runs r
JOIN reconcile_summary s
  ON s.reconciliation_id = r.run_id
 AND s.isolation = CASE WHEN r.mode = 'transactional' THEN 'read_committed' ELSE 'read_uncommitted' END;

-- Run history, newest first, including runs not reconciled yet.
CREATE VIEW v_run_history AS
SELECT r.run_id, r.created_at, r.mode, r.scenario, r.messages, r.status AS load_status, r.acked,
       r.records_per_sec, v.lost, v.duplicate_events, v.verdict, v.meets_expectation,
       (v.run_id IS NOT NULL) AS reconciled
FROM runs r LEFT JOIN v_run_results v USING (run_id)
ORDER BY r.created_at DESC;

-- The latest reconciled run of every mode x scenario pair.
CREATE VIEW v_latest_matrix AS
SELECT DISTINCT ON (mode, scenario)
       mode, scenario, run_id, created_at, messages, lost_acked, lost_unacked, lost, duplicate_events,
       duplicate_copies, aborted_visible, out_of_order, verdict, broken_by, expectation, meets_expectation,
       records_per_sec
FROM v_run_results
ORDER BY mode, scenario, created_at DESC;

-- Daily trends per mode and scenario: loss and duplicate rates and throughput.
CREATE VIEW v_trends AS
SELECT date_trunc('day', created_at) AS day, mode, scenario, count(*) AS runs,
       avg(loss_rate) AS loss_rate, avg(duplicate_rate) AS duplicate_rate,
       avg(records_per_sec) AS records_per_sec,
       count(*) FILTER (WHERE verdict = 'broken') AS broken_runs
FROM v_run_results
GROUP BY 1, 2, 3;

-- Broken promises, with the events that broke them.
CREATE VIEW v_open_violations AS
SELECT v.run_id, v.created_at, v.mode, v.scenario, v.promise, v.broken_by, d.kind, d.event_id, d.copies,
       d."partitions", d."offsets"
FROM v_run_results v
JOIN reconcile_discrepancies d
  ON d.reconciliation_id = v.run_id AND d.isolation = v.isolation
 AND d.kind = ANY (string_to_array(v.broken_by, ','))
WHERE v.verdict = 'broken';
