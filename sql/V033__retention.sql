-- Retention of the platform's own topics: a producer run's, a consumer run's copy, a connector
-- pipeline's. Each is last used when it is made, loaded, read by a consumer run or reconciled;
-- `local/semantics gc` deletes the ones unused for longer than the retention
-- (SEMANTICS_RETENTION_DAYS) and records each here, so the report can say where a run's records
-- went. An audit's topic is a team's own: it is in none of these tables, and gc never touches it.
CREATE TABLE retired_topics (
    topic       text        PRIMARY KEY,
    owner       text        NOT NULL,
    bytes       bigint,                 -- on the brokers' disks, every replica; NULL: not measured
    retired_at  timestamptz NOT NULL DEFAULT now()
);
