-- The consumer side (DESIGN.md §3): consumer runs, the PostgreSQL sink they write, and their
-- reconciliation rows in the same summary tables as producer runs.

-- A consumer run reads a completed producer run's topic with one strategy, crashing where the
-- strategy is weakest, and is reconciled against that producer run's ledger.
CREATE TABLE consumer_runs (
    consumer_run_id    text        PRIMARY KEY,
    source_run_id      text        NOT NULL REFERENCES runs (run_id),
    strategy           text        NOT NULL CHECK (strategy IN ('commit_before_process', 'process_then_commit',
                                        'process_then_commit_dedup', 'transactional_copy')),
    scenario           text        NOT NULL DEFAULT 'none' CHECK (scenario IN ('none', 'consumer_crash')),
    crashes_planned    integer     NOT NULL DEFAULT 0 CHECK (crashes_planned >= 0),
    batch_size         integer     NOT NULL CHECK (batch_size > 0),
    input_topic        text        NOT NULL,
    input_end_offsets  jsonb       NOT NULL,          -- the log end of each input partition at the start
    group_id           text        NOT NULL,
    output_topic       text,                          -- transactional_copy only
    transactional_id   text,                          -- transactional_copy only
    status             text        NOT NULL DEFAULT 'created'
                       CHECK (status IN ('created', 'running', 'completed', 'failed')),
    sessions           integer     NOT NULL DEFAULT 0, -- consumer processes started
    crashes            integer     NOT NULL DEFAULT 0, -- of them, killed at a crash point
    processed          bigint,                         -- records handled, redeliveries included
    active_seconds     double precision,
    records_per_sec    double precision,
    timeline           jsonb,
    error              text,
    airflow_run_id     text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    ended_at           timestamptz
);
CREATE INDEX consumer_runs_airflow ON consumer_runs (airflow_run_id);

-- What a consumer wrote: one row per applied record, in the order applied. A naive sink appends
-- every delivery; under event-id dedup (insert-skip) dedup_key holds the event id and the unique
-- index makes a redelivery a no-op (NULL keys of naive sinks never conflict).
CREATE TABLE sink_events (
    consumer_run_id    text        NOT NULL,
    apply_no           bigserial   NOT NULL,
    event_id           text        NOT NULL,
    dedup_key          text,
    key                text,
    seq                bigint,
    publish_at         timestamptz,
    source_partition   integer     NOT NULL,
    source_offset      bigint      NOT NULL,
    session            integer     NOT NULL,
    state_applied      boolean     NOT NULL,   -- this record overwrote its key's row in sink_state
    applied_at         timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (consumer_run_id);
CREATE UNIQUE INDEX sink_events_dedup ON sink_events (consumer_run_id, dedup_key);

-- The entity the events update: the latest state per key. Under dedup an update applies only
-- when (publish_at, seq) is newer than the stored one (seed 000's remedy).
CREATE TABLE sink_state (
    consumer_run_id    text        NOT NULL,
    key                text        NOT NULL,
    event_id           text        NOT NULL,
    seq                bigint,
    publish_at         timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_run_id, key)
);

-- A stale overwrite: a record applied to a key's state after a newer one was (NULL for producer
-- runs, where it does not apply).
ALTER TABLE reconcile_summary ADD COLUMN stale_overwrites bigint;
ALTER TABLE reconcile_discrepancies DROP CONSTRAINT reconcile_discrepancies_kind_check;
ALTER TABLE reconcile_discrepancies ADD CONSTRAINT reconcile_discrepancies_kind_check
    CHECK (kind IN ('duplicate', 'lost_acked', 'lost_unacked', 'unknown_landed', 'unexpected', 'out_of_order',
                    'aborted_visible', 'malformed', 'stale_overwrite'));

-- Producer and consumer runs side by side: a consumer run's mode is its strategy, its messages and
-- acks are its input run's, and records_per_sec is its own processing rate.
CREATE OR REPLACE VIEW v_run_results AS
SELECT r.run_id, r.created_at, r.ended_at, r.mode, r.scenario, r.topic, r.messages, r.status AS load_status,
       r.sessions, r.acked, r.failed, r.unknown, r.records_per_sec, r.ack_p50_ms, r.ack_p99_ms,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked AS lost,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'producer'::text AS side, NULL::text AS source_run_id, s.stale_overwrites
FROM runs r
JOIN reconcile_summary s
  ON s.reconciliation_id = r.run_id
 AND s.isolation = CASE WHEN r.mode = 'transactional' THEN 'read_committed' ELSE 'read_uncommitted' END
UNION ALL
SELECT c.consumer_run_id, c.created_at, c.ended_at, c.strategy, c.scenario, s.topic, src.messages, c.status,
       c.sessions, src.acked, src.failed, src.unknown, c.records_per_sec, NULL::double precision,
       NULL::double precision,
       s.isolation, s.records_read, s.delivered_once,
       s.lost_acked, s.lost_unacked, s.lost_acked + s.lost_unacked,
       s.duplicate_events, s.duplicate_copies, s.unknown_landed, s.unexpected, s.out_of_order,
       s.aborted_visible, s.malformed, s.loss_rate, s.duplicate_rate,
       s.promise, s.verdict, s.broken_by, s.expectation, s.meets_expectation,
       'consumer'::text, c.source_run_id, s.stale_overwrites
FROM consumer_runs c
JOIN runs src ON src.run_id = c.source_run_id
JOIN reconcile_summary s ON s.reconciliation_id = c.consumer_run_id AND s.isolation = 'read_committed';

CREATE OR REPLACE VIEW v_run_history AS
SELECT * FROM (
    SELECT r.run_id, r.created_at, r.mode, r.scenario, r.messages, r.status AS load_status, r.acked,
           r.records_per_sec, v.lost, v.duplicate_events, v.verdict, v.meets_expectation,
           (v.run_id IS NOT NULL) AS reconciled, 'producer'::text AS side
    FROM runs r LEFT JOIN v_run_results v USING (run_id)
    UNION ALL
    SELECT c.consumer_run_id, c.created_at, c.strategy, c.scenario, src.messages, c.status, src.acked,
           c.records_per_sec, v.lost, v.duplicate_events, v.verdict, v.meets_expectation,
           (v.run_id IS NOT NULL), 'consumer'::text
    FROM consumer_runs c JOIN runs src ON src.run_id = c.source_run_id
    LEFT JOIN v_run_results v ON v.run_id = c.consumer_run_id
) h
ORDER BY created_at DESC;
