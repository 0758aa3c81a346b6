-- Connector pipelines (catalog.PIPELINES): an outbox that a load writes in transactions, Debezium's
-- PostgreSQL source with its outbox event router, a topic, and Debezium's JDBC sink appending to a
-- table. Each run is audited three ways by a continuous audit (its windows are audit_windows rows
-- under the run's `audit` name); this table holds the run, its totals over those windows, its
-- throughput and end-to-end latency, and the verdict of the pipeline's promise under the scenario.
ALTER TABLE catalog_judged DROP CONSTRAINT catalog_judged_side_check;
ALTER TABLE catalog_judged ADD CONSTRAINT catalog_judged_side_check
    CHECK (side IN ('producer', 'consumer', 'pipeline'));

CREATE TABLE pipeline_runs (
    run_id            text PRIMARY KEY,
    airflow_run_id    text,                   -- dag/run/task/map index of the task that ran it
    pipeline          text        NOT NULL,
    scenario          text        NOT NULL,
    events            integer     NOT NULL,
    txn_size          integer     NOT NULL,
    rate              integer,                -- events a second asked of the load; NULL: as fast as it goes
    topic             text        NOT NULL,
    outbox_table      text        NOT NULL,
    sink_table        text        NOT NULL,
    audit             text        NOT NULL,   -- audit_windows.audit of its windows
    status            text        NOT NULL CHECK (status IN ('running', 'loaded', 'reconciled', 'failed')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    load_started_at   timestamptz,
    load_ended_at     timestamptz,
    ended_at          timestamptz,
    outbox_rows       bigint,                 -- committed outbox rows: the run's ledger
    records_read      bigint,
    duplicate_events  bigint,                 -- events in the topic more than once
    duplicate_copies  bigint,                 -- records read beyond each event's first copy
    lost              bigint,                 -- committed rows never in the topic (declared lost and not late)
    late              bigint,
    sink_rows         bigint,
    sink_duplicates   bigint,                 -- events the sink applied more than once
    sink_lost         bigint,                 -- records never applied to the sink
    end_to_end_lost   bigint,                 -- outbox rows never applied to the sink
    throughput_eps    double precision,       -- outbox rows / (last sink apply - first outbox row)
    latency_p50_ms    double precision,       -- outbox created_at to first sink applied_at
    latency_p99_ms    double precision,
    promise           text,
    verdict           text CHECK (verdict IN ('kept', 'broken', 'n/a')),
    broken_by         text,
    expectation       text,
    meets_expectation boolean,
    sink_verdict      text,
    timeline          jsonb,
    error             text
);
CREATE INDEX pipeline_runs_airflow_run ON pipeline_runs (airflow_run_id);
