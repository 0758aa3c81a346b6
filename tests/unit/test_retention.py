"""gc's pieces that need no service: a lakehouse table's retired partitions deleted in Delta and
from the disk, exactly those (known answer: three reconciliations planted, two forgotten, the
third's rows intact); a partition bound read back to its run id."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from delivery_semantics.reporting import dedup, retention


def _table(tmp_path, rows: dict[str, int]) -> str:
    location = str(tmp_path / "dedup_events")
    for rid, n in rows.items():  # one commit per reconciliation, as the checker writes them
        data = pa.table({"event_id": [f"{rid}-{i}" for i in range(n)], "reconciliation_id": [rid] * n})
        write_deltalake(location, data, mode="append", partition_by=["reconciliation_id"])
    return location


def _ids(location: str) -> dict[str, int]:
    t = DeltaTable(location).to_pyarrow_table()
    out: dict[str, int] = {}
    for rid in t.column("reconciliation_id").to_pylist():
        out[rid] = out.get(rid, 0) + 1
    return out


def test_forget_deletes_exactly_the_named_partitions_in_delta_and_on_disk(tmp_path):
    location = _table(tmp_path, {"r_old_1": 30, "r_old_2": 5, "r_kept": 12})
    assert dedup.forget(location, ["r_old_1", "r_old_2"])[0] == 35
    assert _ids(location) == {"r_kept": 12}
    folders = {p.name for p in (tmp_path / "dedup_events").iterdir()}
    assert folders == {"_delta_log", "reconciliation_id=r_kept"}
    kept = sorted(DeltaTable(location).to_pyarrow_table().column("event_id").to_pylist())
    assert kept == sorted(f"r_kept-{i}" for i in range(12))
    assert dedup.forget(location, ["r_old_1"]) == (0, 0), "forgotten once"
    assert dedup.forget(location, []) == (0, 0)


@pytest.mark.parametrize("bad", ["x') OR true OR ('", "a b", "", "audit:orders:w", "r\r\n1"])
def test_forget_takes_only_a_platform_runs_id(tmp_path, bad):
    location = _table(tmp_path, {"r_kept": 3})
    with pytest.raises(ValueError, match="not a platform run's reconciliation id"):
        dedup.forget(location, [bad])
    assert _ids(location) == {"r_kept": 3}


def test_a_partitions_bound_names_its_run():
    assert retention._BOUND.match("FOR VALUES IN ('r20261129t083809_ab12cd')").group(1) == "r20261129t083809_ab12cd"
    assert retention._BOUND.match("DEFAULT") is None
    assert retention._BOUND.match("FOR VALUES IN ('a', 'b')") is None
