-- How a run's records carry their events (generator.RECORD_LAYOUT). Runs recorded before keep
-- the headers layout, which the checker still reads; new runs put the event id, seq and publish
-- time in the value and send no headers, so the producer can hand librdkafka a batch at a time.
ALTER TABLE runs ADD COLUMN record_layout text NOT NULL DEFAULT 'headers'
    CHECK (record_layout IN ('headers', 'value'));
ALTER TABLE runs ALTER COLUMN record_layout SET DEFAULT 'value';
