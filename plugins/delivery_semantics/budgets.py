"""Every run has a budget: in time (a load's deadline, each task's and each DAG run's timeout), in
memory (summed over a run's producers), in Spark resources and in how often a file's DAG may run.
The operator sets the maxima (`SEMANTICS_*`, docs/SECURITY.md); a file, a form or a run only asks
within them, and anything beyond is refused in one line before anything runs. Standard library
only: the DAG files import it.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime, timedelta

from delivery_semantics import locations


class BudgetError(ValueError):
    """Beyond an operator's maximum: one line."""


def _env_int(name: str, default: int) -> int:
    text = locations.setting(name.removeprefix("SEMANTICS_").lower()) or ""
    return int(text) if text.strip().isdigit() else default


def run_max_seconds() -> int:
    """The longest a load may take, whatever its size (SEMANTICS_RUN_MAX_SECONDS, 6 hours)."""
    return _env_int("SEMANTICS_RUN_MAX_SECONDS", 6 * 3600)


def run_memory_mb() -> int:
    """What a run's producers may hold together (SEMANTICS_RUN_MEMORY_MB, 8 GiB)."""
    return _env_int("SEMANTICS_RUN_MEMORY_MB", 8192)


def min_schedule_minutes() -> int:
    """The shortest interval between two scheduled runs of a file's DAG (SEMANTICS_MIN_SCHEDULE_MINUTES, 5)."""
    return _env_int("SEMANTICS_MIN_SCHEDULE_MINUTES", 5)


def spark_max_seconds() -> int:
    """The longest a Spark application may run (SEMANTICS_SPARK_MAX_SECONDS, 2 hours)."""
    return _env_int("SEMANTICS_SPARK_MAX_SECONDS", 2 * 3600)


# A load's floor on throughput when it sets no rate: the slowest run the matrix measured (an isolated
# leader's, 20,000 events in 41 s) is five times faster.
_FLOOR_RECORDS_PER_SECOND = 100
_START_SECONDS = 300  # topic, ledger row, clients and a fault's set-up


