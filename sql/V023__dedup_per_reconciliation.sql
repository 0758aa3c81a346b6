-- The deduplicated copy is per reconciliation: a second reconciliation of the same events (another
-- audit of them, the same audit over a second listener) writes its own rows, instead of finding
-- every event id taken by the first. A rerun of one reconciliation still rewrites its own rows.
ALTER TABLE dedup_events DROP CONSTRAINT dedup_events_pkey;
ALTER TABLE dedup_events ADD PRIMARY KEY (reconciliation_id, event_id);
DROP INDEX dedup_events_reconciliation;
