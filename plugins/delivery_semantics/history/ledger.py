"""The history: runs, events (written before they are produced) and outcomes, in PostgreSQL.

Writes are per batch, never row by row: a batch's events are derived by PostgreSQL from their
range of n, and its clean outcomes (acked, sent, written) become one `ledger_batches` row with
the event-number ranges and the partitions, offsets and latencies as arrays (sql/V015). An
outcome that is not clean (failed, unknown, aborted) gets a `ledger_event_outcomes` row of its
own. `ledger_outcomes` is the view with one row per event outcome.

Each run gets its own partitions of these tables, so retiring a run is a DROP, not a DELETE of
millions of rows. A producer writes them unindexed; `seal` indexes the events when its session
ends (sql/V009 says why).
"""

from __future__ import annotations

import io
import json
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter

import psycopg2
import psycopg2.extras

from delivery_semantics.history import schema
from delivery_semantics.plumbing.endpoints import Database, ledger_database
from delivery_semantics.records.event import Event, event_id

BATCH_STATUSES = ("acked", "sent", "written")
# Per run: (partitioned table, the stem of its partitions' names). Per-event outcome partitions
# kept the name they had before the table was renamed (sql/V015).
RUN_TABLES = (
    ("ledger_event_rows", "ledger_events"),
    ("ledger_event_ranges", "ledger_ranges"),
    ("ledger_event_outcomes", "ledger_outcomes"),
    ("ledger_batches", "ledger_batches"),
)


def _add_partition(cur, table: str, name: str, key: str) -> None:
    """A run's partition of `table`, made apart and then attached. CREATE TABLE ... PARTITION OF
    locks the parent exclusively, and a run's four tables one after the other: a reader that locked
    them in another order (the checker reads a run's ranges, then its rows) deadlocked with it.
    ATTACH PARTITION takes only a lock that readers and writers never wait for."""
    cur.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    cur.execute(f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES IN (%s)", (key,))


@dataclass(frozen=True, slots=True)
class Outcome:
    event_id: str
    status: str
    partition: int | None = None
    offset: int | None = None
    latency_us: int | None = None
    txn_no: int | None = None
    error: str | None = None
    n: int | None = None  # the event's number, when it is a generated run's: it goes in a batch row

    @property
    def clean(self) -> bool:
        """Goes in a batch row: the client learned where the event is (or, acks=0, sent it)."""
        return self.n is not None and self.error is None and self.status in BATCH_STATUSES


class _AdvisoryLock:
    """A session-level advisory lock held for a `with` block, on a connection of its own."""

    def __init__(self, db: Database, name: str):
        self.db, self.name = db, name

    def __enter__(self):
        self.conn = connect(self.db)
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (self.name,))
        return self

    def __exit__(self, *exc):
        self.conn.close()  # the lock goes with the session


class DuplicateEvent(RuntimeError):
    """The ledger records an event of a run more than once."""


class LedgerUnavailable(ConnectionError):
    pass


class RunBusy(RuntimeError):
    """Another live producer holds the run."""


def connect(db: Database) -> psycopg2.extensions.connection:
    try:
        return psycopg2.connect(**db.psycopg2_kwargs(), application_name="delivery-semantics-ledger")
    except psycopg2.OperationalError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise LedgerUnavailable(
            f"the ledger database at {db.host}:{db.port}/{db.database} cannot be reached: {first}"
        ) from None


def partition_name(table: str, run_id: str) -> str:
    """The run's partition of a per-run partitioned table (ledger_events, ledger_batches, ledger_event_outcomes, sink_events)."""
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in run_id.lower())[:40]
    return f"{table}_{safe}_{zlib.crc32(run_id.encode()):08x}"


@dataclass
class OutcomeBatch:
    """One `ledger_batches` row: events [n_lo[i], n_hi[i]) and, per event in n order, where it is."""

    status: str
    txn_no: int | None
    n_lo: list[int]
    n_hi: list[int]
    partitions: list[int | None]
    offsets: list[int | None]
    latencies_us: list[int | None]


# A clean delivery report: (n, partition, offset, latency_us).
Report = tuple[int, int | None, int | None, int | None]


