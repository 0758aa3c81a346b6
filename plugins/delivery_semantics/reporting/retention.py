"""Retention of the platform's own topics (`local/semantics gc`): a scheduled matrix makes a topic
per run, each on three brokers, and would fill their disks. A topic unused for longer than the
retention (made, loaded, read by a consumer run or reconciled; sql/V033's `platform_topics`) is
deleted and recorded in `retired_topics` with the bytes it took. An audit's topic is a team's own
and never a candidate. The ledger and the results stay: a run's verdict outlives its records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

import psycopg2
import psycopg2.extras

from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import Database, java_client_config

RETENTION_ENV = "SEMANTICS_RETENTION_DAYS"
DEFAULT_DAYS = 7


class RetentionError(ValueError):
    """Bad input to gc: a one-line message, exit 2."""


@dataclass(frozen=True, slots=True)
class Expired:
    topic: str
    owner: str
    last_used_at: datetime
    bytes: int | None  # every replica's log on the brokers' disks; None when it could not be read


def retention_days(given: int | None = None) -> int:
    """The retention in whole days: the argument, else SEMANTICS_RETENTION_DAYS, else 7."""
    if given is not None:
        days = given
    else:
        text = os.environ.get(RETENTION_ENV, str(DEFAULT_DAYS)).strip()
        if not text.isdigit():
            raise RetentionError(f"{RETENTION_ENV}={text[:40]!r} is not a whole number of days")
        days = int(text)
    if not 0 <= days <= 36500:
        raise RetentionError(f"a retention of {days} days is out of range (0 to 36500)")
    return days


def expired(db: Database, kafka_conf: dict, days: int, sizes: bool = True) -> list[Expired]:
    """The platform's topics unused for more than `days` days that the cluster still holds."""
    with (
        psycopg2.connect(**db.psycopg2_kwargs()) as c,
        c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur,
    ):
        cur.execute(
            """SELECT topic, owner, last_used_at FROM platform_topics
               WHERE retired_at IS NULL AND last_used_at < now() - make_interval(days => %s)
               ORDER BY last_used_at, topic""",
            (days,),
        )
        rows = cur.fetchall()
    held = set(topics.admin_client(kafka_conf).list_topics(timeout=30).topics)
    rows = [r for r in rows if r["topic"] in held]
    measured = _sizes(kafka_conf, [r["topic"] for r in rows]) if sizes and rows else {}
    return [Expired(r["topic"], r["owner"], r["last_used_at"], measured.get(r["topic"])) for r in rows]


def _sizes(kafka_conf: dict, names: list[str]) -> dict[str, int]:
    from delivery_semantics.workload import java_client

    try:
        return java_client.topic_sizes(java_client_config(kafka_conf), names)
    except java_client.JavaClientError:
        return {}  # the sizes are a report; deleting does not need them


def retire(db: Database, kafka_conf: dict, doomed: list[Expired]) -> list[str]:
    """Deletes the topics and records each as retired; returns the ones Kafka refused, with why."""
    if not doomed:
        return []
    refused = []
    admin = topics.admin_client(kafka_conf)  # must outlive the futures
    futures = admin.delete_topics([topics.validate_topic_name(e.topic) for e in doomed], operation_timeout=60)
    gone = []
    for e in doomed:
        try:
            futures[e.topic].result(timeout=90)
            gone.append(e)
        except Exception as err:
            name = err.args[0].name() if err.args and hasattr(err.args[0], "name") else type(err).__name__
            if name == "UNKNOWN_TOPIC_OR_PART":
                gone.append(e)
            else:
                refused.append(f"{e.topic}: {name}")
    with psycopg2.connect(**db.psycopg2_kwargs()) as c, c.cursor() as cur:
        psycopg2.extras.execute_values(
            cur,
            "INSERT INTO retired_topics (topic, owner, bytes) VALUES %s ON CONFLICT (topic) DO NOTHING",
            [(e.topic, e.owner, e.bytes) for e in gone],
        )
    return refused


def human(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
