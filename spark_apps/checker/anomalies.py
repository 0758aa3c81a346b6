"""The checker's anomaly kinds, one function each, composed by `discrepancies` (the way Jepsen's
Kafka checker composes duplicate-cases, lost-write-cases and the rest).

Each function takes an `Observation`, what one isolation level saw against the ledger, and
returns that kind's discrepancy rows (`event_id, kind, copies, partitions, offsets`), or None
where the kind does not apply to the observation. They only transform DataFrames: reading and
writing are elsewhere (sources.py, results.py), so each can be checked on a few rows made with
`createDataFrame`.

Inputs:
- records: what was read (`event_id` NULL when a record has none, or ID_KEY in its place;
  `key, seq, publish_at, partition, offset`; a sink adds `apply_no, state_applied`);
- ledger: one row per ledger event (`event_id, key, seq, publish_at, status,
  aborted_positions`, and where the ledger knows it `acked_position`, see `position`), status
  one of acked, sent, failed, unknown, pending, aborted, written.

Events are grouped and joined on `ID_KEY`, not on the id's text: a platform run's ids are
`<run>-<n>`, so its shuffles and joins compare one long per event (`with_id_key`). The text is
rebuilt only for the rows reported.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import Observation as Metrics
from pyspark.sql import functions as F

from checker import cache, rules
from delivery_semantics import catalog
from delivery_semantics.catalog import READ_COMMITTED, READ_UNCOMMITTED

MAX_OFFSETS = 100  # offsets kept per discrepancy row
ID_KEY = ("n", "id_rest")
UNNUMBERED = -1  # n of an id that is not <prefix><n>: its text, in id_rest, is the key
# The most rows a side of a join is broadcast with (the duplicated events, those read more than
# twice, a run's per-event outcomes), so that the other side, every record or event, is not
# shuffled. Counted before it is decided.
BROADCAST_MAX_ROWS = 1_000_000
FIRST_COPY = ("key", "seq", "publish_at", "partition", "offset", "value")
OFFSET_BITS = 40  # a position is partition << OFFSET_BITS | offset: one long to aggregate and compare


def position(partition: Column, offset: Column) -> Column:
    return F.shiftleft(partition.cast("bigint"), OFFSET_BITS).bitwiseOR(offset.cast("bigint"))


def position_parts(pos: Column) -> tuple[Column, Column]:
    """(partition, offset) of a position."""
    return (
        F.shiftright(pos, OFFSET_BITS).cast("int").alias("partition"),
        pos.bitwiseAND(F.lit((1 << OFFSET_BITS) - 1)).alias("offset"),
    )


def with_id_key(df: DataFrame, prefix: str | None) -> DataFrame:
    """Adds ID_KEY from `event_id`: n, the number of an id `<prefix><n>` written as the generator
    writes it (with id_rest ''), or UNNUMBERED and the id's text. Both NULL without an id."""
    eid = F.col("event_id")
    if not prefix:
        return df.withColumns({"n": F.when(eid.isNotNull(), F.lit(UNNUMBERED)).cast("bigint"), "id_rest": eid})
    # In steps, each a column: within one expression Spark would parse an id once per use (five
    # times), a third of the checker's work on the records it reads.
    digits, parsed, numbered = F.col("_id_digits"), F.col("_id_parsed"), F.col("_id_numbered")
    return (
        df.withColumn("_id_digits", F.when(eid.startswith(F.lit(prefix)), F.substring(eid, len(prefix) + 1, 40)))
        .withColumn("_id_parsed", digits.try_cast("bigint"))
        # Only the canonical text maps to a number: "<run>-07" and "<run>-7" are two ids.
        .withColumn("_id_numbered", F.coalesce((parsed >= 0) & (parsed.cast("string") == digits), F.lit(False)))
        .withColumns(
            {
                "n": F.when(numbered, parsed).when(eid.isNotNull(), F.lit(UNNUMBERED)).cast("bigint"),
                "id_rest": F.when(numbered, F.lit("")).otherwise(eid),
            }
        )
        .drop("_id_digits", "_id_parsed", "_id_numbered")
    )


# A ledger outcome's status as a small integer, so that outcomes are aggregated on integers.
STATUSES = ("acked", "sent", "written", "failed", "unknown", "aborted")
STATUS_CODES = {name: code for code, name in enumerate(STATUSES)}
EMPTY_POSITIONS = "array<struct<partition:int,offset:bigint>>"
# The most islands of recorded event numbers tested as one expression per event; beyond it, the
# recorded events are folded in as rows (a hand-made ledger's scattered rows).
MAX_ISLAND_TESTS = 64


def status_code(status: Column) -> Column:
    return F.try_element_at(
        F.create_map(*(x for name, c in STATUS_CODES.items() for x in (F.lit(name), F.lit(c)))), status
    )