def load_seconds(messages: int, rate: int = 0) -> int:
    """A load's deadline from its size: what the slowest healthy run would take, twice, plus its
    set-up; never more than the operator's maximum."""
    pace = min(rate, _FLOOR_RECORDS_PER_SECOND) if rate else _FLOOR_RECORDS_PER_SECOND
    return min(run_max_seconds(), _START_SECONDS + 2 * int(messages) // max(1, pace))


def check_run_memory(producers: int, per_producer_mb: int) -> None:
    total = producers * per_producer_mb
    if total > run_memory_mb():
        raise BudgetError(
            f"{producers} producers of up to {per_producer_mb} MiB each hold {total} MiB, over the run's "
            f"{run_memory_mb()} MiB (SEMANTICS_RUN_MEMORY_MB): fewer producers, or smaller queues"
        )


# The Spark settings an audit may ask for, against the operator's maxima: cores, memory, executors.
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_bytes(text: str) -> int:
    """A Spark size (`512m`, `4g`, `1024k`, a plain number of bytes) in bytes."""
    m = re.fullmatch(r"([0-9]+)([kmgt]?)b?", str(text).strip().lower())
    if not m:
        raise BudgetError(f"{text!r} is not a size")
    return int(m.group(1)) * _UNITS[m.group(2)]


def spark_maxima() -> dict[str, int]:
    return {
        "cores": _env_int("SEMANTICS_SPARK_MAX_CORES", 8),
        "executors": _env_int("SEMANTICS_SPARK_MAX_EXECUTORS", 8),
        "memory_mb": _env_int("SEMANTICS_SPARK_MAX_MEMORY_MB", 16384),
    }


_SPARK_COUNTS = {
    "spark.cores.max": "cores",
    "spark.driver.cores": "cores",
    "spark.executor.cores": "cores",
    "spark.executor.instances": "executors",
}
_SPARK_SIZES = (
    "spark.driver.memory",
    "spark.executor.memory",
    "spark.executor.memoryOverhead",
    "spark.driver.maxResultSize",
)


def check_spark(conf: dict[str, str], where: str) -> None:
    """An audit's `spark:` sizes within the operator's maxima; `spark.driver.maxResultSize` 0
    (unlimited) refused."""
    most = spark_maxima()
    for key, value in conf.items():
        if key in _SPARK_COUNTS:
            limit = most[_SPARK_COUNTS[key]]
            if not 1 <= int(value) <= limit:
                raise BudgetError(
                    f"{where}: spark.{key.removeprefix('spark.')}: {value} is outside 1 to {limit} "
                    f"(SEMANTICS_SPARK_MAX_{_SPARK_COUNTS[key].upper()})"
                )
        elif key in _SPARK_SIZES:
            mb = size_bytes(value) >> 20
            if not 1 <= mb <= most["memory_mb"]:
                raise BudgetError(
                    f"{where}: {key}: {value} is outside 1 MiB to {most['memory_mb']} MiB "
                    "(SEMANTICS_SPARK_MAX_MEMORY_MB; 0, unlimited, is refused)"
                )


# --------------------------------------------------------------------------- schedules

_PRESETS = {
    "@once": None,
    "@hourly": timedelta(hours=1),
    "@daily": timedelta(days=1),
    "@midnight": timedelta(days=1),
    "@weekly": timedelta(weeks=1),
    "@monthly": timedelta(days=28),
    "@quarterly": timedelta(days=90),
    "@yearly": timedelta(days=365),
    "@annually": timedelta(days=365),
}


def _gaps(schedule: str, where: str) -> list[timedelta]:
    """The intervals between a cron expression's next 64 firings."""
    try:
        from croniter import croniter

        it = croniter(schedule, datetime(2026, 1, 1, tzinfo=UTC))
        fires = [it.get_next(datetime) for _ in range(64)]
    except Exception as e:  # croniter's own errors, and the ones it lets through from the datetime module
        raise BudgetError(
            f"{where}: schedule: {schedule!r} is not a cron expression or a preset ({type(e).__name__})"
        ) from None
    return [b - a for a, b in itertools.pairwise(fires)]


def check_schedule(schedule: str | None, where: str) -> None:
    """A file's schedule runs its DAG no more often than the operator's minimum interval:
    `@continuous` and cron expressions that fire sooner are refused."""
    if schedule is None:
        return
    least = timedelta(minutes=min_schedule_minutes())
    if schedule == "@continuous":
        raise BudgetError(f"{where}: schedule: @continuous runs without pause; give an interval of {least} or more")
    if schedule in _PRESETS:
        return
    gap = min(_gaps(schedule, where), default=least)
    if gap < least:
        raise BudgetError(
            f"{where}: schedule: {schedule!r} runs every {gap}; the shortest interval allowed is {least} "
            "(SEMANTICS_MIN_SCHEDULE_MINUTES)"
        )


def longest_interval(schedule: str | None) -> timedelta | None:
    """The longest time between two runs of a (checked) schedule: a continuous audit's longest
    window. None for a DAG that is only triggered."""
    if schedule is None or schedule == "@continuous":
        return None
    if schedule in _LONGEST:
        return _LONGEST[schedule]
    if schedule in _PRESETS:
        return _PRESETS[schedule]
    return max(_gaps(schedule, "schedule"), default=None)


# The presets whose intervals vary: their longest (_PRESETS holds their shortest).
_LONGEST = {"@monthly": timedelta(days=31), "@quarterly": timedelta(days=92), "@yearly": timedelta(days=366)}
_LONGEST["@annually"] = _LONGEST["@yearly"]


# --------------------------------------------------------------------------- tasks and DAG runs

# A task that only checks or reads rows; one that submits a Spark application.
CHECK_TASK = timedelta(minutes=15)


def spark_task() -> timedelta:
    return timedelta(seconds=spark_max_seconds())


def load_task(messages: int, rate: int = 0) -> timedelta:
    """A task that runs a whole load: its deadline, and time to flush and total it."""
    return timedelta(seconds=load_seconds(messages, rate) + 600)


def dag_run(*tasks: timedelta) -> timedelta:
    """A DAG run's timeout: its tasks one after the other, and an hour of queueing for the pool."""
    return sum(tasks, timedelta(hours=1))
