#!/bin/bash
# Runs once, on the first start of mariadb: a team's MySQL-family outbox database, its owner and the
# read-only user audits read it with.
set -euo pipefail
quote() { printf "'%s'" "${1//\'/\'\'}"; }
MYSQL_PWD="$MARIADB_ROOT_PASSWORD" mariadb -uroot <<SQL  # the password by environment, off the command line
CREATE DATABASE IF NOT EXISTS outbox_demo;
CREATE USER IF NOT EXISTS 'outbox_app'@'%' IDENTIFIED BY $(quote "$OUTBOX_OWNER_PASSWORD");
GRANT ALL PRIVILEGES ON outbox_demo.* TO 'outbox_app'@'%';
CREATE USER IF NOT EXISTS 'outbox_reader'@'%' IDENTIFIED BY $(quote "$OUTBOX_READER_PASSWORD");
GRANT SELECT ON outbox_demo.* TO 'outbox_reader'@'%';
SQL
