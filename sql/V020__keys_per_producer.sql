-- Each producer of a run writes keys of its own: 'k' || (key_base + n % keys), key_base being the
-- producer's number times keys. With one writer per key, a key's order is Kafka's to keep and
-- out_of_order checks it; two producers writing one key concurrently had no order between them,
-- and every event of the slower one read as out of order (generator.Generator).
ALTER TABLE ledger_event_ranges ADD COLUMN key_base integer NOT NULL DEFAULT 0 CHECK (key_base >= 0);
