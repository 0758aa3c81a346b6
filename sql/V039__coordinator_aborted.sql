-- coordinator_aborted (catalog.KINDS): of a transactional run's lost_unacked events, those whose
-- last transaction the broker's transaction coordinator aborted, open past transaction.timeout.ms
-- or fenced by a newer producer of its transactional.id (issue 70). A cause named within
-- lost_unacked, not a second loss: the load writes the coordinator's word into the aborted
-- outcome's error (catalog.COORDINATOR_ABORTED), and the checker counts the events lost with it.
-- NULL where it was not checked: a run without transactions, an audit, a run reconciled before.
ALTER TABLE reconcile_summary ADD COLUMN coordinator_aborted bigint;
