-- A continuous audit's state has a horizon (window.dedup_horizon, 7 days unless the audit says):
-- audit_sightings is partitioned by audit and window, each window's merge creating its own
-- partition and dropping those of the windows beyond the horizon. Rows from before this
-- migration stay in the default partition until they fall beyond the horizon and are deleted.
ALTER TABLE audit_sightings RENAME TO audit_sightings_unpartitioned;
ALTER TABLE audit_sightings_unpartitioned RENAME CONSTRAINT audit_sightings_pkey TO audit_sightings_unpartitioned_pkey;
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
) PARTITION BY RANGE (audit, window_end);
CREATE TABLE audit_sightings_default PARTITION OF audit_sightings DEFAULT;
INSERT INTO audit_sightings SELECT audit, side, event_id, window_end, copies, first_at, "partition", "offset",
    key, version, created_at FROM audit_sightings_unpartitioned;
DROP TABLE audit_sightings_unpartitioned;
CREATE INDEX audit_sightings_first_at ON audit_sightings (audit, side, first_at);
CREATE INDEX audit_sightings_key ON audit_sightings (audit, key, side, version);

-- Each window says the horizon it kept, and how many records it could not judge for being older
-- than it (a copy whose first copy may have been seen and forgotten: counted, not reported).
ALTER TABLE audit_windows ADD COLUMN dedup_horizon_seconds bigint;
ALTER TABLE audit_windows ADD COLUMN beyond_horizon bigint NOT NULL DEFAULT 0;
