-- producer_crash runs were recorded under scenario 'none' by the forked load that made them (fixed
-- in the load CLI). Their timeline names the scenario the nemesis applied: relabel from it.
-- Reconcile such a run again to refresh its verdict and expectation.
UPDATE runs SET scenario = timeline ->> 'scenario'
WHERE timeline ->> 'scenario' IS NOT NULL AND scenario <> timeline ->> 'scenario';
UPDATE reconcile_summary s SET scenario = r.scenario
FROM runs r WHERE r.run_id = s.reconciliation_id AND s.scenario IS DISTINCT FROM r.scenario;
