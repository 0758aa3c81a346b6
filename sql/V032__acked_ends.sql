-- Per partition, one past the highest offset an ack reported (keys are partitions), filled when
-- the run is counted. An acks=1 record is acked once the leader has it, and readers see it only
-- once the high watermark passes it: while a follower in the ISR has not fetched it, up to
-- replica.lag.time.max.ms later. The run's readers (the checker, consumer runs) wait, bounded,
-- for each partition's watermark to reach its end here, so such a record is not taken for lost.
ALTER TABLE runs ADD COLUMN acked_ends jsonb;
