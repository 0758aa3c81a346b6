#!/bin/bash
# Runs once, on the first start of the postgres container: the platform's and Airflow's databases.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" <<SQL
CREATE ROLE semantics LOGIN PASSWORD '${SEMANTICS_DB_PASSWORD}';
CREATE DATABASE semantics OWNER semantics;
CREATE ROLE airflow LOGIN PASSWORD '${AIRFLOW_DB_PASSWORD}';
CREATE DATABASE airflow OWNER airflow;
SQL
