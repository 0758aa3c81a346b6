-- What the nemesis did to a run, in order: {"scenario", "backend", "events": [{t, at, action, ...}]}.
ALTER TABLE runs ADD COLUMN timeline jsonb;