@dataclass(frozen=True)
class OutcomeLedger:
    """A platform run's ledger as its outcomes, not yet one row per event (sources.py rebuilds
    them from the batch rows): the checker folds them into the same aggregation as the topic's
    copies, one shuffle where joining a per-event ledger took three.

    - outcomes: `n, outcome_no, code, pos`, a row per event and outcome (code: STATUS_CODES);
    - islands: the ranges [lo, hi) of n the run recorded; an event with no outcome is pending;
    - events: every recorded n (`n`), folded in only when an island test would not do;
    - aborted: `n, aborted_positions, by_coordinator`, from the few per-event outcomes (broadcast
      when few), None when the run aborted nothing; by_coordinator: its latest abort was the
      broker's coordinator's (catalog.COORDINATOR_ABORTED);
    - positions: whether the acked positions are in the topic read (not for a consumer's copy);
    - event_rows: how many of the outcomes are per-event rows (each failure, unknown outcome or
      abort has one), when known;
    - transactional: its producers wrote in transactions, so a coordinator may have aborted some."""

    outcomes: DataFrame
    islands: tuple[tuple[int, int], ...]
    events: DataFrame
    aborted: DataFrame | None
    positions: bool = True
    event_rows: int = 0
    transactional: bool = False

    @property
    def size(self) -> int:
        return sum(hi - lo for lo, hi in self.islands)


def aborted_events(event_outcomes: DataFrame) -> DataFrame:
    """OutcomeLedger.aborted from the per-event outcome rows (`n, outcome_no, code, partition,
    offset, by_coordinator`): per event aborted, every position it was aborted at, and whether its
    latest abort was the coordinator's."""
    return (
        event_outcomes.where(F.col("code") == STATUS_CODES["aborted"])
        .groupBy("n")
        .agg(
            F.collect_set(F.struct("partition", "offset")).alias("aborted_positions"),
            F.max_by("by_coordinator", "outcome_no").alias("by_coordinator"),
        )
    )


def without_positions(ledger: DataFrame | OutcomeLedger) -> DataFrame | OutcomeLedger:
    """The ledger, its acked positions left out: they are positions in another topic."""
    if isinstance(ledger, OutcomeLedger):
        return replace(ledger, positions=False)
    return ledger.drop("acked_position") if "acked_position" in ledger.columns else ledger


