-- Kinds a Kafka expert would ask the checker for (issue 17), each counted in reconcile_summary,
-- NULL where it was not checked (runs reconciled before this version, and where the kind does
-- not apply):
-- - torn_transaction [KAFKA-17754]: under read_committed a committed transaction is visible whole
--   or not at all, across partitions. An event missing from a partly visible committed
--   transaction is reported, with the positions of the events that were read (torn_events).
-- - inconsistent_offset [Jepsen: inconsistent-offsets]: the position the ledger recorded an
--   event's ack at holds another event, the trace of a log truncated and written again (an
--   isolated leader's unclean election). Checked where the ledger's producers wrote the topic
--   (inconsistent_offsets).
-- - poll_skip and nonmonotonic_poll [Jepsen: poll-skip, nonmonotonic-poll]: every consumer
--   session writes, before it processes a poll's records, the offsets that poll returned per
--   partition, in order (consumer_polls). Within a session, an offset not above the one polled
--   before it is a nonmonotonic poll; a record of the input topic (read_committed, as the
--   consumers read) between two consecutive offsets of a session is a poll skip (poll_skips,
--   nonmonotonic_polls).
CREATE TABLE consumer_polls (
    consumer_run_id  text        NOT NULL REFERENCES consumer_runs (consumer_run_id) ON DELETE CASCADE,
    session          integer     NOT NULL,
    poll_no          integer     NOT NULL,
    "partition"      integer     NOT NULL,
    offsets          bigint[]    NOT NULL,
    recorded_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_run_id, session, poll_no, "partition")
);

ALTER TABLE reconcile_summary ADD COLUMN torn_events bigint, ADD COLUMN inconsistent_offsets bigint,
    ADD COLUMN poll_skips bigint, ADD COLUMN nonmonotonic_polls bigint;
ALTER TABLE reconcile_discrepancies DROP CONSTRAINT reconcile_discrepancies_kind_check;
ALTER TABLE reconcile_discrepancies ADD CONSTRAINT reconcile_discrepancies_kind_check
    CHECK (kind IN ('duplicate', 'lost_acked', 'lost_unacked', 'unknown_landed', 'unexpected', 'out_of_order',
                    'aborted_visible', 'malformed', 'stale_overwrite', 'torn_transaction', 'inconsistent_offset',
                    'poll_skip', 'nonmonotonic_poll'));
