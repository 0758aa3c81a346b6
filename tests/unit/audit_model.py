"""A reference model of a continuous audit, written from the documented semantics (docs/RECONCILE.md,
the docstring of checker/windows.py) in plain Python: no Spark, no database. It judges a history
window by window, carrying its own state, so that the Spark checker can be compared with it.

A history: outbox rows (event id, status, created), topic records (event id or None, key, seq,
partition, offset, time; each partition's offsets in time order), sink applies (event id, key,
version, time). A window ends at `end` and follows the one that ended at `start` (None: the
first, which reads everything before its end). With grace g:
- its records are those timed in [start, end); its outbox rows those created in [start - 2g, end);
  its applies those timed in [start, end);
- outbox_topic: a row created in [start - g, end - g) is due: never seen in the topic, lost
  (lost_acked if acked, else lost_unacked); seen but not acked, unknown_landed. A record of an
  event read twice in the window or read before: duplicate. A record with no row created in
  [start - g, end) and not seen before: unexpected once its first copy is past end - g, else
  pending, and a pending record matched by a later window's row is no longer unexpected. A copy of
  an event with an unresolved loss: late. Per key, a first copy whose seq is below one read before
  it (earlier windows included): out_of_order. A record without an id: malformed;
- topic_sink: a record first seen (ever) in [start - g, end - g) never applied by end: lost. An
  event applied twice in the window or applied before: duplicate. Applied, never in the topic by
  end: unexpected. Per key, an apply whose version is below one applied before it: stale_overwrite.
  An apply of an event with an unresolved topic_sink loss: late;
- outbox_sink: an acked row created in [start - 2g, end - 2g) never applied by end: lost; an apply
  of an event with an unresolved outbox_sink loss: late.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

OT, TS, OS = "outbox_topic", "topic_sink", "outbox_sink"
LOSSES = ("lost_acked", "lost_unacked", "lost")


@dataclass(frozen=True)
class Row:
    event_id: str
    status: str
    created: datetime


@dataclass(frozen=True)
class Record:
    event_id: str | None
    key: str
    seq: int
    partition: int
    offset: int
    at: datetime


@dataclass(frozen=True)
class Apply:
    event_id: str
    key: str
    version: int
    at: datetime


@dataclass
class Audit:
    """The state a sequence of windows carries."""

    grace: timedelta
    seen_topic: dict = field(default_factory=dict)  # event id -> first_at of its first copy ever
    seen_sink: set = field(default_factory=set)
    open_losses: dict = field(default_factory=dict)  # (stage, event id) -> occurred_at
    pending: dict = field(default_factory=dict)  # event id -> (first_at, copies): records with no outbox row yet
    topic_max: dict = field(default_factory=dict)  # key -> highest seq read
    sink_max: dict = field(default_factory=dict)  # key -> highest version applied
    start: datetime | None = None

    def window(self, end: datetime, rows: list[Row], records: list[Record], applies: list[Apply]) -> dict:
        """The window ending at `end`: {(stage, kind, event id): copies} (malformed by position),
        and the window's state carried into the audit."""
        g, start = self.grace, self.start
        since = lambda shift: None if start is None else start - shift * g
        within = lambda t, shift: t < end - shift * g and (since(shift) is None or t >= since(shift))
        found: dict = {}

        def report(stage, kind, eid, copies):
            found[(stage, kind, eid)] = copies

        recs = sorted((r for r in records if r.at < end and (start is None or r.at >= start)), key=_log_order)
        outbox = {r.event_id: r for r in rows if r.created < end and (since(2) is None or r.created >= since(2))}
        sink = [a for a in applies if a.at < end and (start is None or a.at >= start)]
        copies = Counter(r.event_id for r in recs if r.event_id is not None)
        first = {}
        for r in recs:
            if r.event_id is not None:
                first.setdefault(r.event_id, r)
        seen_before = {e for e in copies if e in self.seen_topic}
        matchable = {e for e, row in outbox.items() if since(1) is None or row.created >= since(1)}

        # outbox_topic
        for e, n in copies.items():
            if n > 1 or e in seen_before:
                report(OT, "duplicate", e, n)
            if (OT, e) in self.open_losses:
                report(OT, "late", e, n)
        seen_topic = set(self.seen_topic) | set(copies)
        for e, row in outbox.items():
            if within(row.created, 1):
                if e not in seen_topic:
                    report(OT, "lost_acked" if row.status == "acked" else "lost_unacked", e, 0)
                elif row.status != "acked":
                    report(OT, "unknown_landed", e, copies.get(e, 0))  # the copies read in this window
        unmatched = {
            e: first[e].at
            for e in copies
            if e not in matchable and e not in seen_before and (OT, e) not in self.open_losses
        }
        unmatched = {e: (at, copies[e]) for e, at in unmatched.items()}
        unmatched.update({e: carried for e, carried in self.pending.items() if e not in matchable})
        new_pending = {}
        for e, (at, n) in unmatched.items():
            if at < end - g:
                report(OT, "unexpected", e, n)
            else:
                new_pending[e] = (at, n)
        topic_max = dict(self.topic_max)
        for r in sorted((first[e] for e in copies if e not in seen_before), key=_log_order):
            if r.key in topic_max and r.seq < topic_max[r.key]:
                report(OT, "out_of_order", r.event_id, 1)
            topic_max[r.key] = max(topic_max.get(r.key, r.seq), r.seq)
        for r in recs:
            if r.event_id is None:
                report(OT, "malformed", f"partition {r.partition} offset {r.offset}", 1)

        # topic_sink and outbox_sink
        applied = Counter(a.event_id for a in sink)
        seen_sink = self.seen_sink | set(applied)
        for e, n in applied.items():
            if n > 1 or e in self.seen_sink:
                report(TS, "duplicate", e, n)
            if e not in seen_topic:
                report(TS, "unexpected", e, n)
            for stage in (TS, OS):
                if (stage, e) in self.open_losses:
                    report(stage, "late", e, n)
        sink_max = dict(self.sink_max)
        stale = Counter()
        for a in sorted(sink, key=lambda a: (a.at, a.version)):
            if a.key in sink_max and a.version < sink_max[a.key]:
                stale[a.event_id] += 1
            sink_max[a.key] = max(sink_max.get(a.key, a.version), a.version)
        for e, n in stale.items():
            report(TS, "stale_overwrite", e, n)
        first_ever = {**{e: first[e].at for e in copies if e not in self.seen_topic}, **self.seen_topic}
        for e, at in first_ever.items():
            if within(at, 1) and e not in seen_sink:
                report(TS, "lost", e, 0)
        for e, row in outbox.items():
            if row.status == "acked" and within(row.created, 2) and e not in seen_sink:
                report(OS, "lost", e, 0)

        # what the window leaves
        for stage, kind, e in found:
            if kind in LOSSES:
                self.open_losses[(stage, e)] = True
        for stage, kind, e in list(found):
            if kind == "late":
                self.open_losses.pop((stage, e), None)
        self.seen_topic = first_ever
        self.seen_sink = seen_sink
        self.pending = new_pending
        self.topic_max, self.sink_max, self.start = topic_max, sink_max, end
        return found


def _log_order(r: Record):
    return (r.partition, r.offset)


def windows(grace: timedelta, ends: list[datetime], rows, records, applies) -> list[dict]:
    """Each window's findings, in order."""
    audit = Audit(grace)
    return [audit.window(end, rows, records, applies) for end in ends]


def settled_ids(found: list[dict]) -> dict:
    """What a sequence of windows leaves standing, per (stage, kind): the event ids, with losses a
    later window resolved (late) taken out, and the late rows themselves left out."""
    out: dict = defaultdict(set)
    resolved = {(s, e) for w in found for (s, k, e) in w if k == "late"}
    for w in found:
        for stage, kind, e in w:
            if kind == "late" or (kind in LOSSES and (stage, e) in resolved):
                continue
            out[(stage, kind)].add(e)
    return dict(out)
