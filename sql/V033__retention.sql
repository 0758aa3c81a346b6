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

CREATE VIEW platform_topics AS
WITH used AS (
    SELECT topic, 'run ' || run_id AS owner, greatest(created_at, ended_at) AS used_at FROM runs
    UNION ALL
    SELECT output_topic, 'consumer run ' || consumer_run_id, greatest(created_at, ended_at)
    FROM consumer_runs WHERE output_topic IS NOT NULL
    UNION ALL
    SELECT topic, 'pipeline run ' || run_id, greatest(created_at, ended_at) FROM pipeline_runs
    UNION ALL
    SELECT input_topic, NULL, greatest(created_at, ended_at) FROM consumer_runs
    UNION ALL
    SELECT s.topic, NULL, j.finished_at
    FROM reconcile_summary s JOIN reconcile_jobs j USING (reconciliation_id)
    WHERE s.audit IS NULL
)
SELECT u.topic, string_agg(DISTINCT u.owner, ', ') AS owner, max(u.used_at) AS last_used_at,
       r.retired_at
FROM used u LEFT JOIN retired_topics r USING (topic)
GROUP BY u.topic, r.retired_at
HAVING count(u.owner) > 0;
