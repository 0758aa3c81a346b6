"""What a deployment prepares once, and may prepare again safely: the results database's schema
(its migrations, each applied once) and Airflow's `kafka_cluster` pool, which keeps runs that inject
faults from sharing the cluster. `local/semantics init` runs both; compose's airflow-init and the
local stack run the same."""

from __future__ import annotations

import subprocess
import sys

from delivery_semantics import catalog

POOL_DESCRIPTION = "loads that inject faults into the shared Kafka cluster"


class DeployError(RuntimeError):
    """A step that could not be done: one line."""


def ensure_pool(slots: int = catalog.CLUSTER_POOL_SLOTS, env: dict | None = None) -> None:
    """The cluster's pool with `slots` slots (made, or its slots set), through Airflow's own CLI."""
    res = subprocess.run(
        [sys.executable, "-m", "airflow", "pools", "set", catalog.CLUSTER_POOL, str(slots), POOL_DESCRIPTION],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if res.returncode != 0:
        last = (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}").splitlines()[-1]
        raise DeployError(f"the {catalog.CLUSTER_POOL} pool could not be set: {last[:300]}")


def init(pool_slots: int | None = catalog.CLUSTER_POOL_SLOTS) -> list[str]:
    """The schema migrated, then the pool (unless `pool_slots` is None). Returns the migrations
    applied now (none when the schema was current)."""
    from delivery_semantics.history import schema
    from delivery_semantics.plumbing.endpoints import ledger_database

    applied = schema.migrate(ledger_database())
    if pool_slots is not None:
        ensure_pool(pool_slots)
    return applied
