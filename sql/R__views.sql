-- Every view's one definition (issue 57), applied by `schema.migrate` after the versioned
-- migrations whenever this file changes, and again after any versioned migration, which runs with
-- the views dropped (`schema_repeatables` keeps this file's checksum). Change a view here, never in
-- a V file. CREATE OR REPLACE keeps a view's columns and the views a user built on it; a change
-- that loses, renames or retypes a column makes migrate drop the views and make them all again.
-- Each view names its columns (`SELECT *` is expanded once, when a view is made, and a table's
-- later columns never reach it). "Last changed by" names the V file that changed a view last
-- before the definitions moved here; the V files now hold tables only.


-- v_run_results (last changed by V026__producer_clients_and_settings.sql)
-- judged_as: the delivery mode (a producer run) or consumer strategy (a consumer run) whose promise
-- is judged. It is appended; mode holds the same, kept for the queries written before.
-- definition_hash: the content hash of what the run is judged against (runs.definition, V040),
-- whose isolation level picks the run's own summary: a run stays here with its verdict when its
-- mode file is edited or deleted. A run made before V040 has none: the catalog's isolation.
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
       r.client, r.settings, r.producer_config, r.findings, s.broken_settings, s.coordinator_aborted,
       r.mode AS judged_as, r.definition_hash
FROM runs r
LEFT JOIN catalog_judged j ON j.name = r.mode
JOIN reconcile_summary s
  ON s.reconciliation_id = r.run_id AND s.isolation = coalesce(r.definition ->> 'isolation', j.isolation)
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
       'librdkafka'::text, '{}'::jsonb, NULL::jsonb, '[]'::jsonb, s.broken_settings, s.coordinator_aborted,
       c.strategy, c.definition_hash
FROM consumer_runs c
JOIN runs src ON src.run_id = c.source_run_id
LEFT JOIN catalog_judged j ON j.name = c.strategy
JOIN reconcile_summary s
  ON s.reconciliation_id = c.consumer_run_id AND s.isolation = coalesce(c.definition ->> 'isolation', j.isolation);

-- v_trends (last changed by V005__reporting_views.sql)
-- Daily trends per mode and scenario: loss and duplicate rates and throughput.
CREATE OR REPLACE VIEW v_trends AS
SELECT date_trunc('day', created_at) AS day, mode, scenario, count(*) AS runs,
       avg(loss_rate) AS loss_rate, avg(duplicate_rate) AS duplicate_rate,
       avg(records_per_sec) AS records_per_sec,
       count(*) FILTER (WHERE verdict = 'broken') AS broken_runs
FROM v_run_results
GROUP BY 1, 2, 3;

-- v_open_violations (last changed by V005__reporting_views.sql)
-- Broken promises, with the events that broke them.
CREATE OR REPLACE VIEW v_open_violations AS
SELECT v.run_id, v.created_at, v.mode, v.scenario, v.promise, v.broken_by, d.kind, d.event_id, d.copies,
       d."partitions", d."offsets"
FROM v_run_results v
JOIN reconcile_discrepancies d
  ON d.reconciliation_id = v.run_id AND d.isolation = v.isolation
 AND d.kind = ANY (string_to_array(v.broken_by, ','))
WHERE v.verdict = 'broken';

-- v_run_history (last changed by V037__retired_runs.sql)
-- details_retired_at: when gc retired the run's events (its topic gone); its verdict and counts stay.
-- judged_as: as v_run_results' (mode, the same, kept for the queries written before).
-- definition_hash: as v_run_results'; a mode's runs under one scenario with another hash were
-- judged against another definition (its file was edited in between).
CREATE OR REPLACE VIEW v_run_history AS
SELECT run_id, created_at, mode, scenario, messages, load_status, acked, records_per_sec, lost, duplicate_events,
       verdict, meets_expectation, reconciled, side,
       (SELECT rr.retired_at FROM retired_runs rr WHERE rr.run_id = h.run_id) AS details_retired_at,
       mode AS judged_as, definition_hash
FROM (
    SELECT r.run_id, r.created_at, r.mode, r.scenario, r.messages, r.status AS load_status, r.acked,
           r.records_per_sec, v.lost, v.duplicate_events, v.verdict, v.meets_expectation,
           (v.run_id IS NOT NULL) AS reconciled, 'producer'::text AS side, r.definition_hash
    FROM runs r LEFT JOIN v_run_results v USING (run_id)
    UNION ALL
    SELECT c.consumer_run_id, c.created_at, c.strategy, c.scenario, src.messages, c.status, src.acked,
           c.records_per_sec, v.lost, v.duplicate_events, v.verdict, v.meets_expectation,
           (v.run_id IS NOT NULL), 'consumer'::text, c.definition_hash
    FROM consumer_runs c JOIN runs src ON src.run_id = c.source_run_id
    LEFT JOIN v_run_results v ON v.run_id = c.consumer_run_id
) h
ORDER BY created_at DESC;

-- ledger_events (last changed by V020__keys_per_producer.sql)
CREATE OR REPLACE VIEW ledger_events AS
SELECT run_id, n, event_id, key, seq, publish_at FROM ledger_event_rows
UNION ALL
SELECT r.run_id, x.n, r.run_id || '-' || x.n, 'k' || (r.key_base + x.n % r.keys), x.n / r.keys, r.publish_at
FROM ledger_event_ranges r, generate_series(r.n_lo, r.n_hi - 1) AS x(n);

-- v_audit_results (last changed by V011__audits.sql; its column mode is reconcile_summary.judged_as since V025)
-- judged_as: the delivery mode or the connector pipeline the audit is judged as. It is appended;
-- mode holds the same, kept for the queries written before.
CREATE OR REPLACE VIEW v_audit_results AS
SELECT s.audit, s.reconciliation_id, s.first_reconciled_at AS reconciled_at, s.topic, s.judged_as AS mode, s.isolation,
       s.records_read, s.ledger_events AS outbox_events, s.ledger_acked AS outbox_acked, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected,
       s.out_of_order, s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.judged_as
FROM reconcile_summary s
JOIN catalog_judged j ON j.name = s.judged_as AND j.isolation = s.isolation
WHERE s.audit IS NOT NULL;

-- v_audit_window_kinds (last changed by V012__continuous_audits.sql)
-- Counts by kind, per audit, window and stage.
CREATE OR REPLACE VIEW v_audit_window_kinds AS
SELECT audit, window_end, stage, kind, count(*) AS events, sum(copies) AS copies
FROM audit_discrepancies
GROUP BY audit, window_end, stage, kind;

-- v_audit_losses (last changed by V012__continuous_audits.sql)
-- Every loss, with the window whose late copy resolved it, if one did.
CREATE OR REPLACE VIEW v_audit_losses AS
SELECT l.audit, l.window_end AS lost_in_window, l.stage, l.kind, l.event_id, l.occurred_at,
       r.window_end AS resolved_in_window, r.delay_ms AS resolved_after_ms
FROM audit_discrepancies l
LEFT JOIN LATERAL (
    SELECT d.window_end, d.delay_ms FROM audit_discrepancies d
    WHERE d.audit = l.audit AND d.event_id = l.event_id AND d.stage = l.stage AND d.kind = 'late'
      AND d.window_end > l.window_end
    ORDER BY d.window_end LIMIT 1
) r ON true
WHERE l.kind IN ('lost_acked', 'lost_unacked', 'lost');

-- v_audit_open_discrepancies (last changed by V012__continuous_audits.sql)
-- What is still open: unresolved losses, and every other discrepancy (a duplicate, an unexpected
-- record or a stale overwrite stays a fact once seen).
CREATE OR REPLACE VIEW v_audit_open_discrepancies AS
SELECT audit, lost_in_window AS window_end, stage, kind, event_id, occurred_at
FROM v_audit_losses WHERE resolved_in_window IS NULL
UNION ALL
SELECT audit, window_end, stage, kind, event_id, occurred_at
FROM audit_discrepancies WHERE kind NOT IN ('lost_acked', 'lost_unacked', 'lost', 'late');

-- ledger_outcomes (last changed by V015__outcome_batches.sql)
-- Platform event ids are derived from the run and n (generator.event_id).
CREATE OR REPLACE VIEW ledger_outcomes AS
SELECT o.outcome_no, o.run_id, o.event_id, o.session, o.status, o."partition", o."offset", o.latency_us,
       o.txn_no, o.error, o.recorded_at, o.producer
FROM ledger_event_outcomes o
UNION ALL
SELECT b.outcome_no, b.run_id, b.run_id || '-' || x.n, b.session, b.status, x."partition", x."offset",
       x.latency_us, b.txn_no, NULL, b.recorded_at, b.producer
FROM ledger_batches b,
     LATERAL unnest(batch_ns(b.n_lo, b.n_hi), b.partitions, b.offsets, b.latencies_us)
         AS x(n, "partition", "offset", latency_us);

-- ledger_event_status (last changed by V017__event_ranges.sql)
CREATE OR REPLACE VIEW ledger_event_status AS
SELECT e.run_id, e.n, e.event_id, e.key, e.seq, e.publish_at,
       COALESCE(o.status, 'pending') AS status, o."partition", o."offset", o.latency_us, o.error,
       COALESCE(o.attempts, 0) AS attempts
FROM ledger_events e
LEFT JOIN (
    SELECT DISTINCT ON (x.run_id, x.event_id)
           x.run_id, x.event_id, x.status, x."partition", x."offset", x.latency_us, x.error,
           count(*) OVER (PARTITION BY x.run_id, x.event_id) AS attempts
    FROM ledger_outcomes x
    -- an ack wins over anything else; otherwise the latest outcome
    ORDER BY x.run_id, x.event_id, (x.status = 'acked') DESC, (x.status = 'sent') DESC, x.outcome_no DESC
) o ON o.run_id = e.run_id AND o.event_id = e.event_id;

-- v_audit_trends (last changed by V018__audit_trends.sql)
-- Trends of a team's audits, one row per check: each batch reconciliation and each window of a
-- continuous audit, with its loss and duplicate rates over the outbox events it judged. Daily
-- trends of the matrix's runs are v_trends (V005); their points are v_run_results.
CREATE OR REPLACE VIEW v_audit_trends AS
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

-- v_latest_matrix (last changed by V026__producer_clients_and_settings.sql)
CREATE OR REPLACE VIEW v_latest_matrix AS
SELECT DISTINCT ON (mode, client, scenario)
       mode, scenario, run_id, created_at, messages, lost_acked, lost_unacked, lost, duplicate_events,
       duplicate_copies, aborted_visible, out_of_order, verdict, broken_by, expectation, meets_expectation,
       records_per_sec, stale_overwrites, side, torn_events, inconsistent_offsets, poll_skips, nonmonotonic_polls,
       client, settings, broken_settings
FROM v_run_results
ORDER BY mode, client, scenario, created_at DESC;

-- v_audit_delays (last changed by V031__audit_state_horizon.sql)
-- End-to-end delay percentiles per audit and window, in milliseconds (within the horizon: the
-- sightings of older windows are dropped).
CREATE OR REPLACE VIEW v_audit_delays AS
WITH d AS (
    SELECT t.audit, t.window_end,
           extract(epoch FROM t.first_at - t.created_at) * 1000 AS outbox_topic_ms,
           extract(epoch FROM s.first_at - t.first_at) * 1000 AS topic_sink_ms,
           extract(epoch FROM s.first_at - t.created_at) * 1000 AS outbox_sink_ms
    FROM audit_sightings t
    LEFT JOIN LATERAL (
        SELECT first_at FROM audit_sightings s
        WHERE s.audit = t.audit AND s.side = 'sink' AND s.event_id = t.event_id
        ORDER BY s.window_end LIMIT 1
    ) s ON true
    WHERE t.side = 'topic'
)
SELECT audit, window_end, count(*) AS events,
       percentile_cont(0.5)  WITHIN GROUP (ORDER BY outbox_topic_ms) AS outbox_topic_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY outbox_topic_ms) AS outbox_topic_p99_ms,
       percentile_cont(0.5)  WITHIN GROUP (ORDER BY topic_sink_ms)   AS topic_sink_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY topic_sink_ms)   AS topic_sink_p99_ms,
       percentile_cont(0.5)  WITHIN GROUP (ORDER BY outbox_sink_ms)  AS outbox_sink_p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY outbox_sink_ms)  AS outbox_sink_p99_ms,
       max(outbox_sink_ms) AS outbox_sink_max_ms
