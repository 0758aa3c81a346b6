"""The registry: the stack's services in the order they start (and, reversed, stop), each the
object its own module makes (service.Service). One line per service."""

from __future__ import annotations

from devstack import connect, credentials, kafka, mariadb, oidc, postgres, spark, spark_connect, toxiproxy
from devstack.service import Service

SERVICES: tuple[Service, ...] = (
    postgres.SERVICE,
    postgres.CDC_SERVICE,
    mariadb.SERVICE,
    credentials.TLS,
    toxiproxy.SERVICE,
    oidc.SERVICE,
    kafka.SERVICE,
    connect.SERVICE,
    spark.SERVICE,
    spark_connect.SERVICE,
)
BY_NAME = {s.name: s for s in SERVICES}
