-- A run's load can be spread over several producers, each owning a contiguous slice of the
-- event numbers n, with its own sessions (a crash resumes that slice alone) and, in the
-- transactional mode, its own transactional.id. The run row keeps the run's totals: its sessions
-- and produce() calls summed over every producer's sessions, its active time the longest
-- producer's (they run side by side).
ALTER TABLE runs ADD COLUMN producers integer NOT NULL DEFAULT 1 CHECK (producers > 0);

CREATE TABLE run_producers (
    run_id           text        NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    producer         integer     NOT NULL CHECK (producer >= 0),
    n_start          bigint      NOT NULL,
    n_stop           bigint      NOT NULL CHECK (n_stop > n_start),
    transactional_id text,
    status           text        NOT NULL DEFAULT 'created'
                     CHECK (status IN ('created', 'running', 'completed', 'failed')),
    sessions         integer     NOT NULL DEFAULT 0,
    produced         bigint      NOT NULL DEFAULT 0,  -- produce() calls, resends included
    active_seconds   double precision NOT NULL DEFAULT 0,
    error            text,
    started_at       timestamptz,
    ended_at         timestamptz,
    PRIMARY KEY (run_id, producer)
);

-- Runs recorded before this version had one producer.
INSERT INTO run_producers (run_id, producer, n_start, n_stop, transactional_id, status, sessions, produced,
                           active_seconds, error, started_at, ended_at)
SELECT run_id, 0, 0, messages, transactional_id,
       CASE WHEN status IN ('created', 'running', 'completed', 'failed') THEN status ELSE 'failed' END,
       sessions, produced, coalesce(active_seconds, 0), error, started_at, ended_at
FROM runs;

-- Which producer learned an outcome: a resume settles its own slice's transaction in doubt, and
-- transactions are numbered per producer. A constant default: no rewrite of existing rows.
ALTER TABLE ledger_outcomes ADD COLUMN producer integer NOT NULL DEFAULT 0;
