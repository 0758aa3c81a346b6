"""An event of a platform run, and its id: `<run_id>-<n>`, from which the checker derives n."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class Event:
    n: int
    event_id: str
    key: str
    seq: int
    publish_at_ms: int
    payload: bytes

    def value(self) -> bytes:
        """The record's value in the value layout."""
        return b"%s %d %d %s" % (self.event_id.encode(), self.seq, self.publish_at_ms, self.payload)

    @property
    def publish_at(self) -> datetime:
        return datetime.fromtimestamp(self.publish_at_ms / 1000, tz=UTC)


def event_id(run_id: str, n: int) -> str:
    return f"{run_id}-{n}"
