"""The Java client (kafka-clients), in a JVM the load process drives (clients/java): the Kafka
connection's settings turned into the Java client's (endpoints.java_client_config)."""

from __future__ import annotations

from types import MappingProxyType

from delivery_semantics.clients.base import (
    MIB,
    RETRIES_MAX,
    SHARED,
    SHARED_FILE,
    ClientPolicy,
    ClientSpec,
    bool_setting,
    int_setting,
    table,
)

NAME = "java"


def heap_mb(conf) -> int:
    """The runner's heap: twice the client's buffer.memory (32 MiB unless set) and some, at least 256 MiB."""
    try:
        buffer_mb = int((conf or {}).get("buffer.memory", 33554432)) >> 20
    except ValueError:
        buffer_mb = 32
    return max(256, 2 * buffer_mb + 128)


SPEC = ClientSpec(
    NAME,
    "the Java client (kafka-clients), in a JVM",
    ClientPolicy(
        NAME,
        table(
            *SHARED,
            int_setting("batch.size", 0, 64 * MIB),
            int_setting("delivery.timeout.ms", 1000, 900_000),
            # The JVM's heap is sized from it (java_client.command): bounded here, before a JVM starts.
            int_setting("buffer.memory", MIB, 1024 * MIB),
            int_setting("max.block.ms", 0, 900_000),
            *SHARED_FILE,
            int_setting("max.request.size", 1000, 100 * MIB, tuning=False),
            int_setting("compression.gzip.level", -1, 9, tuning=False),
            int_setting("compression.lz4.level", 1, 17, tuning=False),
            int_setting("compression.zstd.level", -131072, 22, tuning=False),
            bool_setting("partitioner.ignore.keys", tuning=False),
            bool_setting("partitioner.adaptive.partitioning.enable", tuning=False),
            int_setting("partitioner.availability.timeout.ms", 0, 3_600_000, tuning=False),
            int_setting("send.buffer.bytes", -1, 100 * MIB, tuning=False),
            int_setting("receive.buffer.bytes", -1, 100 * MIB, tuning=False),
            int_setting("metadata.max.age.ms", 0, 86_400_000, tuning=False),
            int_setting("metadata.max.idle.ms", 5000, 86_400_000, tuning=False),
            int_setting("connections.max.idle.ms", -1, 2_147_483_647, tuning=False),
            int_setting("socket.connection.setup.timeout.max.ms", 1000, 2_147_483_647, tuning=False),
            bool_setting("enable.metrics.push", tuning=False),
        ),
        MappingProxyType({}),
        ("transactional.id", "key.serializer", "value.serializer"),
    ),
    MappingProxyType(
        {
            # The same timeouts as librdkafka's presets, so that faults time out alike; batches per
            # partition of up to 256 KB (the Java client's 16 KB default holds about 60 of these
            # records).
            "linger.ms": "100",
            "batch.size": "262144",
            "compression.type": "none",
            "request.timeout.ms": "10000",
            "delivery.timeout.ms": "60000",
            "retry.backoff.ms": "100",
        }
    ),
    # The Java client's check reports its effective values itself (it also turns idempotence off
    # when another setting conflicts and idempotence was not asked for).
    MappingProxyType(
        {
            "acks": "all",
            "enable.idempotence": "true",
            "retries": str(RETRIES_MAX),
            "max.in.flight.requests.per.connection": "5",
        }
    ),
    size_key="max.request.size",
    runtime="delivery_semantics.workload.java_client:JavaClient",
    start_seconds=1.0,
    timeout_key="delivery.timeout.ms",
    memory_mb=lambda conf, payload_bytes: heap_mb(conf),
)
