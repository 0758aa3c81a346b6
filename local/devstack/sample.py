"""`local/stack sample`: the README tour's own pipeline, for audits/quickstart.yaml. An outbox of
orders (public.quickstart_outbox in the team's database) and the topic a relay wrote them to, at
least once, with what such a relay does under faults: one row marked SENT that never reached the
topic, and one written twice (a retry after a lost ack). Made afresh each time."""

from __future__ import annotations

import uuid

import psycopg2
from confluent_kafka import Producer
from psycopg2 import sql

from delivery_semantics.plumbing import topics
from devstack.credentials import secret
from devstack.kafka import bootstrap_servers
from devstack.ports import HOST
from devstack.postgres import OUTBOX_DB, OUTBOX_OWNER, PG_PORT

TOPIC, TABLE = "quickstart_orders", "public.quickstart_outbox"
_TABLE = sql.Identifier("public", "quickstart_outbox")


def fill_quickstart(orders: int = 1000) -> dict[str, str]:
    """Returns the ids planted as lost and duplicated, for whoever checks the audit's answer."""
    conf = {"bootstrap.servers": bootstrap_servers()}
    topics.recreate_topic(conf, TOPIC)
    tag = uuid.uuid4().hex[:6]
    ids = [f"order-{tag}-{i:05d}" for i in range(orders)]
    lost, duplicated = ids[orders // 3], ids[2 * orders // 3]
    with (
        psycopg2.connect(
            host=HOST, port=PG_PORT, dbname=OUTBOX_DB, user=OUTBOX_OWNER, password=secret("OUTBOX_OWNER_PASSWORD")
        ) as c,
        c.cursor() as cur,
    ):
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(_TABLE))
        cur.execute(
            sql.SQL(
                "CREATE TABLE {} (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now(), state text NOT NULL)"
            ).format(_TABLE)
        )
        cur.executemany(sql.SQL("INSERT INTO {} (id, state) VALUES (%s, 'SENT')").format(_TABLE), [(i,) for i in ids])
    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for i in ids:
        for _ in range(0 if i == lost else 2 if i == duplicated else 1):
            p.produce(TOPIC, key=i.encode(), value=b'{"total": 42}', headers=[("event_id", i.encode())])
    if p.flush(60):
        raise RuntimeError("the sample's records were not all acked within 60 s")
    return {"lost": lost, "duplicated": duplicated}