@dataclass
class Observation:
    records: DataFrame
    ledger: DataFrame
    isolation: str
    # read_uncommitted only: per event id, the copies read_committed sees (column `copies`).
    committed_copies: DataFrame | None = None
    sink: bool = False
    id_prefix: str | None = None  # the ids' common prefix, when they are `<prefix><n>`
    # Every event of a committed transaction (ID_KEY, txn), when the ledger knows them.
    transactions: DataFrame | None = None
    # A consumer run's polls: per session and partition, each offset polled after the first
    # (`session, partition, offset, prev_offset`), and the records of the topic they polled
    # (`partition, offset` and ID_KEY), as the consumer's isolation level shows them.
    polls: DataFrame | None = None
    polled_topic: DataFrame | None = None
    # The other read of the same offsets (read_uncommitted, for read_committed's observation),
    # where the topic was read twice: a position both show must hold the same record in both.
    other_read: DataFrame | None = None
    # A continuous audit's window: the events earlier windows read (`event_id`), whose copies here
    # are not first copies, and per key the highest seq they read (`key, max_version`).
    read_earlier: DataFrame | None = None
    seq_earlier: DataFrame | None = None

    def __post_init__(self):
        self._as_acked = False
        if "n" not in self.records.columns:
            self.records = with_id_key(self.records, self.id_prefix)
        if isinstance(self.ledger, DataFrame) and "n" not in self.ledger.columns:
            self.ledger = with_id_key(self.ledger, self.id_prefix)
        if self.committed_copies is not None and "n" not in self.committed_copies.columns:
            self.committed_copies = with_id_key(self.committed_copies, self.id_prefix)
        if self.transactions is not None and "n" not in self.transactions.columns:
            self.transactions = with_id_key(self.transactions, self.id_prefix)
        if self.polled_topic is not None and "n" not in self.polled_topic.columns:
            self.polled_topic = with_id_key(self.polled_topic, self.id_prefix)
        if self.other_read is not None and "n" not in self.other_read.columns:
            self.other_read = with_id_key(self.other_read, self.id_prefix)
        if self.read_earlier is not None and "n" not in self.read_earlier.columns:
            self.read_earlier = with_id_key(self.read_earlier, self.id_prefix)

    def event_id(self) -> Column:
        """The id's text, from ID_KEY."""
        text = F.col("id_rest")
        if self.id_prefix:
            text = F.when(F.col("n") >= 0, F.concat(F.lit(self.id_prefix), F.col("n").cast("string"))).otherwise(text)
        return text.alias("event_id")

    @cached_property
    def identified(self) -> DataFrame:
        return self.records.where(F.col("n").isNotNull())

    @cached_property
    def copies(self) -> DataFrame:
        """Per event: how many copies were read, and the lowest and highest of their positions
        (`pos_lo`, `pos_hi`), which Spark aggregates in place; `with_positions` gives their
        partitions and offsets."""
        at = position(F.col("partition"), F.col("offset"))
        return self.identified.groupBy(*ID_KEY).agg(
            F.count(F.lit(1)).cast("int").alias("copies"), F.min(at).alias("pos_lo"), F.max(at).alias("pos_hi")
        )

    @cached_property
    def read_more_than_twice(self) -> DataFrame:
        """Every partition and offset of the events read more than twice (few: they are grouped
        again, a shuffle of their records only)."""
        many = self.joined.where(F.col("copies") > 2).select(*ID_KEY)
        if self.totals["read_more_than_twice"] <= BROADCAST_MAX_ROWS:
            many = F.broadcast(many)
        return (
            self.identified.join(many, list(ID_KEY), "left_semi")
            .groupBy(*ID_KEY)
            .agg(
                F.array_sort(F.collect_set("partition")).alias("all_partitions"),
                F.slice(F.array_sort(F.collect_list("offset")), 1, MAX_OFFSETS).alias("all_offsets"),
            )
        )

    def with_positions(self, rows: DataFrame) -> DataFrame:
        """`rows` of `joined` with the partitions and offsets of their copies: an event read once or
        twice from its lowest and highest positions, which are all of them, one read more often
        from its records, grouped again. Built for the rows reported only, not cached for every
        event."""
        many = F.col("copies") > 2
        (p_lo, o_lo), (p_hi, o_hi) = position_parts(F.col("pos_lo")), position_parts(F.col("pos_hi"))
        in_topic = F.col("copies") > 0
        few = rows.where(~many | F.col("copies").isNull()).withColumns(
            {
                "partitions": F.when(in_topic, F.array_sort(F.array_distinct(F.array(p_lo, p_hi)))),
                "offsets": F.when(
                    in_topic, F.when(F.col("copies") == 1, F.array(o_lo)).otherwise(F.array_sort(F.array(o_lo, o_hi)))
                ),
            }
        )
        if self.totals["read_more_than_twice"] == 0:
            return few
        filled = (
            rows.where(many)
            .join(self.read_more_than_twice, list(ID_KEY), "left")
            .withColumn("partitions", F.col("all_partitions"))
            .withColumn("offsets", F.col("all_offsets"))
            .drop("all_partitions", "all_offsets")
        )
        return few.unionByName(filled)

    @property
    def knows_positions(self) -> bool:
        """The ledger has each acked event's position in the topic read."""
        if isinstance(self.ledger, OutcomeLedger):
            return self.ledger.positions
        return "acked_position" in self.ledger.columns

    def aborted_positions(self) -> DataFrame | None:
        """ID_KEY and aborted_positions of the ledger's events (None: the ledger knows none)."""
        if isinstance(self.ledger, OutcomeLedger):
            if self.ledger.aborted is None:
                return None
            return self.ledger.aborted.select("n", F.lit("").alias("id_rest"), "aborted_positions")
        return self.ledger.select(*ID_KEY, "aborted_positions")

    @cached_property
    def joined(self) -> DataFrame:
        """Per event some kind reports: its copies (`copies`, and the lowest and highest positions
        `pos_lo`, `pos_hi`), the ledger's status and acked_position, each NULL where the event is
        not on that side, and under read_uncommitted with read_committed's copies, `committed`.
        The kinds read it many times, so it is cached; an event read once where the ledger acked
        it, as most are, is counted in `totals` on the way and not kept (`with_positions` adds the
        copies' partitions and offsets to the rows reported)."""
        if isinstance(self.ledger, OutcomeLedger):
            return self._folded()
        acked_at = F.col("acked_position") if self.knows_positions else F.lit(None).cast("bigint")
        events = self.copies.join(
            self.ledger.select(*ID_KEY, "status", acked_at.alias("acked_position")), list(ID_KEY), "full_outer"
        )
        return self._notable(events)

    @property
    def read_as_acked(self) -> bool:
        """The records are exactly the ledger's acked events, where they were acked (`_read_as_acked`):
        `joined` is empty, so is every kind that reads only it, and every record has an id."""
        if not isinstance(self.ledger, OutcomeLedger):
            return False
        self.joined  # noqa: B018  (made on first use)
        return self._as_acked

    @property
    def totals(self) -> dict:
        """The counts over every event, kept in `joined` or not (`_total_counts`), measured while
        it was made."""
        self.joined  # noqa: B018  (made on first use)
        return self._totals

    def _notable(self, events: DataFrame) -> DataFrame:
        """`events` that some kind may report, cached, and the totals of all of them measured in
        the same pass (`self._totals`)."""
        if self.committed_copies is not None:
            events = events.join(self.committed_copies.withColumnRenamed("copies", "committed"), list(ID_KEY), "left")
        clean = (
            (F.col("copies") == 1)
            & (F.col("status") == "acked")
            & (F.col("acked_position").isNull() | (F.col("acked_position") == F.col("pos_lo")))
        )
        if self.committed_copies is not None:
            clean = clean & (F.coalesce("committed", F.lit(0)) >= F.col("copies"))
        metrics = Metrics()
        kept = cache.keep(events.observe(metrics, *_total_counts()).where(~F.coalesce(clean, F.lit(False))))
        kept.count()
        self._totals = metrics.get
        return kept

    def _folded(self) -> DataFrame:
        """`joined` from an OutcomeLedger: the topic's records and the ledger's outcomes in one
        aggregation by ID_KEY, on integer columns only, which Spark aggregates in place. Among an
        event's outcomes acked wins, then sent, then the latest; with none it is pending. When an
        event turns out to have neither an outcome nor a copy (a producer killed between writing
        its events and their outcomes), the recorded events are folded in as rows as well."""
        led = self.ledger
        if self._read_as_acked():
            return self._fold(with_events=False).where(F.lit(False))  # nothing notable: no rows, never run
        joined = self._notable(self._fold(with_events=len(led.islands) > MAX_ISLAND_TESTS))
        if len(led.islands) <= MAX_ISLAND_TESTS and self._totals["ledger_events"] < led.size:
            joined.unpersist()
            joined = self._notable(self._fold(with_events=True))
        return joined

    def _read_as_acked(self) -> bool:
        """Whether the records read are exactly the ledger's acked events, each once and, where the
        ledger knows positions, where it was acked, and every recorded event was acked once (and,
        in a transaction, written there): then no event is notable, and the totals follow. One
        aggregation of the records, outcomes and events, where the fold shuffles them all. Compared
        as multisets by counts and fingerprints (`_fingerprint`); anything else, or any per-event
        outcome row, or a second read to compare with, leaves it to the fold."""
        led = self.ledger
        if led.event_rows or self.committed_copies is not None:
            return False
        read_tag, events_tag, acked_tag, written_tag = -2, -1, STATUS_CODES["acked"], STATUS_CODES["written"]
        n, pos, numbered = F.col("n"), F.col("pos"), F.col("numbered")
        is_numbered = (n >= 0) & (F.col("id_rest") == "")
        read_at = position(F.col("partition"), F.col("offset")) if led.positions else F.lit(None).cast("bigint")
        tagged = (
            self.records.select(
                F.lit(read_tag).alias("code"),
                F.when(is_numbered, n).alias("n"),
                F.when(is_numbered, read_at).alias("pos"),
                is_numbered.alias("numbered"),
            )
            .unionByName(led.outcomes.select("code", n, pos, F.lit(True).alias("numbered")))
            .unionByName(
                led.events.select(
                    F.lit(events_tag).alias("code"),
                    n,
                    F.lit(None).cast("bigint").alias("pos"),
                    F.lit(True).alias("numbered"),
                )
            )
        )
        sides = {
            r["code"]: r
            for r in tagged.groupBy("code")
            .agg(
                F.count(F.lit(1)).alias("rows"),
                F.count(F.when(numbered, 1)).alias("numbered"),
                *_fingerprint("n_pos", n, pos),
                *_fingerprint("n", n),
            )
            .collect()
        }
        read, events, acked, written = (sides.get(c) for c in (read_tag, events_tag, acked_tag, written_tag))
        if set(sides) - {read_tag, events_tag, acked_tag, written_tag} or None in (read, events, acked):
            return False
        if not (
            read["rows"] == read["numbered"] == acked["rows"] == events["rows"] == led.size
            and _same(acked, events, "n")
            and _same(read, acked, "n_pos" if led.positions else "n")
            and (written is None or (written["rows"] == acked["rows"] and _same(written, acked, "n_pos")))
        ):
            return False
        size = led.size
        self._as_acked = True
        self._totals = {
            "ledger_events": size,
            "ledger_acked": size,
            "distinct_events": size,
            "records_with_id": size,
            "delivered_once": size,
            "duplicate_copies": 0,
            "duplicated_events": 0,
            "read_more_than_twice": 0,
            "acked_elsewhere": 0,
        }
        return True

    def _fold(self, with_events: bool) -> DataFrame:
        led = self.ledger
        none_int, none_long = F.lit(None).cast("int"), F.lit(None).cast("bigint")
        not_an_event = [F.lit(0).alias("event")] if with_events else []
        # A row per copy read (its position, tpos) and per outcome (lpos, outcome_no, code): up to
        # two copies, the lowest and highest positions are all of them (`with_positions` fills in
        # the rest).
        copies = self.identified.select(
            *ID_KEY,
            position(F.col("partition"), F.col("offset")).alias("tpos"),
            none_long.alias("lpos"),
            none_long.alias("outcome_no"),
            none_int.alias("code"),
            *not_an_event,
        )
        numbered = F.col("id_rest") == ""
        rows = (
            copies.where(numbered)
            .drop("id_rest")
            .unionByName(
                led.outcomes.select(
                    "n",
                    none_long.alias("tpos"),
                    F.col("pos").alias("lpos"),
                    "outcome_no",
                    "code",
                    *not_an_event,
                )
            )
        )
        if with_events:
            rows = rows.unionByName(
                led.events.select(
                    "n",
                    none_long.alias("tpos"),
                    none_long.alias("lpos"),
                    none_long.alias("outcome_no"),
                    none_int.alias("code"),
                    F.lit(1).alias("event"),
                )
            )
        code, acked = F.col("code"), STATUS_CODES["acked"]
        per_event = (
            F.count("tpos").cast("int").alias("copies"),
            F.min("tpos").alias("pos_lo"),
            F.max("tpos").alias("pos_hi"),
            *([F.max("event").alias("event")] if with_events else []),
            F.max(F.when(code == acked, 1).otherwise(0)).alias("acked"),
            F.max(F.when(code == STATUS_CODES["sent"], 1).otherwise(0)).alias("sent"),
            F.max_by(code, "outcome_no").alias("last_code"),
            F.max(F.when(code == acked, F.col("lpos"))).alias("acked_position"),
        )
        # Every outcome and nearly every copy has a numbered id: they are grouped by n alone, a
        # long. Hashed by n first, so that the grouping is done once, after the shuffle: before it,
        # each task holds an event once and partial aggregates spill without reducing anything.
        folded = (
            rows.repartition("n")
            .groupBy("n")
            .agg(*per_event)
            .withColumn("id_rest", F.lit(""))
            .unionByName(copies.where(~numbered).groupBy(*ID_KEY).agg(*per_event))
        )
        n = F.col("n")
        if with_events:
            recorded = F.col("event") == 1
        else:
            recorded = F.lit(False)
            for lo, hi in led.islands:
                recorded = recorded | ((n >= lo) & (n < hi))
            recorded = recorded & (F.col("id_rest") == "")
        in_topic = F.col("copies") > 0
        status = (
            F.when(F.col("acked") == 1, F.lit("acked"))
            .when(F.col("sent") == 1, F.lit("sent"))
            .otherwise(
                F.coalesce(F.try_element_at(F.array(*map(F.lit, STATUSES)), F.col("last_code") + 1), F.lit("pending"))
            )
        )
        return (
            folded.withColumn("recorded", recorded)
            .where(in_topic | F.col("recorded"))
            .select(
                *ID_KEY,
                F.when(in_topic, F.col("copies")).alias("copies"),
                "pos_lo",
                "pos_hi",
                F.when(F.col("recorded"), status).alias("status"),
                F.when(F.col("recorded") & F.lit(led.positions), F.col("acked_position")).alias("acked_position"),
            )
        )

    @cached_property
    def duplicated(self) -> DataFrame:
        """ID_KEY of the events read more than once (from `joined`, which is cached, where there
        is a ledger)."""
        read = self.joined if self.ledger is not None else self.copies
        return read.where(F.col("copies") > 1).select(*ID_KEY)

    def first_copies(self, columns: tuple[str, ...] = FIRST_COPY, records: DataFrame | None = None) -> DataFrame:
        """One row per event read: its first copy by offset (ID_KEY and `columns`; with
        FIRST_COPY, the consumer-side remedy). Only the duplicated events are grouped; the others
        are their one copy, with no shuffle. `records`: the same records read again with the
        columns the cached ones left out (the payloads, the id's text)."""

        def first_of(records: DataFrame) -> DataFrame:
            return (
                records.groupBy(*ID_KEY).agg(F.min_by(F.struct(*columns), "offset").alias("f")).select(*ID_KEY, "f.*")
            )

        # A record read has an id's text exactly when it has ID_KEY (with_id_key); told by the text,
        # a copy that takes the text as read parses no id unless an event is duplicated.
        identified = self.identified if records is None else records.where(F.col("event_id").isNotNull())
        duplicated = self.totals["duplicated_events"] if self.ledger is not None else self.duplicated.count()
        if duplicated == 0:
            return identified.select(*ID_KEY, *columns)
        if duplicated > BROADCAST_MAX_ROWS:
            return first_of(identified)
        dups = F.broadcast(self.duplicated)
        once = identified.join(dups, list(ID_KEY), "left_anti").select(*ID_KEY, *columns)
        return once.unionByName(first_of(identified.join(dups, list(ID_KEY), "left_semi")))


