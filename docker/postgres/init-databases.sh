#!/bin/bash
# Runs once, on the first start of the postgres container: the platform's and Airflow's databases,
# and a team's outbox database with an owner that writes it and a read-only role audits read it with.
# Passwords reach psql as variables, quoted by psql itself.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" \
  -v semantics_pw="$SEMANTICS_DB_PASSWORD" -v airflow_pw="$AIRFLOW_DB_PASSWORD" \
  -v owner_pw="$OUTBOX_OWNER_PASSWORD" -v reader_pw="$OUTBOX_READER_PASSWORD" <<'SQL'
CREATE ROLE semantics LOGIN PASSWORD :'semantics_pw';
CREATE DATABASE semantics OWNER semantics;
CREATE ROLE airflow LOGIN PASSWORD :'airflow_pw';
CREATE DATABASE airflow OWNER airflow;
CREATE ROLE outbox_app LOGIN PASSWORD :'owner_pw';
CREATE DATABASE outbox_demo OWNER outbox_app;
CREATE ROLE outbox_reader LOGIN PASSWORD :'reader_pw';
ALTER ROLE outbox_reader SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE outbox_demo TO outbox_reader;
\connect outbox_demo
GRANT USAGE ON SCHEMA public TO outbox_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE outbox_app IN SCHEMA public GRANT SELECT ON TABLES TO outbox_reader;
SQL
