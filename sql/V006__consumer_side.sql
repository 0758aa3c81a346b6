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
