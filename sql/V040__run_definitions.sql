-- What each run is judged against, resolved when it was made and kept with it (issue 69,
-- catalog.Definition): the subject's side, isolation and promise, the guarantees its scenario leaves
-- in force, DESIGN.md's expectation under it, whether it writes transactions, and a mode's producer
-- settings; and its content hash. The checker judges a run by its own definition, so editing or
-- deleting a mode file later changes no verdict of a run made before, and the views find a run's
-- own isolation level in it. NULL: a run made before, judged by the catalog's current word.
ALTER TABLE runs ADD COLUMN definition jsonb, ADD COLUMN definition_hash text;
ALTER TABLE consumer_runs ADD COLUMN definition jsonb, ADD COLUMN definition_hash text;