def _fingerprint(name: str, *columns: Column) -> tuple[Column, Column]:
    """Two sums of 32-bit hashes of `columns` over the rows where none is NULL: equal for equal
    multisets of rows; for unequal ones, equal by chance about once in 2^64. Sums of 32-bit values
    stay within a long up to 2^31 rows."""
    low = F.lit(0xFFFFFFFF)
    present = F.lit(True)
    for c in columns:
        present = present & c.isNotNull()
    return (
        F.sum(F.when(present, F.hash(*columns).cast("bigint").bitwiseAND(low))).alias(f"{name}_h1"),
        F.sum(F.when(present, F.xxhash64(*columns).bitwiseAND(low))).alias(f"{name}_h2"),
    )


def _same(a, b, name: str) -> bool:
    """Two rows' fingerprints `name` (`_fingerprint`) are equal."""
    return all((a[f"{name}_h{i}"] or 0) == (b[f"{name}_h{i}"] or 0) for i in (1, 2))


def _total_counts() -> tuple[Column, ...]:
    return (
        F.count(F.when(rules.in_ledger(), 1)).alias("ledger_events"),
        F.count(F.when(F.col("status") == "acked", 1)).alias("ledger_acked"),
        F.count(F.when(rules.in_topic(), 1)).alias("distinct_events"),
        F.coalesce(F.sum("copies"), F.lit(0)).alias("records_with_id"),
        F.count(F.when(rules.in_topic() & (F.col("copies") == 1) & rules.in_ledger(), 1)).alias("delivered_once"),
        F.coalesce(F.sum(F.when(F.col("copies") > 1, F.col("copies") - 1)), F.lit(0)).alias("duplicate_copies"),
        # Not reported: what tells the kinds whether they have anything to look for.
        F.count(F.when(F.col("copies") > 1, 1)).alias("duplicated_events"),
        F.count(F.when(F.col("copies") > 2, 1)).alias("read_more_than_twice"),
        F.count(F.when((F.col("status") == "acked") & _acked_elsewhere_than_read(), 1)).alias("acked_elsewhere"),
    )


