-- What each delivery mode and consumer strategy is judged on: its isolation level and promise.
-- The catalog (plugins/delivery_semantics/catalog.py) defines them; schema.migrate writes them
-- here every time it runs, so the views read the catalog's mapping instead of repeating it.
CREATE TABLE catalog_judged (
    name       text PRIMARY KEY,
    side       text NOT NULL CHECK (side IN ('producer', 'consumer')),
    isolation  text NOT NULL CHECK (isolation IN ('read_committed', 'read_uncommitted')),
    promise    text NOT NULL
);
