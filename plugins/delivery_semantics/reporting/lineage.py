"""An audit's lineage in OpenLineage's terms, for apache-airflow-providers-openlineage: what its
reconcile task read (the topic, the outbox table, the sink) and wrote (the results tables, the
deduplicated copy), named by OpenLineage's dataset naming, and on the topic one data quality
assertion per guarantee of the promise (success when kept). The provider calls the reconcile
operator's `get_openlineage_facets_on_complete`; without the provider nothing here is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from delivery_semantics import catalog, modes


@dataclass(frozen=True)
class Dataset:
    namespace: str
    name: str
    assertions: tuple[tuple[str, bool], ...] = field(default=())


def kafka(servers: str, topic: str) -> Dataset:
    return Dataset(f"kafka://{servers.split(',')[0].strip()}", topic)


def database(conn, table: str) -> Dataset:
    """A table of a connection (postgres: database.schema.table; mysql: database.table)."""
    scheme = "mysql" if conn.conn_type in ("mysql", "mariadb") else "postgres"
    port = conn.port or (3306 if scheme == "mysql" else 5432)
    schema_table = table if "." in table or scheme == "mysql" else f"public.{table}"
    return Dataset(f"{scheme}://{conn.host}:{port}", f"{conn.schema}.{schema_table}")


def path(location: str) -> Dataset:
    """A folder or URI (a Delta or Parquet table): s3a:// as s3://bucket, a local path as file."""
    parts = urlsplit(location)
    if parts.scheme in ("s3a", "s3n", "s3"):
        return Dataset(f"s3://{parts.netloc}", parts.path.lstrip("/"))
    if parts.scheme and parts.scheme != "file":
        return Dataset(f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/"))
    return Dataset("file", parts.path or location)


def audit_datasets(audit, connection, lakehouse: str, result: dict | None) -> tuple[list[Dataset], list[Dataset]]:
    """(inputs, outputs) of an audit's reconcile task; `connection(conn_id)` reads a connection, and
    `result` (the results file's result, when the run was judged) gives the topic's assertions."""
    checks = (
        tuple(modes.guarantees_kept(audit.judged_as, result["scenario"] or "", result["broken_by"])) if result else ()
    )
    kafka_servers = str(connection(audit.kafka_conn_id).extra.get("bootstrap.servers", ""))
    inputs = [
        Dataset(**{**kafka(kafka_servers, audit.topic).__dict__, "assertions": checks}),
        database(connection(audit.outbox_conn_id), audit.outbox["table"]),
    ]
    if audit.sink:
        sink = audit.sink
        inputs.append(
            database(connection(audit.sink_conn_id), sink["table"])
            if "table" in sink
            else path(audit.data_path(sink["path"], "sink.path"))
        )
    results = connection("ledger_db")
    tables = (
        ("audit_windows", "audit_discrepancies") if audit.windowed else ("reconcile_summary", "reconcile_discrepancies")
    )
    outputs = [database(results, t) for t in tables]
    store = audit.dedup_copy.get("store", catalog.DEFAULT_DEDUP_COPY)
    if store == "lakehouse":
        outputs.append(path(catalog.dedup_copy_table(audit.dedup_copy.get("path") or lakehouse)))
    elif store == "postgres":
        outputs.append(database(results, "dedup_events"))
    return inputs, outputs


def operator_lineage(inputs: list[Dataset], outputs: list[Dataset]):
    """The provider's OperatorLineage of these datasets, the topic's assertions as its
    DataQualityAssertions input facet."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.generated.base import InputDataset, OutputDataset
    from openlineage.client.generated.data_quality_assertions_dataset import (
        Assertion,
        DataQualityAssertionsDatasetFacet,
    )

    def facets(d: Dataset) -> dict:
        if not d.assertions:
            return {}
        checks = [Assertion(assertion=g, success=kept) for g, kept in d.assertions]
        return {"dataQualityAssertions": DataQualityAssertionsDatasetFacet(assertions=checks)}

    return OperatorLineage(
        inputs=[InputDataset(namespace=d.namespace, name=d.name, inputFacets=facets(d)) for d in inputs],
        outputs=[OutputDataset(namespace=d.namespace, name=d.name) for d in outputs],
    )