class Reports:
    """Outcomes as a producer learns them. Clean reports are (n, partition, offset, latency_us)
    tuples grouped by (status, transaction); every other outcome is an Outcome of its own. The
    producer's per-record path appends a tuple, never an object (docs/BENCHMARKS.md)."""

    def __init__(self, run_id: str, outcomes: Iterable[Outcome] = ()):
        self.run_id = run_id
        self.clean: dict[tuple[str, int | None], list[Report]] = {}
        self.others: list[Outcome] = []
        # Per transaction this session committed: its reports, now acked. The ledger has them in
        # the transaction's `written` row already, and copies that row rather than receive them again.
        self.committed: dict[int, list[Report]] = {}
        for o in outcomes:
            self.add(o)

    def add(self, o: Outcome) -> None:
        if o.clean:
            self.clean.setdefault((o.status, o.txn_no), []).append((o.n, o.partition, o.offset, o.latency_us))
        else:
            self.others.append(o)

    def extend(self, status: str, txn_no: int | None, reports: list[Report]) -> None:
        if reports:
            self.clean.setdefault((status, txn_no), []).extend(reports)

    def commit(self, txn_no: int, reports: list[Report]) -> None:
        """The reports of a transaction whose `written` row this session recorded, acked by its commit."""
        if len({r[0] for r in reports}) < len(reports):  # an event reported twice: not one batch row
            self.extend("acked", txn_no, reports)
        elif reports:
            self.committed[txn_no] = reports

    def __len__(self) -> int:
        return sum(map(len, self.clean.values())) + sum(map(len, self.committed.values())) + len(self.others)

    def outcomes(self) -> Iterator[Outcome]:
        """Every outcome as an Outcome: for a reader that wants them one by one, not for the hot path."""
        groups = [*self.clean.items(), *((("acked", txn_no), group) for txn_no, group in self.committed.items())]
        for (status, txn_no), reports in groups:
            for n, partition, offset, latency_us in reports:
                yield Outcome(event_id(self.run_id, n), status, partition, offset, latency_us, txn_no, n=n)
        yield from self.others


def outcome_batches(reports: Reports) -> tuple[list[OutcomeBatch], list[Outcome]]:
    """The clean reports as one batch per (status, transaction), and the outcomes left to a row
    each: every outcome that is not clean, and a second report of an event already in its batch."""
    singles = list(reports.others)
    batches = []
    for (status, txn_no), group in reports.clean.items():
        group.sort(key=itemgetter(0))
        ns = [r[0] for r in group]
        lo, hi = ns[0], ns[0] + len(ns)
        if ns == list(range(lo, hi)):
            # The usual batch, every event once and no gap: one range, without the loop. Not zip(*group):
            # its 10,000 iterators are objects the garbage collector tracks, and it ran full
            # collections in the producer (25% of the ledger-on throughput in an A/B).
            batches.append(
                OutcomeBatch(
                    status, txn_no, [lo], [hi], [r[1] for r in group], [r[2] for r in group], [r[3] for r in group]
                )
            )
            continue
        n_lo, n_hi, batched = [], [], []
        for r in group:
            n = r[0]
            if n_hi and n == n_hi[-1] - 1:
                singles.append(Outcome(event_id(reports.run_id, n), status, r[1], r[2], r[3], txn_no, n=n))
                continue
            if n_hi and n == n_hi[-1]:
                n_hi[-1] += 1
            else:
                n_lo.append(n)
                n_hi.append(n + 1)
            batched.append(r)
        batches.append(
            OutcomeBatch(
                status,
                txn_no,
                n_lo,
                n_hi,
                [r[1] for r in batched],
                [r[2] for r in batched],
                [r[3] for r in batched],
            )
        )
    return batches, singles


_BRACES = str.maketrans("[]", "{}", " ")


def _array(values: list) -> str:
    """A PostgreSQL array literal of numbers, as COPY reads it. str() of a list runs in C: at 10,000
    numbers it takes 60% of the time of joining their strs."""
    literal = str(list(values)).translate(_BRACES)
    return literal.replace("None", "NULL") if None in values else literal


def _copy_text(value) -> str:
    if value is None:
        return r"\N"
    s = str(value)
    if any(c in s for c in "\t\n\r\\"):
        s = s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return s


