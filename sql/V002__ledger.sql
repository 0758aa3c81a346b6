-- The history: every run, every event a producer meant to send (written before produce()), and
-- every outcome the client learned for it. Events and outcomes are append-only and partitioned by
-- run, so a 10M-event run is written with COPY alone and retired by dropping its partitions.

CREATE TABLE runs (
    run_id             text        PRIMARY KEY,
    mode               text        NOT NULL,
    scenario           text        NOT NULL DEFAULT 'none',
    topic              text        NOT NULL,
    partitions         integer     NOT NULL CHECK (partitions > 0),
    messages           bigint      NOT NULL CHECK (messages > 0),
    keys               integer     NOT NULL CHECK (keys > 0),
    payload_bytes      integer     NOT NULL CHECK (payload_bytes >= 0),
    target_rate        integer     NOT NULL DEFAULT 0,
    txn_size           integer,
    abort_ratio        real,
    seed               bigint      NOT NULL,
    transactional_id   text,
    producer_config    jsonb       NOT NULL,          -- effective librdkafka settings, secrets masked
    status             text        NOT NULL DEFAULT 'created'
                       CHECK (status IN ('created', 'running', 'completed', 'incomplete', 'failed')),
    sessions           integer     NOT NULL DEFAULT 0, -- producer sessions (a resume adds one)
    produced           bigint      NOT NULL DEFAULT 0, -- produce() calls, resends included
    acked              bigint,
    sent_unacked       bigint,                         -- acks=0: handed to the socket, no ack
    failed             bigint,
    unknown            bigint,
    pending            bigint,
    aborted_attempts   bigint,
    active_seconds     double precision,               -- time producers ran, summed over sessions
    records_per_sec    double precision,
    ack_p50_ms         double precision,
    ack_p99_ms         double precision,
    error              text,
    airflow_run_id     text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    ended_at           timestamptz
);
CREATE INDEX runs_mode_created ON runs (mode, created_at DESC);

CREATE TABLE ledger_events (
    run_id       text        NOT NULL,
    n            bigint      NOT NULL,   -- position in the run; payloads are re-derived from (seed, n)
    event_id     text        NOT NULL,
    key          text        NOT NULL,
    seq          bigint      NOT NULL,   -- per-key sequence number
    publish_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, event_id)
) PARTITION BY LIST (run_id);

-- status: acked (broker ack; for transactions: the transaction committed), sent (acks=0: handed to
-- the socket), failed (definitely not written), unknown (timed out: possibly written), aborted
-- (written inside a transaction that was aborted), written (inside a transaction about to commit:
-- recorded before commit_transaction, so a producer killed during the commit leaves the positions
-- a resume checks against the topic to learn whether that transaction committed).
CREATE TABLE ledger_outcomes (
    outcome_no   bigserial   NOT NULL,  -- the order outcomes were learned in
    run_id       text        NOT NULL,
    event_id     text        NOT NULL,
    session      integer     NOT NULL,
    status       text        NOT NULL CHECK (status IN ('acked', 'sent', 'failed', 'unknown', 'aborted', 'written')),
    "partition"  integer,
    "offset"     bigint,
    latency_us   bigint,
    txn_no       bigint,
    error        text,
    recorded_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (run_id);
CREATE INDEX ledger_outcomes_event ON ledger_outcomes (run_id, event_id);
