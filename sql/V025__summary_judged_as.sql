-- reconcile_summary.mode held a consumer strategy for a consumer run: the column is the catalog
-- name (a delivery mode or a consumer strategy) whose promise the row's verdict judges. The views
-- made before keep their output column `mode`.
ALTER TABLE reconcile_summary RENAME COLUMN mode TO judged_as;
COMMENT ON COLUMN reconcile_summary.judged_as IS
    'the catalog''s delivery mode or consumer strategy whose promise the verdict judges';
