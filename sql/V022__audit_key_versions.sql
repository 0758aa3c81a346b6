-- A continuous audit's window looks up, for each key it reads, the highest version each side
-- showed in the earlier windows: the topic's seq (out_of_order across windows) as well as the
-- sink's (stale overwrites). The index on sink keys alone becomes one on both sides.
DROP INDEX audit_sightings_key;
CREATE INDEX audit_sightings_key ON audit_sightings (audit, key, side, version);
