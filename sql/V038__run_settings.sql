-- What a run was made with beyond its mode or strategy.

-- A consumer run's settings: the client's and the application's keys of its strategy
-- (catalog.Strategy.settings, as given over their defaults), such as auto.commit.interval.ms or
-- max.poll.interval.ms and app.processing.ms. The strategies that reproduce a consumer setting's
-- effect join the catalog, which names the strategies (catalog_judged), so the list of names
-- written here in V006 goes.
ALTER TABLE consumer_runs ADD COLUMN settings jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE consumer_runs DROP CONSTRAINT IF EXISTS consumer_runs_strategy_check;

-- A producer run's `resends_failed`: whether its load sent again what was not acked (an application
-- that retries its failures), when a proof chose it over its mode's; NULL: the mode's.
ALTER TABLE runs ADD COLUMN resends_failed boolean;