class Ledger:
    """One ledger connection for one producer process. Not shared between threads, except that
    `copy_*` calls may run on a single writer thread while the caller keeps producing."""

    def __init__(self, db: Database | None = None):
        self.db = db or ledger_database()
        self.conn = connect(self.db)
        self._lock_conn = None
        self._claimed: tuple[str, int] | None = None
        self._write_lock = threading.Lock()

    def close(self) -> None:
        for c in (self.conn, self._lock_conn):
            if c is not None and not c.closed:
                c.close()

    # ------------------------------------------------------------------ schema and runs

    def migrate(self) -> None:
        schema.migrate(self.db)

    def create_run(self, row: dict, producers: list[dict] | None = None) -> None:
        """Inserts the run and its producers' slices (by default one producer for every event) and
        creates its partitions, in one transaction."""
        producers = producers or [
            {"producer": 0, "n_start": 0, "n_stop": row["messages"], "transactional_id": row.get("transactional_id")}
        ]
        cols = list(row)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO runs ({', '.join(cols)}, producers) VALUES ({', '.join(['%s'] * len(cols))}, %s)",
                [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()] + [len(producers)],
            )
            psycopg2.extras.execute_values(
                cur,
                "INSERT INTO run_producers (run_id, producer, n_start, n_stop, transactional_id) VALUES %s",
                [(row["run_id"], p["producer"], p["n_start"], p["n_stop"], p["transactional_id"]) for p in producers],
            )
            for table, stem in RUN_TABLES:
                _add_partition(cur, table, partition_name(stem, row["run_id"]), row["run_id"])

    def get_run(self, run_id: str) -> dict | None:
        return self._get("runs", "run_id", run_id)

    def update_run(self, run_id: str, **fields) -> None:
        self._update("runs", {"run_id": run_id}, fields)

    def producers(self, run_id: str) -> list[dict]:
        """The run's producers and their slices, in order."""
        with self.conn, self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute("SELECT * FROM run_producers WHERE run_id = %s ORDER BY producer", (run_id,))
            return [dict(r) for r in cur.fetchall()]

    def update_producer(self, run_id: str, producer: int, **fields) -> None:
        self._update("run_producers", {"run_id": run_id, "producer": producer}, fields)

    def _get(self, table: str, id_column: str, run_id: str) -> dict | None:
        with self.conn, self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(f"SELECT * FROM {table} WHERE {id_column} = %s", (run_id,))
            r = cur.fetchone()
        return dict(r) if r else None

    def _update(self, table: str, key: dict, fields: dict) -> None:
        sets = ", ".join(f"{k} = %s" for k in fields)
        where = " AND ".join(f"{k} = %s" for k in key)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                f"UPDATE {table} SET {sets} WHERE {where}",
                [json.dumps(v) if isinstance(v, (dict, list)) else v for v in fields.values()] + list(key.values()),
            )

    # ------------------------------------------------------------------ connector pipeline runs

    def create_pipeline_run(self, row: dict) -> None:
        cols = list(row)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO pipeline_runs ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()],
            )

    def get_pipeline_run(self, run_id: str) -> dict | None:
        return self._get("pipeline_runs", "run_id", run_id)

    def update_pipeline_run(self, run_id: str, **fields) -> None:
        self._update("pipeline_runs", {"run_id": run_id}, fields)

    # ------------------------------------------------------------------ consumer runs

    def create_consumer_run(self, row: dict) -> None:
        """Inserts the consumer run and creates its sink partition, in one transaction."""
        cols = list(row)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO consumer_runs ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                [json.dumps(v) if isinstance(v, (dict, list)) else v for v in row.values()],
            )
            _add_partition(
                cur, "sink_events", partition_name("sink_events", row["consumer_run_id"]), row["consumer_run_id"]
            )

    def record_poll(self, consumer_run_id: str, session: int, poll_no: int, offsets: dict[int, list[int]]) -> None:
        """What one poll of a consumer session returned: per partition, its offsets in order."""
        with self._write_lock, self.conn, self.conn.cursor() as cur:
            psycopg2.extras.execute_values(
                cur,
                'INSERT INTO consumer_polls (consumer_run_id, session, poll_no, "partition", offsets) VALUES %s',
                [(consumer_run_id, session, poll_no, p, o) for p, o in sorted(offsets.items())],
            )

    def get_consumer_run(self, consumer_run_id: str) -> dict | None:
        return self._get("consumer_runs", "consumer_run_id", consumer_run_id)

    def update_consumer_run(self, consumer_run_id: str, **fields) -> None:
        self._update("consumer_runs", {"consumer_run_id": consumer_run_id}, fields)

    def drop_consumer_run(self, consumer_run_id: str) -> None:
        with self.conn, self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {partition_name('sink_events', consumer_run_id)}")
            cur.execute("DELETE FROM sink_state WHERE consumer_run_id = %s", (consumer_run_id,))
            cur.execute("DELETE FROM consumer_runs WHERE consumer_run_id = %s", (consumer_run_id,))

    def claim_run(self, run_id: str, producer: int = 0) -> None:
        """Holds a session-level advisory lock for the run's producer slice on a connection of its
        own, so a second process cannot resume a slice whose producer is alive; a killed
        producer's lock goes with its connection. Claimed again by the holder (a new session after
        a fatal producer), it is kept."""
        if self._claimed == (run_id, producer) and not self._lock_conn.closed:
            return
        if self._lock_conn is not None and not self._lock_conn.closed:
            raise RunBusy(f"this ledger holds {self._claimed}; run {run_id} (producer {producer}) needs one of its own")
        self._lock_conn = connect(self.db)
        self._lock_conn.autocommit = True
        with self._lock_conn.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (f"{run_id}#{producer}",))
            if not cur.fetchone()[0]:
                self._lock_conn.close()
                raise RunBusy(
                    f"run {run_id} (producer {producer}) is held by a live producer; wait for it or stop it first"
                )
        self._claimed = (run_id, producer)

    def finishing(self, run_id: str):
        """A lock held while a producer totals the run, so two producers ending together do not
        seal and count it at once."""
        return _AdvisoryLock(self.db, f"{run_id}#finish")

    def drop_run(self, run_id: str) -> None:
        with self.conn, self.conn.cursor() as cur:
            for _, stem in RUN_TABLES:
                cur.execute(f"DROP TABLE IF EXISTS {partition_name(stem, run_id)}")
            cur.execute("DELETE FROM runs WHERE run_id = %s", (run_id,))

    # ------------------------------------------------------------------ writers

    def record_event_range(
        self, run_id: str, start: int, stop: int, keys: int, publish_at_ms: int, key_base: int = 0
    ) -> int:
        """The events n in [start, stop) of a generated run, all published at one time: one
        `ledger_event_ranges` row, from which the view `ledger_events` derives them the way
        Generator.event does (sql/V017, V020)."""
        with self._write_lock, self.conn, self.conn.cursor() as cur:
            cur.execute(
                "INSERT INTO ledger_event_ranges (run_id, n_lo, n_hi, keys, key_base, publish_at) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (run_id, start, stop, keys, key_base, datetime.fromtimestamp(publish_at_ms / 1000, tz=UTC)),
            )
        return stop - start

    def copy_events(self, run_id: str, events: Iterable[Event]) -> int:
        """Any events, such as a hand-made ledger's; a generated run's go by record_event_range.
        Their ids must be the generator's, `<run_id>-<n>`: the checker derives them from n."""
        buf = io.StringIO()
        n = 0
        stamp_ms, stamp = None, ""
        for e in events:
            if e.event_id != event_id(run_id, e.n):
                raise ValueError(f"event {e.n} of run {run_id} has id {e.event_id!r}, not {event_id(run_id, e.n)!r}")
            if e.publish_at_ms != stamp_ms:  # a batch shares one publish time: format it once
                stamp_ms, stamp = e.publish_at_ms, e.publish_at.isoformat()
            buf.write(f"{run_id}\t{e.n}\t{e.event_id}\t{_copy_text(e.key)}\t{e.seq}\t{stamp}\n")
            n += 1
        self._copy(("ledger_event_rows (run_id, n, event_id, key, seq, publish_at)", buf))
        return n

    def copy_outcomes(
        self,
        run_id: str,
        session: int,
        outcomes: Reports | Iterable[Outcome],
        producer: int = 0,
        progress: dict | None = None,
    ) -> int:
        """Clean outcomes as one `ledger_batches` row per (status, transaction), the others one
        row each. Returns how many outcomes were recorded. `progress` (the producer's `produced`
        and `active_seconds` so far) is written with them, so a session that is killed has its
        work counted up to its last durable batch."""
        reports = outcomes if isinstance(outcomes, Reports) else Reports(run_id, outcomes)
        groups, singles = outcome_batches(reports)
        buf = io.StringIO()
        for b in groups:
            buf.write(
                f"{run_id}\t{producer}\t{session}\t{b.status}\t{_copy_text(b.txn_no)}\t{_array(b.n_lo)}\t"
                f"{_array(b.n_hi)}\t{_array(b.partitions)}\t{_array(b.offsets)}\t{_array(b.latencies_us)}\n"
            )
        copies = []
        if groups:
            copies.append(
                (
                    "ledger_batches (run_id, producer, session, status, txn_no, n_lo, n_hi, partitions, offsets, "
                    "latencies_us)",
                    buf,
                )
            )
        if singles:
            buf = io.StringIO()
            end = f"\t{producer}\n"
            for o in singles:
                buf.write(
                    "\t".join(
                        (
                            run_id,
                            o.event_id,
                            str(session),
                            o.status,
                            _copy_text(o.partition),
                            _copy_text(o.offset),
                            _copy_text(o.latency_us),
                            _copy_text(o.txn_no),
                            _copy_text(o.error),
                        )
                    )
                    + end
                )
            copies.append(
                (
                    'ledger_event_outcomes (run_id, event_id, session, status, "partition", "offset", latency_us, '
                    "txn_no, error, producer)",
                    buf,
                )
            )
        then = []
        if reports.committed:
            # The committed transactions' `written` rows, copied as their `acked` ones: one each.
            then.append(
                (
                    """INSERT INTO ledger_batches (run_id, producer, session, status, txn_no, n_lo, n_hi, partitions,
                                                   offsets, latencies_us)
                       SELECT run_id, producer, session, 'acked', txn_no, n_lo, n_hi, partitions, offsets, latencies_us
                       FROM ledger_batches
                       WHERE run_id = %(run)s AND producer = %(producer)s AND session = %(session)s
                         AND status = 'written' AND txn_no = ANY(%(txns)s)""",
                    {"run": run_id, "producer": producer, "session": session, "txns": list(reports.committed)},
                    len(reports.committed),
                )
            )
        if progress:
            then.append(
                (
                    "UPDATE run_producers SET "
                    + ", ".join(f"{k} = %({k})s" for k in progress)
                    + " WHERE run_id = %(run_id)s AND producer = %(producer)s",
                    {**progress, "run_id": run_id, "producer": producer},
                    None,
                )
            )
        self._copy(*copies, then=then)  # one transaction: a batch's outcomes are recorded together or not at all
        return len(reports)

    def _copy(self, *copies: tuple[str, io.StringIO], then: Sequence[tuple[str, dict, int | None]] = ()) -> None:
        """In one transaction: each (target, rows) a COPY, then each (statement, parameters, rows it
        must write, or None)."""
        if not copies and not then:
            return
        with self._write_lock, self.conn, self.conn.cursor() as cur:
            for target, buf in copies:
                buf.seek(0)
                cur.copy_expert(f"COPY {target} FROM STDIN", buf)
            for statement, params, rows in then:
                cur.execute(statement, params)
                if rows is not None and cur.rowcount != rows:
                    raise RuntimeError(
                        f"{cur.rowcount} rows written where {rows} were due: {' '.join(statement.split()[:3])}"
                    )

    def seal(self, run_id: str) -> None:
        """Checks that no event of the run was recorded twice, and indexes its event rows by n
        (unique) unless already done: a duplicate event fails the run here. A session that fails
        leaves this to the resume."""
        part = partition_name("ledger_events", run_id)
        with self._write_lock, self.conn, self.conn.cursor() as cur:
            cur.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS {part}_n ON {part} (n)")
            # Ranges in n order: one that starts below where an earlier one reached repeats events.
            cur.execute(
                """
                SELECT n_lo, reach FROM (
                    SELECT n_lo, max(n_hi) OVER (ORDER BY n_lo, n_hi ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                               AS reach
                    FROM (SELECT n_lo, n_hi FROM ledger_event_ranges WHERE run_id = %(run)s
                          UNION ALL SELECT n, n + 1 FROM ledger_event_rows WHERE run_id = %(run)s) AS r) AS o
                WHERE n_lo < reach LIMIT 1""",
                {"run": run_id},
            )
            repeated = cur.fetchone()
            if repeated:  # inside the transaction: the run stays unsealed
                raise DuplicateEvent(f"run {run_id} records event {repeated[0]} more than once")

    # ------------------------------------------------------------------ reads

    def analyze(self, run_id: str) -> None:
        """Fresh statistics for the run's partitions: without them the planner picks a nested loop
        over millions of rows for the anti-joins below (seen: 13 s for 20k events)."""
        with self._write_lock, self.conn, self.conn.cursor() as cur:
            cur.execute("ANALYZE " + ", ".join(partition_name(stem, run_id) for _, stem in RUN_TABLES))

    def unacked(self, run_id: str, start: int = 0, stop: int = 2**63 - 1) -> Iterator[tuple[int, int]]:
        """(n, publish_at in ms) of every event of the run in [start, stop) with no ack (nor, for
        acks=0, a send), in n order, streamed with a server-side cursor."""
        self.analyze(run_id)
        conn = connect(self.db)
        try:
            with conn, conn.cursor(name="unacked") as cur:
                cur.itersize = 50_000
                cur.execute(
                    """
                    WITH done AS (
                        SELECT range_agg(int8range(r.lo, r.hi)) AS ns
                        FROM ledger_batches b, unnest(b.n_lo, b.n_hi) AS r(lo, hi)
                        WHERE b.run_id = %(run)s AND b.status IN ('acked', 'sent'))
                    SELECT e.n, (extract(epoch FROM e.publish_at) * 1000)::bigint
                    FROM ledger_events e, done
                    WHERE e.run_id = %(run)s AND e.n >= %(start)s AND e.n < %(stop)s
                      AND NOT coalesce(done.ns @> e.n, false)
                      AND NOT EXISTS (
                        SELECT 1 FROM ledger_event_outcomes o
                        WHERE o.run_id = e.run_id AND o.event_id = e.event_id AND o.status IN ('acked', 'sent'))
                    ORDER BY e.n""",
                    {"run": run_id, "start": start, "stop": stop},
                )
                yield from cur
        finally:
            conn.close()

    def in_doubt(self, run_id: str, producer: int = 0) -> list[tuple[str, int, int, int, int | None]]:
        """(event_id, partition, offset, txn_no, n) of events a producer wrote inside a transaction
        whose commit the ledger never saw the end of: it died between `written` and `acked`."""
        self.analyze(run_id)
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                """
                WITH settled AS (
                    SELECT txn_no, outcome_no FROM ledger_batches
                    WHERE run_id = %(run)s AND producer = %(producer)s AND status = 'acked'
                    UNION ALL
                    SELECT txn_no, outcome_no FROM ledger_event_outcomes
                    WHERE run_id = %(run)s AND producer = %(producer)s AND status IN ('acked', 'aborted')),
                written AS (
                    SELECT w.outcome_no, w.txn_no, x.n, %(run)s || '-' || x.n AS event_id, x.p, x.o
                    FROM ledger_batches w,
                         LATERAL unnest(batch_ns(w.n_lo, w.n_hi), w.partitions, w.offsets) AS x(n, p, o)
                    WHERE w.run_id = %(run)s AND w.producer = %(producer)s AND w.status = 'written'
                    UNION ALL  -- recorded one row per event, before sql/V015
                    SELECT outcome_no, txn_no, NULL, event_id, "partition", "offset" FROM ledger_event_outcomes
                    WHERE run_id = %(run)s AND producer = %(producer)s AND status = 'written')
                SELECT DISTINCT ON (w.event_id) w.event_id, w.p, w.o, w.txn_no, w.n
                FROM written w
                WHERE NOT EXISTS (SELECT 1 FROM settled s WHERE s.txn_no = w.txn_no AND s.outcome_no > w.outcome_no)
                ORDER BY w.event_id, w.outcome_no DESC""",
                {"run": run_id, "producer": producer},
            )
            return cur.fetchall()

    def outcome_count(self, run_id: str, producer: int | None = None) -> int:
        """Outcomes recorded for the run, or for one of its producers."""
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                """
                SELECT (SELECT coalesce(sum(cardinality(partitions)), 0) FROM ledger_batches
                        WHERE run_id = %(run)s AND (%(p)s::int IS NULL OR producer = %(p)s))
                     + (SELECT count(*) FROM ledger_event_outcomes
                        WHERE run_id = %(run)s AND (%(p)s::int IS NULL OR producer = %(p)s))""",
                {"run": run_id, "p": producer},
            )
            return cur.fetchone()[0]

    def max_txn_no(self, run_id: str, producer: int = 0) -> int:
        """A producer's transactions are numbered across its sessions."""
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                """
                SELECT greatest(
                    (SELECT coalesce(max(txn_no), 0) FROM ledger_batches WHERE run_id = %(run)s AND producer = %(p)s),
                    (SELECT coalesce(max(txn_no), 0) FROM ledger_event_outcomes
                     WHERE run_id = %(run)s AND producer = %(p)s))""",
                {"run": run_id, "p": producer},
            )
            return cur.fetchone()[0]

    def next_n(self, run_id: str, start: int, stop: int) -> int:
        """One past the highest event written in [start, stop) (start if none): where a slice's
        producer goes on."""
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                """
                SELECT greatest(
                    (SELECT max(least(n_hi, %(stop)s)) FROM ledger_event_ranges
                     WHERE run_id = %(run)s AND n_lo < %(stop)s AND n_hi > %(start)s),
                    (SELECT max(n) + 1 FROM ledger_event_rows WHERE run_id = %(run)s AND n >= %(start)s AND n < %(stop)s),
                    %(start)s)""",
                {"run": run_id, "start": start, "stop": stop},
            )
            return cur.fetchone()[0]

    def counts(self, run_id: str) -> dict:
        """Where each event of the run stands, ack latency percentiles and each partition's acked
        end (runs.acked_ends), computed in SQL."""
        self.analyze(run_id)
        with self.conn, self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(
                """
                WITH per_event AS (
                    SELECT e.event_id,
                           bool_or(o.status = 'acked') AS acked,
                           bool_or(o.status = 'sent') AS sent,
                           (array_agg(o.status ORDER BY o.outcome_no DESC))[1] AS last_status
                    FROM ledger_events e
                    LEFT JOIN ledger_outcomes o ON o.run_id = e.run_id AND o.event_id = e.event_id
                    WHERE e.run_id = %(run)s
                    GROUP BY e.event_id)
                SELECT count(*) AS events,
                       count(*) FILTER (WHERE acked) AS acked,
                       count(*) FILTER (WHERE sent AND NOT acked) AS sent_unacked,
                       count(*) FILTER (WHERE NOT coalesce(acked OR sent, false) AND last_status = 'failed') AS failed,
                       count(*) FILTER (WHERE NOT coalesce(acked OR sent, false) AND last_status = 'unknown') AS unknown,
                       count(*) FILTER (WHERE NOT coalesce(acked OR sent, false)
                                        AND (last_status IS NULL OR last_status IN ('aborted', 'written'))) AS pending
                FROM per_event""",
                {"run": run_id},
            )
            counts = dict(cur.fetchone())
            cur.execute(
                """
                SELECT count(*) FILTER (WHERE status = 'aborted') AS aborted_attempts,
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_us)
                           FILTER (WHERE status IN ('acked', 'sent')) / 1000.0 AS ack_p50_ms,
                       percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_us)
                           FILTER (WHERE status IN ('acked', 'sent')) / 1000.0 AS ack_p99_ms
                FROM ledger_outcomes WHERE run_id = %(run)s""",
                {"run": run_id},
            )
            counts.update(cur.fetchone())
            cur.execute(
                """
                SELECT coalesce(jsonb_object_agg("partition", "end"), '{}') AS acked_ends
                FROM (SELECT "partition", max("offset") + 1 AS "end" FROM ledger_outcomes
                      WHERE run_id = %(run)s AND status = 'acked' AND "offset" IS NOT NULL
                      GROUP BY "partition") ends""",
                {"run": run_id},
            )
            counts.update(cur.fetchone())
        return counts

    def acked_positions(self, run_id: str) -> list[tuple[str, int, int]]:
        """(event_id, partition, offset) of acked events; for tests and small runs."""
        with self.conn, self.conn.cursor() as cur:
            cur.execute(
                """SELECT event_id, "partition", "offset" FROM ledger_outcomes
                           WHERE run_id = %s AND status = 'acked' ORDER BY event_id""",
                (run_id,),
            )
            return cur.fetchall()
