-- The producer a run drove (issue 39): its client (librdkafka or the Java client), the settings
-- the run asked for over its mode (the forms' producer_settings, the CLI's --set; secrets masked),
-- and the findings: settings that contradict a guarantee the mode declares (catalog.contradictions).
-- producer_config already holds the effective settings the client was given. A verdict names the
-- findings whose guarantee was broken (broken_settings), so that a result can be traced to the
-- exact configuration that produced it.
ALTER TABLE runs ADD COLUMN client text NOT NULL DEFAULT 'librdkafka' CHECK (client IN ('librdkafka', 'java')),
    ADD COLUMN settings jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN findings jsonb NOT NULL DEFAULT '[]'::jsonb;
COMMENT ON COLUMN runs.settings IS 'producer settings the run asked for over its mode, in its client''s key names';
COMMENT ON COLUMN runs.findings IS 'settings contradicting a declared guarantee: [{guarantee, setting, why}]';
ALTER TABLE reconcile_summary ADD COLUMN broken_settings text;
COMMENT ON COLUMN reconcile_summary.broken_settings IS
    'the run''s settings that contradict a guarantee its verdict found broken, as key=value';
