-- What the smoke DAG's Spark job counted in a topic; the DAG compares it with what it produced.
CREATE TABLE smoke_counts (
    topic        text        NOT NULL,
    counted      bigint      NOT NULL,
    counted_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX smoke_counts_topic ON smoke_counts (topic, counted_at DESC);
