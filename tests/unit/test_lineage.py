"""An audit's lineage in OpenLineage's naming (reporting/lineage.py): the topic, the outbox table and
the sink as inputs, the results tables and the deduplicated copy as outputs, and the promise's
guarantees as assertions on the topic, each kept or not as the judged result says."""

from __future__ import annotations

import pytest
from conftest import REPO

from delivery_semantics.audit import audits
from delivery_semantics.plumbing.endpoints import Connection
from delivery_semantics.reporting import lineage

CONNECTIONS = {
    "kafka_secure": Connection("kafka_secure", "kafka", extra={"bootstrap.servers": "b1.example:9093,b2.example:9093"}),
    "outbox_db": Connection("outbox_db", "postgres", host="orders-db.example", port=5432, schema="orders"),
    "ledger_db": Connection("ledger_db", "postgres", host="results.example", port=6432, schema="semantics"),
}


def _result(broken_by: list[str]) -> dict:
    return {"scenario": "audit", "broken_by": broken_by}


def test_a_batch_audits_datasets_and_its_assertions():
    audit = audits.load(REPO / "audits" / "orders.yaml")
    inputs, outputs = lineage.audit_datasets(
        audit, CONNECTIONS.__getitem__, "s3a://lake/semantics", _result(["lost_acked"])
    )
    assert [(d.namespace, d.name) for d in inputs] == [
        ("kafka://b1.example:9093", "orders"),
        ("postgres://orders-db.example:5432", "orders.public.outbox"),
    ]
    assert dict(inputs[0].assertions) == {"no_acked_loss": False}, "at_least_once's one guarantee, broken"
    assert [(d.namespace, d.name) for d in outputs] == [
        ("postgres://results.example:6432", "semantics.public.reconcile_summary"),
        ("postgres://results.example:6432", "semantics.public.reconcile_discrepancies"),
        ("s3://lake", "semantics/dedup_events"),
    ]


def test_a_continuous_audit_with_a_sink_reads_it_and_writes_its_windows():
    audit = audits.load(REPO / "audits" / "orders_stream.yaml")
    connections = {
        **CONNECTIONS,
        audit.kafka_conn_id: CONNECTIONS["kafka_secure"],
        audit.outbox_conn_id: CONNECTIONS["outbox_db"],
    }
    inputs, outputs = lineage.audit_datasets(audit, connections.__getitem__, "/var/lake", _result([]))
    assert len(inputs) == 3 and inputs[2].namespace == "postgres://orders-db.example:5432"
    assert inputs[2].name == f"orders.{audit.sink['table']}"
    assert all(kept for _, kept in inputs[0].assertions) and inputs[0].assertions
    assert {d.name.split(".")[-1] for d in outputs} >= {"audit_windows", "audit_discrepancies"}


def test_not_yet_judged_means_no_assertions():
    audit = audits.load(REPO / "audits" / "orders.yaml")
    inputs, _ = lineage.audit_datasets(audit, CONNECTIONS.__getitem__, "/var/lake", None)
    assert inputs[0].assertions == ()


@pytest.mark.parametrize(
    "location, expected",
    [
        ("/var/lake/orders", ("file", "/var/lake/orders")),
        ("s3a://bucket/a/b", ("s3://bucket", "a/b")),
        ("hdfs://nn:8020/x", ("hdfs://nn:8020", "x")),
    ],
)
def test_paths_are_named_as_openlineage_names_them(location, expected):
    d = lineage.path(location)
    assert (d.namespace, d.name) == expected
