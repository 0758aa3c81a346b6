-- A window's rerun deletes its own sightings first: by (audit, window_end), without reading the
-- rest of the audit's history, which the primary key (keyed on the event id) would.
CREATE INDEX audit_sightings_window ON audit_sightings (audit, window_end);
