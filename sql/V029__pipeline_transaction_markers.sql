-- The offsets of a pipeline run's topic that held no record its audit read: transaction markers
-- (and aborted records). A source task under exactly-once support leaves some; one without leaves
-- none. A run whose topic says otherwise ran on a Connect cluster that is not what its pipeline
-- names, and is failed with that reason instead of being judged.
ALTER TABLE pipeline_runs ADD COLUMN transaction_markers bigint;
