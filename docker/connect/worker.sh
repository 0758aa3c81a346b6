#!/bin/bash
# One Connect worker in distributed mode, with the local stack's worker settings
# (local/devstack/connect.py): CONNECT_CLUSTER names its group and topics, CONNECT_EXACTLY_ONCE its
# exactly-once source support (a setting of the worker, for every source task of the cluster). The
# REST API asks for a user and password (basic authentication); a connector's database password is
# a file under /opt/connect-secrets, resolved by the FileConfigProvider restricted to that folder.
set -euo pipefail
umask 077
conf=/tmp/connect
mkdir -p "$conf"
printf 'semantics=%s\n' "$CONNECT_REST_PASSWORD" >"$conf/rest-users.properties"
cat >"$conf/rest-jaas.conf" <<JAAS
KafkaConnect {
  org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule required
  file="$conf/rest-users.properties";
};
JAAS
host="$(hostname)"
cat >"$conf/worker.properties" <<PROPS
bootstrap.servers=toxiproxy:9092,toxiproxy:9093,toxiproxy:9094
group.id=semantics-${CONNECT_CLUSTER}
config.storage.topic=_${CONNECT_CLUSTER}-configs
offset.storage.topic=_${CONNECT_CLUSTER}-offsets
status.storage.topic=_${CONNECT_CLUSTER}-status
config.storage.replication.factor=3
offset.storage.replication.factor=3
status.storage.replication.factor=3
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
listeners=http://0.0.0.0:8083
rest.advertised.host.name=${host}
rest.advertised.port=8083
plugin.path=/opt/connect-plugins
plugin.discovery=service_load
offset.flush.interval.ms=5000
scheduled.rebalance.max.delay.ms=10000
exactly.once.source.support=${CONNECT_EXACTLY_ONCE}
config.providers=file
config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
config.providers.file.param.allowed.paths=/opt/connect-secrets
rest.extension.classes=org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension
PROPS
export KAFKA_OPTS="-Djava.security.auth.login.config=$conf/rest-jaas.conf ${KAFKA_OPTS:-}"
exec /opt/kafka/bin/connect-distributed.sh "$conf/worker.properties"
