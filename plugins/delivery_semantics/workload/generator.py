"""What to send: the events of a run, derived deterministically from (run_id, seed, n), so any
event can be rebuilt for a resend from its ledger row alone."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterable, Iterator

from delivery_semantics.records.event import Event, event_id
from delivery_semantics.records.layouts import AVRO_HEAD, AVRO_LAYOUT, RECORD_FORMATS, SEPARATOR, VALUE_LAYOUT
from delivery_semantics.records.wire import unzigzag, zigzag

_POOL_BYTES = 1 << 16


def new_run_id(prefix: str = "r") -> str:
    """Sortable and safe as part of an SQL identifier and a topic name; producer runs start with
    r, consumer runs with c."""
    return prefix + time.strftime("%Y%m%dt%H%M%S", time.gmtime()) + "_" + secrets.token_hex(3)


def slices(messages: int, producers: int) -> list[tuple[int, int]]:
    """[start, stop) of each producer's events: contiguous, as even as can be, covering all."""
    return [(messages * i // producers, messages * (i + 1) // producers) for i in range(producers)]


class Generator:
    """Event n of a run: its id, payload, key and sequence. A producer of a run with several writes
    keys of its own, `k<key_base + n % keys>` (key_base: the producer's number times keys): a key
    with one writer has an order for Kafka to keep, which out_of_order checks; two producers
    writing one key concurrently have none, and every event of the slower one would read as out
    of order."""

    def __init__(
        self, run_id: str, keys: int, payload_bytes: int, seed: int, key_base: int = 0, layout: str = VALUE_LAYOUT
    ):
        if keys <= 0:
            raise ValueError(f"keys must be > 0, got {keys}")
        if payload_bytes < 0:
            raise ValueError(f"payload bytes must be >= 0, got {payload_bytes}")
        if key_base < 0:
            raise ValueError(f"key base must be >= 0, got {key_base}")
        if layout not in RECORD_FORMATS.values():
            raise ValueError(f"a producer writes the layouts {', '.join(RECORD_FORMATS.values())}, not {layout!r}")
        self.layout = layout
        self.run_id, self.keys, self.key_base, self.payload_bytes = run_id, keys, key_base, payload_bytes
        rng = random.Random(seed)  # noqa: S311 (load generation, not cryptography)
        alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        pool_len = max(_POOL_BYTES, 2 * payload_bytes)
        self._pool = bytes(alphabet[rng.randrange(len(alphabet))] for _ in range(pool_len))
        self._span = pool_len - payload_bytes
        self._run_id_bytes = run_id.encode()
        self._n_at = len(self._run_id_bytes) + 1
        self._key_bytes = [f"k{key_base + i}".encode() for i in range(keys)]
        self._avro_payload_size = zigzag(payload_bytes)
        self._avro_at = (None, b"")  # a batch's publish time, encoded once

    @property
    def payload_pool(self) -> bytes:
        """What payload(n) slices: the Java client's runner gets it once and slices it the same way."""
        return self._pool

    def payload(self, n: int) -> bytes:
        start = (n * 7919) % (self._span + 1)
        return self._pool[start : start + self.payload_bytes]

    def records(self, ns: Iterable[int], publish_at_ms: int) -> list[tuple[int, int]]:
        """(n, publish_at_ms) of each event to send: what the producer client takes."""
        return [(n, publish_at_ms) for n in ns]

    def wire(self, n: int, publish_at_ms: int) -> dict[str, bytes]:
        """Event n as the record produce_batch takes, without building an Event: the producer's
        per-record path. `event(n).value()` gives the same value, and the Java client's runner
        (clients/java/SemanticsProducer.java, `send`) the same key and value: change them together."""
        if self.layout == AVRO_LAYOUT:
            if self._avro_at[0] != publish_at_ms:
                self._avro_at = (publish_at_ms, zigzag(publish_at_ms))
            digits = b"%d" % n
            # avro_value's bytes, with what a run or a batch shares encoded once
            value = b"%b%b%b-%b%b%b%b%b" % (
                AVRO_HEAD,
                zigzag(self._n_at + len(digits)),
                self._run_id_bytes,
                digits,
                zigzag(n // self.keys),
                self._avro_at[1],
                self._avro_payload_size,
                self.payload(n),
            )
        else:
            value = b"%s-%d %d %d %s" % (self._run_id_bytes, n, n // self.keys, publish_at_ms, self.payload(n))
        return {"value": value, "key": self._key_bytes[n % self.keys]}

    def n_of(self, value: bytes) -> int:
        """The event number in a value this generator made: what its delivery report is for."""
        if self.layout == AVRO_LAYOUT:
            size, at = unzigzag(value, 5)
            return int(value[at + self._n_at : at + size])
        return int(value[self._n_at : value.index(SEPARATOR, self._n_at)])

    def event(self, n: int, publish_at_ms: int | None = None) -> Event:
        # The ledger's view `ledger_events` (sql/V020) derives the same id, key and seq from n and
        # key_base, and the checker's rebuilt ledger the same id: change them together.
        return Event(
            n,
            event_id(self.run_id, n),
            f"k{self.key_base + n % self.keys}",
            n // self.keys,
            publish_at_ms if publish_at_ms is not None else int(time.time() * 1000),
            self.payload(n),
        )

    def batches(self, start: int, stop: int, batch_size: int) -> Iterator[list[tuple[int, int]]]:
        """The records of new events n in [start, stop), stamped with publish_at when the batch is made."""
        for lo in range(start, stop, batch_size):
            yield self.records(range(lo, min(lo + batch_size, stop)), int(time.time() * 1000))