def _acked_elsewhere_than_read() -> Column:
    """The ledger's acked position is neither of the event's lowest and highest positions read
    (NULL when the ledger has none)."""
    acked_at = F.col("acked_position")
    return acked_at.isNotNull() & (
        F.col("pos_lo").isNull() | ((acked_at != F.col("pos_lo")) & (acked_at != F.col("pos_hi")))
    )


def _cases(obs: Observation, condition: Column, kind: str) -> DataFrame | None:
    if obs.read_as_acked:
        return None
    return rules.rows(
        obs.with_positions(obs.joined.where(condition)).select(obs.event_id(), "copies", "partitions", "offsets"), kind
    )


def _position() -> tuple[Column, Column]:
    """A single record's partition and offset, as the one-element arrays a discrepancy holds."""
    return F.array("partition").alias("partitions"), F.array("offset").alias("offsets")


def duplicate(obs: Observation) -> DataFrame | None:
    """More than one copy of an event [Jepsen: duplicate]; copies counts them all."""
    return _cases(obs, rules.duplicate(), "duplicate")


def lost_acked(obs: Observation) -> DataFrame | None:
    """The ledger says acked; no copy was read [Jepsen: lost-write]."""
    return _cases(obs, rules.lost_acked(), "lost_acked")


def lost_unacked(obs: Observation) -> DataFrame | None:
    """Never acked and not read: expected of a failed send, a loss all the same."""
    return _cases(obs, rules.lost_unacked(), "lost_unacked")