FROM d
GROUP BY audit, window_end;

-- platform_topics (last changed by V033__retention.sql)
CREATE OR REPLACE VIEW platform_topics AS
WITH used AS (
    SELECT topic, 'run ' || run_id AS owner, greatest(created_at, ended_at) AS used_at FROM runs
    UNION ALL
    SELECT output_topic, 'consumer run ' || consumer_run_id, greatest(created_at, ended_at)
    FROM consumer_runs WHERE output_topic IS NOT NULL
    UNION ALL
    SELECT topic, 'pipeline run ' || run_id, greatest(created_at, ended_at) FROM pipeline_runs
    UNION ALL
    SELECT input_topic, NULL, greatest(created_at, ended_at) FROM consumer_runs
    UNION ALL
    SELECT s.topic, NULL, j.finished_at
    FROM reconcile_summary s JOIN reconcile_jobs j USING (reconciliation_id)
    WHERE s.audit IS NULL
)
SELECT u.topic, string_agg(DISTINCT u.owner, ', ') AS owner, max(u.used_at) AS last_used_at,
       r.retired_at
FROM used u LEFT JOIN retired_topics r USING (topic)
GROUP BY u.topic, r.retired_at
HAVING count(u.owner) > 0;

-- v_pipeline_matrix (last changed by V041__pipeline_run_definitions.sql)
-- The latest reconciled run of each pipeline x scenario (transaction_markers last: V029's column,
-- appended by V034 so that a query naming the older ones still reads; definition_hash, V041's,
-- after it: the definition the run was judged against, NULL for a run made before).
CREATE OR REPLACE VIEW v_pipeline_matrix AS
SELECT DISTINCT ON (pipeline, scenario)
    run_id, airflow_run_id, pipeline, scenario, events, txn_size, rate, topic, outbox_table, sink_table, audit,
    status, created_at, load_started_at, load_ended_at, ended_at, outbox_rows, records_read, duplicate_events,
    duplicate_copies, lost, late, sink_rows, sink_duplicates, sink_lost, end_to_end_lost, throughput_eps,
    latency_p50_ms, latency_p99_ms, promise, verdict, broken_by, expectation, meets_expectation, sink_verdict,
    timeline, error, transaction_markers, definition_hash
