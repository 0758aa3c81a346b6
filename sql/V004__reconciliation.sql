-- What the checker found. Every table is written by one merge transaction per reconciliation, so a
-- rerun leaves it row for row as it was (no column here changes on a rerun).

-- The offset range a reconciliation read, fixed at its first run so reruns read the same records.
CREATE TABLE reconcile_offsets (
    reconciliation_id  text    NOT NULL,
    topic              text    NOT NULL,
    "partition"        integer NOT NULL,
    start_offset       bigint  NOT NULL,
    end_offset         bigint  NOT NULL,
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reconciliation_id, "partition")
);

-- One row per reconciliation (a run id, or a mapping's id) and isolation level.
CREATE TABLE reconcile_summary (
    reconciliation_id  text    NOT NULL,
    isolation          text    NOT NULL CHECK (isolation IN ('read_committed', 'read_uncommitted')),
    topic              text    NOT NULL,
    mode               text,
    scenario           text,
    records_read       bigint  NOT NULL,
    ledger_events      bigint  NOT NULL,
    ledger_acked       bigint  NOT NULL,
    distinct_events    bigint  NOT NULL,
    delivered_once     bigint  NOT NULL,
    duplicate_events   bigint  NOT NULL,
    duplicate_copies   bigint  NOT NULL,   -- copies beyond the first
    lost_acked         bigint  NOT NULL,
    lost_unacked       bigint  NOT NULL,
    unknown_landed     bigint  NOT NULL,
    unexpected         bigint  NOT NULL,
    out_of_order       bigint  NOT NULL,
    aborted_visible    bigint  NOT NULL,   -- copies
    malformed          bigint  NOT NULL,   -- records without a usable event id
    loss_rate          double precision NOT NULL,
    duplicate_rate     double precision NOT NULL,
    promise            text,
    verdict            text    NOT NULL CHECK (verdict IN ('kept', 'broken', 'n/a')),
    broken_by          text,
    expectation        text,
    meets_expectation  boolean,
    end_offsets        jsonb   NOT NULL,
    first_reconciled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (reconciliation_id, isolation)
);

-- One row per affected event id and kind; the event ids that make the counts above.
CREATE TABLE reconcile_discrepancies (
    reconciliation_id  text     NOT NULL,
    isolation          text     NOT NULL,
    event_id           text     NOT NULL,   -- for malformed records: 'partition P offset O'
    kind               text     NOT NULL CHECK (kind IN ('duplicate', 'lost_acked', 'lost_unacked', 'unknown_landed',
                                        'unexpected', 'out_of_order', 'aborted_visible', 'malformed')),
    copies             integer  NOT NULL,
    "partitions"       integer[] NOT NULL,
    "offsets"          bigint[]  NOT NULL,   -- the first 100 copies' offsets
    PRIMARY KEY (reconciliation_id, isolation, kind, event_id)
);

-- The consumer-side remedy: the data de-duplicated by event id. The first copy by offset wins;
-- a later version of an event replaces it only when its publish_at is newer.
CREATE TABLE dedup_events (
    event_id           text        PRIMARY KEY,
    reconciliation_id  text        NOT NULL,
    key                text,
    seq                bigint,
    publish_at         timestamptz,
    "partition"        integer     NOT NULL,
    "offset"           bigint      NOT NULL,
    value              bytea
);
CREATE INDEX dedup_events_reconciliation ON dedup_events (reconciliation_id);

-- Every reconciliation job that merged its results (reruns included).
CREATE TABLE reconcile_jobs (
    job_no             bigserial   PRIMARY KEY,
    reconciliation_id  text        NOT NULL,
    staged_as          text        NOT NULL,
    finished_at        timestamptz NOT NULL DEFAULT now()
);
