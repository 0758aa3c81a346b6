-- Kinds a Kafka expert would ask the checker for (issue 17), each counted in reconcile_summary,
-- NULL where it was not checked (runs reconciled before this version, and where the kind does
-- not apply):
-- - torn_transaction [KAFKA-17754]: under read_committed a committed transaction is visible whole
--   or not at all, across partitions. An event missing from a partly visible committed
--   transaction is reported, with the positions of the events that were read (torn_events).
-- - inconsistent_offset [Jepsen: inconsistent-offsets]: the position the ledger recorded an
--   event's ack at holds another event, the trace of a log truncated and written again (an
--   isolated leader's unclean election). Checked where the ledger's producers wrote the topic
--   (inconsistent_offsets).
-- - poll_skip and nonmonotonic_poll [Jepsen: poll-skip, nonmonotonic-poll]: every consumer
--   session writes, before it processes a poll's records, the offsets that poll returned per
--   partition, in order (consumer_polls). Within a session, an offset not above the one polled
--   before it is a nonmonotonic poll; a record of the input topic (read_committed, as the
--   consumers read) between two consecutive offsets of a session is a poll skip (poll_skips,
--   nonmonotonic_polls).
CREATE TABLE consumer_polls (
    consumer_run_id  text        NOT NULL REFERENCES consumer_runs (consumer_run_id) ON DELETE CASCADE,
    session          integer     NOT NULL,
    poll_no          integer     NOT NULL,
    "partition"      integer     NOT NULL,
    offsets          bigint[]    NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_run_id, session, poll_no, "partition")
);

ALTER TABLE reconcile_summary ADD COLUMN torn_events bigint, ADD COLUMN inconsistent_offsets bigint,
    ADD COLUMN poll_skips bigint, ADD COLUMN nonmonotonic_polls bigint;
ALTER TABLE reconcile_discrepancies DROP CONSTRAINT reconcile_discrepancies_kind_check;
ALTER TABLE reconcile_discrepancies ADD CONSTRAINT reconcile_discrepancies_kind_check
    CHECK (kind IN ('duplicate', 'lost_acked', 'lost_unacked', 'unknown_landed', 'unexpected', 'out_of_order',
                    'aborted_visible', 'malformed', 'stale_overwrite', 'torn_transaction', 'inconsistent_offset',
                    'poll_skip', 'nonmonotonic_poll'));

CREATE OR REPLACE VIEW v_run_results AS
SELECT r.run_id, r.created_at, r.ended_at, r.mode, r.scenario, r.topic, r.messages, r.status AS load_status,
       r.sessions, r.acked, r.failed, r.unknown, r.records_per_sec, r.ack_p50_ms, r.ack_p99_ms,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked AS lost,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'producer'::text AS side, NULL::text AS source_run_id, s.stale_overwrites, s.torn_events,
       s.inconsistent_offsets, s.poll_skips, s.nonmonotonic_polls
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
       s.poll_skips, s.nonmonotonic_polls
FROM consumer_runs c
JOIN runs src ON src.run_id = c.source_run_id
JOIN catalog_judged j ON j.name = c.strategy
JOIN reconcile_summary s ON s.reconciliation_id = c.consumer_run_id AND s.isolation = j.isolation;

CREATE OR REPLACE VIEW v_latest_matrix AS
SELECT DISTINCT ON (mode, scenario)
       mode, scenario, run_id, created_at, messages, lost_acked, lost_unacked, lost, duplicate_events,
       duplicate_copies, aborted_visible, out_of_order, verdict, broken_by, expectation, meets_expectation,
       records_per_sec, stale_overwrites, side, torn_events, inconsistent_offsets, poll_skips, nonmonotonic_polls
FROM v_run_results
ORDER BY mode, scenario, created_at DESC;
