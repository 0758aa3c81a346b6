-- v_pipeline_matrix was `SELECT *` over pipeline_runs, which PostgreSQL expands once, when the view
-- is made: the columns pipeline_runs gained since (transaction_markers, V029) never reached it. Its
-- columns named, that one included; appended last, so that a query naming the old ones still reads.
CREATE OR REPLACE VIEW v_pipeline_matrix AS
SELECT DISTINCT ON (pipeline, scenario)
    run_id, airflow_run_id, pipeline, scenario, events, txn_size, rate, topic, outbox_table, sink_table, audit,
    status, created_at, load_started_at, load_ended_at, ended_at, outbox_rows, records_read, duplicate_events,
    duplicate_copies, lost, late, sink_rows, sink_duplicates, sink_lost, end_to_end_lost, throughput_eps,
    latency_p50_ms, latency_p99_ms, promise, verdict, broken_by, expectation, meets_expectation, sink_verdict,
    timeline, error, transaction_markers
FROM pipeline_runs
WHERE status = 'reconciled'
ORDER BY pipeline, scenario, created_at DESC;