def coordinator_aborted(obs: Observation) -> DataFrame | None:
    """Of the lost_unacked events, those whose last attempt was a transaction the broker's
    coordinator aborted (the cause named, not a second loss). None where the ledger cannot say."""
    led = obs.ledger
    if not isinstance(led, OutcomeLedger) or led.aborted is None or obs.read_as_acked:
        return None
    by_coordinator = led.aborted.where(F.col("by_coordinator")).select("n", F.lit("").alias("id_rest"))
    lost = obs.joined.where(rules.lost_unacked() & (F.col("status") == "aborted")).join(
        by_coordinator, list(ID_KEY), "left_semi"
    )
    return rules.rows(
        obs.with_positions(lost).select(obs.event_id(), "copies", "partitions", "offsets"), "coordinator_aborted"
    )


def unknown_landed(obs: Observation) -> DataFrame | None:
    """Failed, unknown or never acked in the ledger, yet read: possibly persisted, and it was
    [Jepsen: indeterminate]."""
    return _cases(obs, rules.unknown_landed(), "unknown_landed")


def unexpected(obs: Observation) -> DataFrame | None:
    """Read, with no ledger row [Jepsen: unexpected]."""
    return _cases(obs, rules.unexpected(), "unexpected")


def out_of_order(obs: Observation) -> DataFrame:
    """Per key, first copies in log order: a sequence lower than one already seen, in this read or,
    for an audit's window, in an earlier window."""
    first = obs.first_copies(columns=("key", "seq", "partition", "offset")).where(F.col("seq").isNotNull())
    before = Window.partitionBy("key").orderBy("partition", "offset").rowsBetween(Window.unboundedPreceding, -1)
    newest = F.max("seq").over(before)
    if obs.read_earlier is not None:
        first = first.join(obs.read_earlier.select(*ID_KEY), list(ID_KEY), "left_anti")
    if obs.seq_earlier is not None:
        first = first.join(obs.seq_earlier, "key", "left")
        newest = F.greatest(newest, F.col("max_version"))  # NULLs skipped
    return rules.rows(
        first.withColumn("max_before", newest)
        .where(F.col("seq") < F.col("max_before"))
        .select(obs.event_id(), F.lit(1).alias("copies"), *_position()),
        "out_of_order",
    )


