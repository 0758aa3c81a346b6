-- The producer a run drove (issue 39): its client (librdkafka or the Java client), the settings
-- the run asked for over its mode (the forms' producer_settings, the CLI's --set; secrets masked),
-- and the findings: settings that contradict a guarantee the mode declares (catalog.contradictions).
-- producer_config already holds the effective settings the client was given. A verdict names the
-- findings whose guarantee was broken (broken_settings), so that a result can be traced to the
-- exact configuration that produced it.
ALTER TABLE runs ADD COLUMN client text NOT NULL DEFAULT 'librdkafka' CHECK (client IN ('librdkafka', 'java')),
    ADD COLUMN settings jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN findings jsonb NOT NULL DEFAULT '[]'::jsonb;
COMMENT ON COLUMN runs.settings IS 'producer settings the run asked for over its mode, in its client''s key names';
COMMENT ON COLUMN runs.findings IS 'settings contradicting a declared guarantee: [{guarantee, setting, why}]';
ALTER TABLE reconcile_summary ADD COLUMN broken_settings text;
COMMENT ON COLUMN reconcile_summary.broken_settings IS
    'the run''s settings that contradict a guarantee its verdict found broken, as key=value';

CREATE OR REPLACE VIEW v_run_results AS
SELECT r.run_id, r.created_at, r.ended_at, r.mode, r.scenario, r.topic, r.messages, r.status AS load_status,
       r.sessions, r.acked, r.failed, r.unknown, r.records_per_sec, r.ack_p50_ms, r.ack_p99_ms,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked AS lost,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'producer'::text AS side, NULL::text AS source_run_id, s.stale_overwrites, s.torn_events,
       s.inconsistent_offsets, s.poll_skips, s.nonmonotonic_polls,
       r.client, r.settings, r.producer_config, r.findings, s.broken_settings
FROM runs r
JOIN catalog_judged j ON j.name = r.mode
JOIN reconcile_summary s ON s.reconciliation_id = r.run_id AND s.isolation = j.isolation
UNION ALL
SELECT c.consumer_run_id, c.created_at, c.ended_at, c.strategy, c.scenario, s.topic, src.messages, c.status,
       c.sessions, src.acked, src.failed, src.unknown, c.records_per_sec, NULL::double precision,
       NULL::double precision,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'consumer'::text, c.source_run_id, s.stale_overwrites, s.torn_events, s.inconsistent_offsets,
       s.poll_skips, s.nonmonotonic_polls,
       'librdkafka'::text, '{}'::jsonb, NULL::jsonb, '[]'::jsonb, s.broken_settings
FROM consumer_runs c
JOIN runs src ON src.run_id = c.source_run_id
JOIN catalog_judged j ON j.name = c.strategy
JOIN reconcile_summary s ON s.reconciliation_id = c.consumer_run_id AND s.isolation = j.isolation;

-- The latest run of each mode, client and scenario: the matrix shows the clients side by side.
DROP VIEW v_latest_matrix;
CREATE VIEW v_latest_matrix AS
SELECT DISTINCT ON (mode, client, scenario)
       mode, scenario, run_id, created_at, messages, lost_acked, lost_unacked, lost, duplicate_events,
       duplicate_copies, aborted_visible, out_of_order, verdict, broken_by, expectation, meets_expectation,
       records_per_sec, stale_overwrites, side, torn_events, inconsistent_offsets, poll_skips, nonmonotonic_polls,
       client, settings, broken_settings
FROM v_run_results
ORDER BY mode, client, scenario, created_at DESC;
