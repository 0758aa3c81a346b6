-- A committed transaction's `acked` batch row is a copy of its `written` row, made by PostgreSQL
-- (ledger.Ledger.copy_outcomes) instead of being sent again by the producer: the positions of up
-- to 100,000 events formatted, sent and parsed twice a transaction cost the transactional mode
-- most of its ledger overhead (docs/BENCHMARKS.md). The copy finds the written row here: one
-- entry per transaction, so the batch rows themselves stay unindexed while they are written.
CREATE INDEX ledger_batches_written_txn ON ledger_batches (run_id, producer, txn_no) WHERE status = 'written';