def aborted_visible(obs: Observation) -> DataFrame:
    """Copies an aborted transaction wrote [Jepsen: G1a]. Under read_uncommitted: the copies
    beyond those read_committed sees. Under read_committed: a record at a position the ledger
    recorded as aborted, which must never be visible."""
    if obs.isolation == READ_UNCOMMITTED and obs.committed_copies is not None:
        return rules.rows(
            obs.with_positions(
                obs.joined.where(rules.in_topic())
                .withColumn("extra", F.col("copies") - F.coalesce("committed", F.lit(0)))
                .where(F.col("extra") > 0)
            ).select(obs.event_id(), F.col("extra").alias("copies"), "partitions", "offsets"),
            "aborted_visible",
        )
    positions = obs.aborted_positions()
    if positions is None:
        return None  # no position to look at: every record read is left alone
    aborted = positions.select(*ID_KEY, F.explode("aborted_positions").alias("pos")).select(
        *ID_KEY, F.col("pos.partition").alias("partition"), F.col("pos.offset").alias("offset")
    )
    return rules.rows(
        obs.identified.join(aborted, [*ID_KEY, "partition", "offset"], "inner").select(
            obs.event_id(), F.lit(1).alias("copies"), *_position()
        ),
        "aborted_visible",
    )


def torn_transaction(obs: Observation) -> DataFrame | None:
    """Under read_committed, a committed transaction is visible all or none, across partitions
    [KAFKA-17754]. A row per event of a partly visible transaction that was not read, with the
    positions of the transaction's events that were."""
    if obs.transactions is None or obs.isolation != READ_COMMITTED:
        return None
    txn = Window.partitionBy("txn")
    members = obs.transactions.select(*ID_KEY, "txn").join(
        obs.with_positions(obs.copies).select(*ID_KEY, "copies", "partitions", "offsets"), list(ID_KEY), "left"
    )
    return rules.rows(
        members.withColumn("read", F.count("copies").over(txn))
        .withColumn(
            "seen_partitions", F.array_sort(F.array_distinct(F.flatten(F.collect_list("partitions").over(txn))))
        )
        .withColumn(
            "seen_offsets", F.slice(F.array_sort(F.flatten(F.collect_list("offsets").over(txn))), 1, MAX_OFFSETS)
        )
        .where(F.col("copies").isNull() & (F.col("read") > 0))
        .select(
            obs.event_id(),
            F.lit(0).alias("copies"),
            F.col("seen_partitions").alias("partitions"),
            F.col("seen_offsets").alias("offsets"),
        ),
        "torn_transaction",
    )


def inconsistent_offset(obs: Observation) -> DataFrame | None:
    """A position holding two different records [Jepsen: inconsistent-offsets], both ways: the
    ledger's acked position of an event holds another event (the log was truncated and written
    again there, as after an isolated leader's unclean election), or the two reads of the topic
    show different records there (the log changed between them). A row per event at each such
    position: for the ledger, the acked event, copies counting its copies read elsewhere; for the
    reads, the event this read shows."""
    found = [f for f in (_acked_elsewhere(obs), _reads_differ(obs)) if f is not None]
    if not found:
        return None
    rows = found[0] if len(found) == 1 else found[0].unionByName(found[1])
    return rows.dropDuplicates(["event_id"]) if len(found) > 1 else rows


def _acked_elsewhere(obs: Observation) -> DataFrame | None:
    if not obs.knows_positions:
        return None
    moved_events = obs.totals["acked_elsewhere"]
    if moved_events == 0:
        return None  # no position to look at: every record read is left alone
    moved = obs.joined.where((F.col("status") == "acked") & _acked_elsewhere_than_read()).select(
        *ID_KEY, F.coalesce("copies", F.lit(0)).alias("copies"), *position_parts(F.col("acked_position"))
    )
    if moved_events <= BROADCAST_MAX_ROWS:
        moved = F.broadcast(moved)
    there = obs.identified.select(
        F.col("n").alias("n_there"), F.col("id_rest").alias("rest_there"), "partition", "offset"
    )
    return rules.rows(
        moved.join(there, ["partition", "offset"])
        .where((F.col("n_there") != F.col("n")) | (F.col("rest_there") != F.col("id_rest")))
        .select(obs.event_id(), "copies", *_position()),
        "inconsistent_offset",
    )


def _reads_differ(obs: Observation) -> DataFrame | None:
    if obs.other_read is None:
        return None
    other = obs.other_read.select(
        F.col("n").alias("n_other"), F.col("id_rest").alias("rest_other"), "partition", "offset"
    )
    same = F.col("n").eqNullSafe(F.col("n_other")) & F.col("id_rest").eqNullSafe(F.col("rest_other"))
    return rules.rows(
        obs.records.join(other, ["partition", "offset"])
        .where(~same)
        .select(obs.event_id(), F.lit(1).alias("copies"), *_position()),
        "inconsistent_offset",
    )


