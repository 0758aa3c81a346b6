-- The latest run of every mode x scenario pair, producer modes and consumer strategies alike, now
-- with the stale overwrites a consumer's sink showed and the side the row comes from.
CREATE OR REPLACE VIEW v_latest_matrix AS
SELECT DISTINCT ON (mode, scenario)
       mode, scenario, run_id, created_at, messages, lost_acked, lost_unacked, lost, duplicate_events,
       duplicate_copies, aborted_visible, out_of_order, verdict, broken_by, expectation, meets_expectation,
       records_per_sec, stale_overwrites, side
FROM v_run_results
ORDER BY mode, scenario, created_at DESC;