FROM pipeline_runs
WHERE status = 'reconciled'
ORDER BY pipeline, scenario, created_at DESC;

-- v_rule_calibration
-- Each rule's newest proof that made or read a run: the finding, the run, the count it saw, when;
-- and how many of all its proofs that ran confirmed it.
CREATE OR REPLACE VIEW v_rule_calibration AS
SELECT DISTINCT ON (p.rule) p.rule, p.family, p.predicted, p.subject, p.client, p.given, p.scenario, p.run_id,
       p.isolation, p.observed, p.confirmed, p.made_at,
       count(*) OVER (PARTITION BY p.rule) AS proofs,
       count(*) FILTER (WHERE p.confirmed) OVER (PARTITION BY p.rule) AS confirmations
FROM proofs p
WHERE p.observed IS NOT NULL
ORDER BY p.rule, p.made_at DESC, p.proof_id DESC;

-- v_latest_proofs (last changed by V035__proofs.sql)
-- The newest proof of each subject and its given settings, one row a finding.
CREATE OR REPLACE VIEW v_latest_proofs AS
SELECT p.proof_id, p.made_at, p.subject, p.client, p.given, p.rule, p.family, p.settings, p.predicted, p.scenario,
       p.run_id, p.reused, p.isolation, p.observed, p.confirmed, p.why
FROM proofs p
WHERE p.proof_id = (
    SELECT q.proof_id FROM proofs q
    WHERE q.subject = p.subject AND q.given = p.given AND q.client IS NOT DISTINCT FROM p.client
    ORDER BY q.made_at DESC, q.proof_id DESC LIMIT 1
);
