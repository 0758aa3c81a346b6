-- Continuous audits (an audit file with `window:`): each scheduled run reconciles one window,
-- the topic records after the previous window's end offsets and the outbox rows older than the
-- grace, against the state the earlier windows left in these tables. Every row of a window is
-- written by one merge transaction keyed on (audit, window_end), and depends only on the windows
-- before it, so a rerun of any window leaves every row as it was.
--
-- Stages: outbox_topic (the outbox against the topic), topic_sink (the topic against the sink
-- table) and outbox_sink (the outbox against the sink table, end to end).

-- One row per audit window: its bounds, its counts and its verdicts.
CREATE TABLE audit_windows (
    audit               text        NOT NULL,
    window_end          timestamptz NOT NULL,
    window_start        timestamptz,           -- the previous window's end; NULL for the first, which reads all before its end
    grace_seconds       integer     NOT NULL,
    reconciliation_id   text        NOT NULL,
    topic               text        NOT NULL,
    mode                text        NOT NULL,
    isolation           text        NOT NULL,
    records_read        bigint      NOT NULL,  -- topic records in the window's offset range
    outbox_due          bigint      NOT NULL,  -- outbox rows whose grace ended in this window
    delivered           bigint      NOT NULL,  -- of those, seen in the topic in this or an earlier window
    duplicate_events    bigint      NOT NULL,  -- event ids read more than once in the window, or read in an earlier one
    duplicate_copies    bigint      NOT NULL,
    lost_acked          bigint      NOT NULL,
    lost_unacked        bigint      NOT NULL,
    unknown_landed      bigint      NOT NULL,
    unexpected          bigint      NOT NULL,
    late                bigint      NOT NULL,  -- records of events an earlier window declared lost
    out_of_order        bigint      NOT NULL,
    malformed           bigint      NOT NULL,
    pending_outbox      bigint      NOT NULL,  -- outbox rows within the grace, not seen yet
    pending_records     bigint      NOT NULL,  -- records within the grace with no outbox row yet
    sink_table          text,
    sink_strategy       text,
    sink_rows           bigint,                -- sink rows applied in the window
    sink_duplicates     bigint,                -- events applied more than once
    sink_lost           bigint,                -- topic records past the grace never applied
    sink_unexpected     bigint,                -- applied, never in the topic
    sink_late           bigint,
    stale_overwrites    bigint,
    end_to_end_lost     bigint,                -- outbox rows past twice the grace never applied
    end_to_end_late     bigint,
    open_discrepancies  bigint      NOT NULL,  -- this window's discrepancies and the losses still unresolved at its end
    promise             text,
    verdict             text        NOT NULL CHECK (verdict IN ('kept', 'broken', 'n/a')),
    broken_by           text,
    sink_promise        text,
    sink_verdict        text        CHECK (sink_verdict IN ('kept', 'broken', 'n/a')),
    sink_broken_by      text,
    first_reconciled_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (audit, window_end)
);

-- The offset range each window read: the next window starts where this one ended.
CREATE TABLE audit_window_offsets (
    audit         text        NOT NULL,
    window_end    timestamptz NOT NULL,
    "partition"   integer     NOT NULL,
    start_offset  bigint      NOT NULL,
    end_offset    bigint      NOT NULL,
    PRIMARY KEY (audit, window_end, "partition")
);

-- The seen-id index: one row per event id, side (topic or sink) and window it was seen in. A
-- window looks up only its own ids (through the primary key), so its cost follows the window,
-- not the history.
CREATE TABLE audit_sightings (
    audit        text        NOT NULL,
    side         text        NOT NULL CHECK (side IN ('topic', 'sink')),
    event_id     text        NOT NULL,
    window_end   timestamptz NOT NULL,
    copies       integer     NOT NULL,
    first_at     timestamptz,             -- the first copy's record timestamp, or the first apply's applied_at
    "partition"  integer,
    "offset"     bigint,
    key          text,
    version      bigint,
    created_at   timestamptz,             -- the outbox row's, when it was known
    PRIMARY KEY (audit, side, event_id, window_end)
);
CREATE INDEX audit_sightings_first_at ON audit_sightings (audit, side, first_at);
CREATE INDEX audit_sightings_key ON audit_sightings (audit, side, key) WHERE side = 'sink';

-- Records within the grace with no outbox row yet, carried to the next window.
CREATE TABLE audit_pending (
    audit        text        NOT NULL,
    window_end   timestamptz NOT NULL,
    event_id     text        NOT NULL,
    first_at     timestamptz NOT NULL,
    copies       integer     NOT NULL,
    "partitions" integer[]   NOT NULL,
    "offsets"    bigint[]    NOT NULL,
    PRIMARY KEY (audit, window_end, event_id)
);

-- One row per window, stage, kind and event id. A late row names the window that declared the
-- loss it resolves; the loss row itself is never rewritten.
CREATE TABLE audit_discrepancies (
    audit            text        NOT NULL,
    window_end       timestamptz NOT NULL,
    stage            text        NOT NULL CHECK (stage IN ('outbox_topic', 'topic_sink', 'outbox_sink')),
    kind             text        NOT NULL CHECK (kind IN ('duplicate', 'lost_acked', 'lost_unacked', 'lost',
                                             'unknown_landed', 'unexpected', 'late', 'out_of_order',
                                             'malformed', 'stale_overwrite')),
    event_id         text        NOT NULL,
    copies           integer     NOT NULL,
    "partitions"     integer[]   NOT NULL,
    "offsets"        bigint[]    NOT NULL,
    occurred_at      timestamptz,           -- outbox created_at for losses; the record's or apply's time otherwise
    delay_ms         bigint,                -- late: from the outbox row (or record) to the late copy
    lost_in_window   timestamptz,           -- late: the window that declared the loss
    PRIMARY KEY (audit, window_end, stage, kind, event_id)
);
CREATE INDEX audit_discrepancies_event ON audit_discrepancies (audit, event_id);
