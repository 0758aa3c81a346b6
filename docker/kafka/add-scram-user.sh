#!/bin/bash
# The kafka-users service, after the brokers are up: the SCRAM-SHA-512 user of the SASL_SSL
# listeners. The password goes through a file of mode 600, never a command line.
set -euo pipefail
umask 077
file="$(mktemp)"
trap 'rm -f "$file"' EXIT
printf 'SCRAM-SHA-512=[password=%s]\n' "$KAFKA_SCRAM_PASSWORD" >"$file"
/opt/kafka/bin/kafka-configs.sh --bootstrap-server kafka-1:19092 --alter --entity-type users \
  --entity-name semantics --add-config-file "$file"
