#!/bin/bash
# The certs service, once per deployment: the CA, the brokers' certificate (every broker's name) in
# a PKCS12 keystore for the SASL_SSL, SSL and OAUTH listeners, and the mutual-TLS client certificate
# with its key encrypted. Passwords come from the environment, never a command line (-pass* env:).
set -euo pipefail
cd /tls
if [[ -f ca.pem && -f broker.p12 && -f client.pem && -f client.key ]]; then
  echo "certificates already made"
  exit 0
fi
umask 077
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 -subj "/CN=delivery-semantics CA"
openssl req -newkey rsa:2048 -nodes -keyout broker.key -out broker.csr -subj "/CN=kafka"
printf 'subjectAltName=DNS:kafka-1,DNS:kafka-2,DNS:kafka-3,DNS:localhost\n' >broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out broker.pem -days 3650 -extfile broker.ext
openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -out broker.p12 -passout env:TLS_STORE_PASSWORD
openssl req -newkey rsa:2048 -keyout client.key -passout env:CLIENT_KEY_PASSWORD -out client.csr -subj "/CN=semantics"
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 3650
rm -f ca.key ca.srl broker.key broker.pem broker.csr broker.ext client.csr
# The brokers run as uid 1000, Airflow's processes in group 0: each reads what it needs, no one else.
chown 1000:0 broker.p12 ca.pem client.pem client.key
chmod 0640 broker.p12 client.key
chmod 0644 ca.pem client.pem
echo "certificates made"
