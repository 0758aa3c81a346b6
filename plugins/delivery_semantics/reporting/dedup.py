"""The deduplicated copies, read without Spark: `dedup_copies` says where each reconciliation's is
(a partition of the lakehouse's Delta table, or rows of PostgreSQL's dedup_events), deltalake reads
Delta as Arrow, and DuckDB runs SQL on it with no extension to download.

    local/semantics dedup show RECONCILIATION_ID [--limit N]
    local/semantics dedup sql "SELECT reconciliation_id, count(*) FROM dedup_events GROUP BY 1"
    local/semantics dedup vacuum [--retain-hours N] [--dry-run] [--lakehouse PATH]

`forget` deletes retired runs' partitions (`local/semantics gc`).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from delivery_semantics import catalog
from delivery_semantics.plumbing.db import query
from delivery_semantics.plumbing.spark import lakehouse

COLUMNS = catalog.DEDUP_COPY_COLUMNS


class NoCopy(LookupError):
    """The reconciliation wrote no deduplicated copy (off, or not reconciled)."""


def where(reconciliation_id: str) -> dict:
    rows = query("SELECT * FROM dedup_copies WHERE reconciliation_id = %s", (reconciliation_id,))
    if not rows:
        raise NoCopy(f"no deduplicated copy is recorded for {reconciliation_id!r} (dedup_copies)")
    return rows[0]


def lakehouse_table(location: str | None = None):
    """The lakehouse's dedup_events as a pyarrow dataset (every reconciliation's partition)."""
    return _delta_table(location).to_pyarrow_dataset()


def _delta_table(location: str | None):
    import deltalake

    return deltalake.DeltaTable(location or catalog.dedup_copy_table(lakehouse()))


def vacuum(retain_hours: int | None = None, dry_run: bool = False, location: str | None = None) -> list[str]:
    """The files of the lakehouse's dedup_events that a commit removed (the partitions reruns
    replaced), deleted once removed longer ago than `retain_hours` (by default the table's
    delta.deletedFileRetentionDuration, 7 days); their paths in the table. Until then they keep
    older versions readable. Only removed files: a write in progress has committed nothing, and
    the files of the current version stay with their checksums."""
    table = _delta_table(location)
    kwargs = {"retention_hours": retain_hours, "enforce_retention_duration": retain_hours is None}
    files = table.vacuum(dry_run=True, **kwargs)
    # The log keeps naming what a vacuum deleted until its retention ends: a local table's are
    # those still there (named as on disk).
    uri = urlsplit(table.table_uri)
    if uri.scheme == "file":
        root = Path(unquote(uri.path))
        files = [f for f in files if (root / f).exists()]
    if files and not dry_run:
        table.vacuum(dry_run=False, **kwargs)
    return files


# The platform's own reconciliation ids (a run's or a consumer run's): all `forget` is ever given.
_RECONCILIATION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


def forget(location: str, reconciliation_ids: list[str], attempts: int = 5) -> tuple[int, int]:
    """The lakehouse table's partitions of these reconciliations deleted in one Delta commit, then,
    in a local table, their files removed at once (elsewhere `vacuum` removes them after the
    table's retention); returns the rows deleted and the bytes freed. No reconciliation writes
    those partitions again (gc names runs whose topic is gone), so no reader of the current table
    loses a file; a commit another writer made first is tried again."""
    import deltalake

    bad = [i for i in reconciliation_ids if not _RECONCILIATION_ID.match(i)]
    if bad:
        raise ValueError(f"{bad[0][:60]!r} is not a platform run's reconciliation id")
    if not reconciliation_ids:
        return 0, 0
    predicate = "reconciliation_id IN (" + ", ".join(f"'{i}'" for i in sorted(set(reconciliation_ids))) + ")"
    for attempt in range(attempts):
        table = _delta_table(location)
        files = [(path, size) for path, size, _ in _partition_files(table, reconciliation_ids)]
        try:
            deleted = table.delete(predicate)["num_deleted_rows"]
            break
        except deltalake.exceptions.CommitFailedError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * 2**attempt)
    uri = urlsplit(table.table_uri)
    freed = 0
    if uri.scheme in ("", "file"):
        root = Path(unquote(uri.path))
        for path, size in files:
            f = root / unquote(path)
            if f.is_file():
                f.unlink()
                freed += size
                crc = f.with_name(f".{f.name}.crc")
                crc.unlink(missing_ok=True)
        for folder in {(root / unquote(path)).parent for path, _ in files}:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return deleted, freed


def partition_bytes(location: str, reconciliation_ids: list[str]) -> dict[str, int]:
    """What each reconciliation's partition of the lakehouse table holds, by Delta's own log (a
    local folder or a URI alike)."""
    held: dict[str, int] = {}
    for _, size, rid in _partition_files(_delta_table(location), reconciliation_ids):
        held[rid] = held.get(rid, 0) + size
    return held


def _partition_files(table, reconciliation_ids: list[str]) -> list[tuple[str, int, str]]:
    """The current files of these reconciliations' partitions: path in the table, bytes, id."""
    import pyarrow

    wanted = set(reconciliation_ids)
    adds = pyarrow.table(table.get_add_actions(flatten=True)).to_pylist()
    return [
        (a["path"], a["size_bytes"], a["partition.reconciliation_id"])
        for a in adds
        if a.get("partition.reconciliation_id") in wanted
    ]


def rows(reconciliation_id: str, limit: int | None = None) -> list[dict]:
    """A reconciliation's copy, one dict per event id, from wherever it was written, by event id."""
    copy = where(reconciliation_id)
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    if copy["store"] == "postgres":
        sql = f"SELECT {cols} FROM dedup_events WHERE reconciliation_id = %s ORDER BY event_id"
        return query(sql + (f" LIMIT {int(limit)}" if limit else ""), (reconciliation_id,))
    import duckdb

    dedup_events = lakehouse_table(copy["location"])  # noqa: F841 (DuckDB finds it by name)
    sql = f"SELECT {cols} FROM dedup_events WHERE reconciliation_id = ? ORDER BY event_id"
    rel = duckdb.execute(sql + (f" LIMIT {int(limit)}" if limit else ""), [reconciliation_id])
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r, strict=True)) for r in rel.fetchall()]


def sql(statement: str) -> tuple[list[str], list[tuple]]:
    """A read-only DuckDB query with `dedup_events` as the lakehouse's table."""
    import duckdb

    con = duckdb.connect()
    con.register("dedup_events", lakehouse_table())
    # The query reads the registered table only: no files, no extensions, no writes.
    con.execute("SET enable_external_access = false")
    rel = con.execute(statement)
    return [d[0] for d in rel.description], rel.fetchall()
