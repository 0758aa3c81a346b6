"""librdkafka (confluent-kafka), in the load process: the Kafka connection's settings as they are."""

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
    enum_setting,
    int_setting,
    table,
)

NAME = "librdkafka"


def queue_mb(conf, payload_bytes: int) -> int:
    """What librdkafka's queue may hold (the lesser of its two bounds, a record's overhead counted),
    and the process around it."""
    kbytes = int(conf.get("queue.buffering.max.kbytes", 1048576))
    messages = int(conf.get("queue.buffering.max.messages", 100000))
    return 64 + min(kbytes >> 10, (messages * (int(payload_bytes) + 256)) >> 20)


SPEC = ClientSpec(
    NAME,
    "librdkafka (confluent-kafka), in the load process",
    ClientPolicy(
        NAME,
        table(
            *SHARED,
            int_setting("batch.size", 1, 64 * MIB),
            int_setting("batch.num.messages", 1, 1_000_000),
            int_setting("compression.level", -1, 12),
            # 0 is librdkafka's "forever": a record that is never acked or failed holds its run for good.
            int_setting("message.timeout.ms", 1000, 900_000),
            int_setting("queue.buffering.max.messages", 1000, 10_000_000),
            int_setting("queue.buffering.max.kbytes", 1, 1024 * 1024),
            int_setting("socket.timeout.ms", 10, 300_000),
            *SHARED_FILE,
            int_setting("message.max.bytes", 1000, 100 * MIB, tuning=False),
            int_setting("message.copy.max.bytes", 0, 100 * MIB, tuning=False),
            bool_setting("enable.gapless.guarantee", tuning=False),
            enum_setting(
                "partitioner",
                *("random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"),
                tuning=False,
            ),
            int_setting("sticky.partitioning.linger.ms", 0, 60_000, tuning=False),
            int_setting("queue.buffering.backpressure.threshold", 1, 1_000_000, tuning=False),
            bool_setting("socket.keepalive.enable", tuning=False),
            bool_setting("socket.nagle.disable", tuning=False),
            int_setting("socket.send.buffer.bytes", 0, 100 * MIB, tuning=False),
            int_setting("socket.receive.buffer.bytes", 0, 100 * MIB, tuning=False),
            int_setting("metadata.max.age.ms", 1, 86_400_000, tuning=False),
            int_setting("topic.metadata.refresh.interval.ms", -1, 3_600_000, tuning=False),
            int_setting("connections.max.idle.ms", 0, 2_147_483_647, tuning=False),
            enum_setting("broker.address.family", "any", "v4", "v6", tuning=False),
        ),
        # librdkafka's aliases of the keys above: an override under either name is the same setting.
        MappingProxyType(
            {
                "request.required.acks": "acks",
                "message.send.max.retries": "retries",
                "max.in.flight": "max.in.flight.requests.per.connection",
                "delivery.timeout.ms": "message.timeout.ms",
                "queue.buffering.max.ms": "linger.ms",
                "compression.codec": "compression.type",
            }
        ),
        ("transactional.id", "on_delivery", "delivery.report.only.error", "dr_msg_cb", "dr_cb", "error_cb"),
    ),
    MappingProxyType(
        {
            # librdkafka's default is 5 ms. An unpaced load's batches fill to batch.size (1 MB) only
            # at about 100 ms: 5,863 records a batch against 3,617 at 20 ms, and the machine spends
            # 5.3-6.4 s of CPU on 1M records against 6.7-7.8 s. +10-25% records/s by mode, where
            # ProducerPerformance, whose unkeyed batches are full either way, gains nothing
            # measurable. A paced load pays it as ack latency (p50 107 ms against 28 ms at 5,000
            # records/s): set linger.ms lower to measure latency (docs/BENCHMARKS.md).
            "linger.ms": "100",
            "batch.num.messages": "10000",
            "compression.type": "none",
            "request.timeout.ms": "10000",
            "message.timeout.ms": "60000",
            "retry.backoff.ms": "100",
            "queue.buffering.max.messages": "200000",
        }
    ),
    MappingProxyType(
        {
            "acks": "all",
            "enable.idempotence": "false",
            "retries": str(RETRIES_MAX),
            "max.in.flight.requests.per.connection": "1000000",
        }
    ),
    size_key="message.max.bytes",
    runtime="delivery_semantics.workload.client:LibrdkafkaClient",
    record_formats=("text", "avro"),
    memory_mb=lambda conf, payload_bytes: queue_mb(conf, payload_bytes),
)
