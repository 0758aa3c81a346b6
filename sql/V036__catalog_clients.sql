-- The producer clients as a catalog table (issue 57), as the anomaly kinds are (V024): a run's
-- client refers to its row, and `schema.migrate` writes one row per registered ClientSpec
-- (clients/), so that a new client needs no migration of its own. The CHECK it replaces named the
-- two clients by hand.
CREATE TABLE catalog_clients (
    name        text PRIMARY KEY,
    description text NOT NULL
);
INSERT INTO catalog_clients (name, description) VALUES
    ('librdkafka', 'librdkafka (confluent-kafka), in the load process'),
    ('java', 'the Java client (kafka-clients), in a JVM');
ALTER TABLE runs DROP CONSTRAINT runs_client_check;
ALTER TABLE runs ADD CONSTRAINT runs_client_fkey FOREIGN KEY (client) REFERENCES catalog_clients (name);
