-- A connector pipeline's run keeps what it is judged against, as runs and consumer_runs do since
-- V040 (catalog.Definition, with its content hash): its totals are judged by the definition its
-- row holds. NULL: a run made before, whose verdict was stored when it ran.
ALTER TABLE pipeline_runs ADD COLUMN definition jsonb, ADD COLUMN definition_hash text;
