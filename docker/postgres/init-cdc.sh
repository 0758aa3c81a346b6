#!/bin/bash
# Runs once, on the first start of postgres-cdc (wal_level=logical): the connector pipelines' outbox
# database. Its owner writes the outbox and is the role Debezium replicates with; the reader audits it.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" \
  -v owner_pw="$OUTBOX_OWNER_PASSWORD" -v reader_pw="$OUTBOX_READER_PASSWORD" <<'SQL'
CREATE ROLE outbox_app LOGIN REPLICATION PASSWORD :'owner_pw';
CREATE ROLE outbox_reader LOGIN PASSWORD :'reader_pw';
ALTER ROLE outbox_reader SET default_transaction_read_only = on;
CREATE DATABASE outbox_cdc OWNER outbox_app;
GRANT CONNECT ON DATABASE outbox_cdc TO outbox_reader;
\connect outbox_cdc
GRANT USAGE ON SCHEMA public TO outbox_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE outbox_app IN SCHEMA public GRANT SELECT ON TABLES TO outbox_reader;
SQL