def poll_steps(log: DataFrame) -> DataFrame:
    """From a poll log (`session, poll_no, partition, offsets` in the order polled), each offset
    polled after a session's first in its partition, with the one before it: `session, partition,
    offset, prev_offset`."""
    order = Window.partitionBy("session", "partition").orderBy("poll_no", "i")
    return (
        log.select("session", "poll_no", "partition", F.posexplode("offsets").alias("i", "offset"))
        .withColumn("prev_offset", F.lag("offset").over(order))
        .where(F.col("prev_offset").isNotNull())
        .select("session", "partition", "offset", "prev_offset")
    )


def _polled(obs: Observation, positions: DataFrame, kind: str) -> DataFrame:
    """A row per polled-topic position: the event there, by its id, or by its position."""
    named = positions.join(obs.polled_topic.select("partition", "offset", *ID_KEY), ["partition", "offset"], "left")
    where = F.concat(
        F.lit("partition "), F.col("partition").cast("string"), F.lit(" offset "), F.col("offset").cast("string")
    )
    return rules.rows(
        named.select(F.coalesce(obs.event_id(), where).alias("event_id"), F.lit(1).alias("copies"), *_position()), kind
    )


def nonmonotonic_poll(obs: Observation) -> DataFrame | None:
    """Within one consumer session, a poll returned an offset of a partition at or below one
    polled before it [Jepsen: nonmonotonic-poll]."""
    if obs.polls is None:
        return None
    back = obs.polls.where(F.col("offset") <= F.col("prev_offset")).select("partition", "offset").distinct()
    return _polled(obs, back, "nonmonotonic_poll")


def poll_skip(obs: Observation) -> DataFrame | None:
    """Within one consumer session, a record of the topic lies between two offsets polled one
    after the other [Jepsen: poll-skip]. Offsets that hold no visible record (transaction markers,
    aborted records under read_committed) are not skips. A row per record skipped."""
    if obs.polls is None:
        return None
    gaps = obs.polls.where(F.col("offset") > F.col("prev_offset") + 1).select(
        F.col("partition").alias("gap_partition"), "prev_offset", F.col("offset").alias("next_offset")
    )
    records = obs.polled_topic.select("partition", "offset")
    skipped = records.join(
        F.broadcast(gaps),
        (F.col("partition") == F.col("gap_partition"))
        & (F.col("offset") > F.col("prev_offset"))
        & (F.col("offset") < F.col("next_offset")),
    ).select("partition", "offset")
    return _polled(obs, skipped.distinct(), "poll_skip")


def malformed(obs: Observation) -> DataFrame | None:
    """A record without a usable event id, named by its position."""
    if obs.read_as_acked:
        return None
    where = F.concat(
        F.lit("partition "), F.col("partition").cast("string"), F.lit(" offset "), F.col("offset").cast("string")
    )
    return rules.rows(
        obs.records.where(F.col("n").isNull()).select(where.alias("event_id"), F.lit(1).alias("copies"), *_position()),
        "malformed",
    )


def stale_overwrite(obs: Observation) -> DataFrame | None:
    """A sink only: a record applied to its key's state after a newer version (publish_at, then
    seq) had been."""
    if not obs.sink:
        return None
    applied = obs.records.where(F.col("state_applied") & F.col("key").isNotNull())
    return rules.rows(
        rules.stale(applied, F.struct("publish_at", "seq"), ("apply_no",))
        .groupBy("event_id")
        .agg(
            F.count(F.lit(1)).alias("copies"),
            F.array_sort(F.collect_set("partition")).alias("partitions"),
            F.slice(F.array_sort(F.collect_list("offset")), 1, MAX_OFFSETS).alias("offsets"),
        ),
        "stale_overwrite",
    )


ANOMALIES = (
    duplicate,
    lost_acked,
    lost_unacked,
    coordinator_aborted,
    unknown_landed,
    unexpected,
    out_of_order,
    aborted_visible,
    torn_transaction,
    inconsistent_offset,
    poll_skip,
    nonmonotonic_poll,
    malformed,
    stale_overwrite,
)
KINDS = tuple(f.__name__ for f in ANOMALIES)
if set(KINDS) != {k.name for k in catalog.KINDS.values() if k.summary}:
    raise catalog.CatalogError("a kind function per counted kind: the catalog and ANOMALIES differ")


def discrepancies(obs: Observation, reconciliation_id: str) -> DataFrame:
    """Every kind's rows for one observation, in one frame."""
    found = [rows for rows in (kind(obs) for kind in ANOMALIES) if rows is not None]
    rows = found[0]
    for more in found[1:]:
        rows = rows.unionByName(more)
    return rows.select(
        F.lit(reconciliation_id).alias("reconciliation_id"),
        F.lit(obs.isolation).alias("isolation"),
        "event_id",
        "kind",
        F.col("copies").cast("int"),
        F.col("partitions").cast("array<int>"),
        F.col("offsets").cast("array<bigint>"),
    )


def totals(obs: Observation) -> dict:
    """The ledger's events and acks, the distinct events and records read, the events delivered
    exactly once, and the extra copies; and, not reported, the events read more than once and more
    than twice and those acked elsewhere than read, which tell the kinds whether to look."""
    return obs.totals
