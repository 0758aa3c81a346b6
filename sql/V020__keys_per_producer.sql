-- Each producer of a run writes keys of its own: 'k' || (key_base + n % keys), key_base being the
-- producer's number times keys. With one writer per key, a key's order is Kafka's to keep and
-- out_of_order checks it; two producers writing one key concurrently had no order between them,
-- and every event of the slower one read as out of order (generator.Generator).
ALTER TABLE ledger_event_ranges ADD COLUMN key_base integer NOT NULL DEFAULT 0 CHECK (key_base >= 0);

CREATE OR REPLACE VIEW ledger_events AS
SELECT run_id, n, event_id, key, seq, publish_at FROM ledger_event_rows
UNION ALL
SELECT r.run_id, x.n, r.run_id || '-' || x.n, 'k' || (r.key_base + x.n % r.keys), x.n / r.keys, r.publish_at
FROM ledger_event_ranges r, generate_series(r.n_lo, r.n_hi - 1) AS x(n);
