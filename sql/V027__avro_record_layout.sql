-- A run's records may be Avro in Confluent's wire format (generator.AVRO_LAYOUT), as teams with a
-- schema registry write them: `--record-format avro`.
ALTER TABLE runs DROP CONSTRAINT runs_record_layout_check;
ALTER TABLE runs ADD CONSTRAINT runs_record_layout_check CHECK (record_layout IN ('headers', 'value', 'avro'));
