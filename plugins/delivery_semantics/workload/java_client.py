"""The Java client (kafka-clients) as a load's producer: `clients/java/SemanticsProducer.java` in a
JVM of its own, driven over its stdin and stdout (the protocol is in that file). The load session
is the same as librdkafka's: every event is in the ledger before it is asked for here, and each
report becomes an outcome with its partition and offset.

The runner runs against the kafka-clients jars in SEMANTICS_KAFKA_CLIENT_JARS (a folder). The
installed package ships it built (plumbing/javac.py's Maven-built jar), so a JRE is enough; a
checkout compiles it on first use with the JDK's javac, and SEMANTICS_JAVA_CLASSES names a build
made elsewhere.
The JVM is a child of the load process: when that process dies, its stdin closes and the JVM halts
at once, with nothing more sent or committed, as a crash of the producer's process would.
"""

from __future__ import annotations

import base64
import itertools
import os
import queue
import subprocess
import tempfile
import threading
from pathlib import Path

from delivery_semantics import locations
from delivery_semantics.catalog import DeliveryMode, ModeError
from delivery_semantics.clients import java
from delivery_semantics.files import one_line
from delivery_semantics.history.ledger import Outcome
from delivery_semantics.plumbing import javac
from delivery_semantics.plumbing.endpoints import java_client_config, oauth_java_options
from delivery_semantics.workload.client import (
    AbortRequired,
    ProducerClient,
    ProducerFenced,
    Written,
    transactional_ids,
)
from delivery_semantics.workload.generator import Generator

MAIN_CLASS = "SemanticsProducer"
# The jars the runner needs: the client, its compression codecs, and for an OAUTHBEARER login jose4j
# and Jackson (the token endpoint's answer). No logging binding: SLF4J
# falls back to its no-op logger, and nothing can write to the protocol's stdout.
_JARS = (
    "kafka-clients-",
    "lz4-java-",
    "snappy-java-",
    "zstd-jni-",
    "slf4j-api-",
    "jose4j-",
    "jackson-databind-",
    "jackson-core-",
    "jackson-annotations-",
)
# Exceptions after which the record certainly is not in the log (client.py's list, in the Java
# client's names). Anything else, a TimeoutException above all, may have been written.
_NOT_WRITTEN = {
    "RecordTooLargeException",
    "RecordBatchTooLargeException",
    "InvalidRecordException",
    "CorruptRecordException",
    "TopicAuthorizationException",
    "ClusterAuthorizationException",
    "TransactionalIdAuthorizationException",
    "InvalidTopicException",
    "NotEnoughReplicasException",
    "InvalidRequiredAcksException",
    "InvalidTxnStateException",
    "ProducerFencedException",
    "InvalidProducerEpochException",
    "UnsupportedVersionException",
    "SerializationException",
    "IllegalStateException",
}


class JavaClientError(RuntimeError):
    """The Java runner cannot be built or started; the message says why."""


def classpath() -> str:
    folder = locations.setting("kafka_client_jars")
    if not folder:
        raise JavaClientError("SEMANTICS_KAFKA_CLIENT_JARS is not set: the folder holding kafka-clients and its jars")
    jars = [str(p) for p in sorted(Path(folder).glob("*.jar")) if p.name.startswith(_JARS)]
    if not any(Path(j).name.startswith("kafka-clients-") for j in jars):
        raise JavaClientError(f"no kafka-clients jar in {folder} (SEMANTICS_KAFKA_CLIENT_JARS)")
    return os.pathsep.join(jars)


def build() -> Path:
    """The built runner: a folder of classes or the package's jar, compiled now where neither is
    given and the source or the jars changed."""
    if locations.setting("java_classes"):
        return Path(locations.setting("java_classes"))
    if prebuilt := javac.prebuilt():
        return prebuilt
    try:
        return javac.classes(locations.shipped("clients") / "java" / "SemanticsProducer.java", classpath())
    except javac.JavacError as e:
        raise JavaClientError(str(e)) from None


def command(subcommand: str, conf: dict | None = None) -> list[str]:
    """The runner's command line: check, sizes or run (its subcommand, never a delivery mode)."""
    # A heap for twice the client's buffer.memory and some: the JVM shares the machine.
    heap = f"-Xmx{java.heap_mb(conf)}m"
    return [
        "java",
        heap,
        "-Xss512k",
        "-XX:+UseSerialGC",
        *oauth_java_options(conf or {}),
        "-cp",
        f"{build()}{os.pathsep}{classpath()}",
        MAIN_CLASS,
        subcommand,
    ]


def field(text) -> str:
    """A text field of the runner's protocol: Base64 of its UTF-8, so that no text can hold the
    protocol's tab or newline (the protocol is in SemanticsProducer.java)."""
    return base64.b64encode(str(text).encode("utf-8", "surrogatepass")).decode("ascii")


def text(field_: str) -> str:
    return base64.b64decode(field_, validate=True).decode("utf-8", "replace")


def _fields(line: bytes) -> list[str]:
    """A line of the runner's output as its fields: it ends at b"\n" alone."""
    return line.rstrip(b"\n").decode("ascii", "replace").split("\t")


def _conf_lines(conf: dict[str, str]) -> str:
    return "".join(f"conf\t{field(k)}\t{field(v)}\n" for k, v in conf.items()) + "end\n"


def check(settings: dict[str, str], transactional: bool) -> dict[str, str]:
    """The Java client's own check of the settings (ProducerConfig, unknown keys refused): its
    effective values of the settings a finding reads, or ModeError with its message."""
    probe = {**settings, "bootstrap.servers": "127.0.0.1:1"}
    if transactional:
        probe["transactional.id"] = "validate"
    try:
        done = subprocess.run(
            command("check"), input=_conf_lines(probe).encode("ascii"), capture_output=True, timeout=60, check=False
        )
    except JavaClientError as e:
        raise ModeError(str(e)) from None
    except FileNotFoundError:
        raise ModeError("java is not installed: the Java client needs a JVM") from None
    lines = [_fields(line) for line in done.stdout.split(b"\n") if line]
    if not lines:
        stderr = one_line(done.stderr.decode("utf-8", "replace").strip()[-300:])
        raise ModeError(f"the Java client's check failed: {stderr or f'exit {done.returncode}'}")
    if lines[0][0] == "refused":
        raise ModeError(one_line(f"the Java client refused the producer settings: {text(lines[0][1])}"))
    effective = {text(f[1]): text(f[2]) for f in lines[1:] if f[0] == "setting" and len(f) == 3}
    effective.pop("bootstrap.servers", None)  # the probe's, reported so a test can see framing hold
    if effective.get("acks") == "-1":
        effective["acks"] = "all"
    return effective


def topic_sizes(conf: dict[str, str], names: list[str]) -> dict[str, int]:
    """The bytes each named topic takes on the brokers' disks, every replica summed (the runner's
    `sizes`: librdkafka has no DescribeLogDirs). `conf` is the cluster's Java client settings."""
    body = _conf_lines(conf) + "".join(f"topic\t{field(n)}\n" for n in names) + "start\n"
    try:
        done = subprocess.run(
            command("sizes", conf), input=body.encode("ascii"), capture_output=True, timeout=180, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        raise JavaClientError(f"the brokers' log sizes could not be read: {type(e).__name__}") from None
    lines = [_fields(line) for line in done.stdout.split(b"\n") if line]
    if not lines or lines[-1] != ["end"]:
        why = (
            text(lines[0][1]) if lines and lines[0][0] == "fatal" and len(lines[0]) == 2 else f"exit {done.returncode}"
        )
        raise JavaClientError(one_line(f"the brokers' log sizes could not be read: {why}"))
    return {text(f[1]): int(f[2]) for f in lines if f[0] == "size" and len(f) == 3}


class JavaClient(ProducerClient):
    """The Java runner as a producer client. Its reports are read on a thread of their own, in the
    order the JVM wrote them: a turn's flush or commit reply comes after every report it waited
    for. Transactions take turns under TRANSACTIONAL_IDS ids, as librdkafka's do (client.py)."""

    @classmethod
    def check(cls, conf: dict[str, str], mode: DeliveryMode) -> dict[str, str]:
        return check(conf, mode.transactional)

    @classmethod
    def connection(cls, kafka_conf: dict) -> dict:
        return java_client_config(kafka_conf)

    def __init__(self, conf: dict, topic: str, gen: Generator, *, transactional: bool):
        super().__init__(topic, gen, transactional=transactional, acks0=str(conf.get("acks")) == "0")
        self._lock, self._write_lock = threading.Lock(), threading.Lock()
        txn_ids = transactional_ids(conf["transactional.id"]) if transactional else []
        self._replies = [queue.Queue() for _ in range(max(1, len(txn_ids)))]
        self._turn = 0
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed with the client)
        run_conf = {k: v for k, v in conf.items() if k != "transactional.id"}
        # Binary pipes: the reports are split at b"\n" alone, never at a "\r" (universal newlines).
        self.proc = subprocess.Popen(
            command("run", conf),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            bufsize=1 << 16,
        )
        pool = base64.b64encode(gen.payload_pool).decode()
        self._write(
            _conf_lines(run_conf)
            + f"gen\t{field(gen.run_id)}\t{gen.keys}\t{gen.key_base}\t{gen.payload_bytes}\t{pool}\t{field(topic)}\n"
            + "".join(f"txn\t{field(t)}\n" for t in txn_ids)
            + "start\n"
        )
        first = _fields(self.proc.stdout.readline())
        if first != ["ready"]:
            self.proc.kill()
            detail = (text(first[1]) if first[0] == "fatal" and len(first) > 1 else "") or self._stderr_tail()
            if "Fenced" in detail:
                raise ProducerFenced(one_line(detail))
            raise RuntimeError(one_line(f"the Java client did not start: {detail}"))
        self._reader = threading.Thread(target=self._read, name="java-reports", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ the JVM's output

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self._report(_fields(line))
            except (ValueError, IndexError) as e:  # a line that is not the protocol's: the runner is broken
                self.errors.append(one_line(f"the Java client wrote a line that is not a report: {e}"))
                self.proc.kill()
                break
        for q in self._replies:  # the JVM is gone: nobody waits forever
            q.put(("gone", self._stderr_tail()))

    def _report(self, f: list[str]) -> None:
        tag = f[0]
        if tag == "a":
            n, partition, offset, latency_us = int(f[1]), int(f[2]), int(f[3]), int(f[4])
            with self._lock:
                self._delivered.append((n, partition, None if self.acks0 else offset, latency_us))
        elif tag == "e":
            n, name = int(f[1]), f[2]
            outcome = self._failure(n, "failed" if name in _NOT_WRITTEN else "unknown", int(f[3]), name)
            with self._lock:
                self._failed.append(outcome)
                if len(self.errors) < 100:
                    self.errors.append(one_line(f"{name}: {text(f[4]) if len(f) > 4 else ''}"))
        elif tag == "done":
            self._replies[int(f[1])].put((f[3], one_line(text(f[4])) if len(f) > 4 else ""))
        elif tag == "closed":
            self._replies[0].put(("closed", ""))

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().splitlines() if not line.startswith("SLF4J:")]
        return (lines[-1] if lines else f"exit {self.proc.poll()}")[-500:]

    def _take(self) -> tuple[list, list[Outcome]]:
        with self._lock:
            return super()._take()

    # ------------------------------------------------------------------ commands

    def _write(self, lines: str) -> None:
        with self._write_lock:
            try:
                self.proc.stdin.write(lines.encode("ascii"))
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise RuntimeError(f"the Java client exited: {self._stderr_tail()}") from None

    def _ask(self, cmd: str, turn: int) -> None:
        """A command that has a reply: waits for it; a fenced producer or an abortable transaction
        is raised as the librdkafka client raises it."""
        self._write(f"{cmd}\t{turn}\n")
        status, message = self._replies[turn].get()
        if status == "ok":
            return
        if status == "fenced":
            raise ProducerFenced(message)
        if status == "abortable":
            raise AbortRequired(message)
        raise RuntimeError(f"the Java client's {cmd} failed: {message}")

    def _produce(self, records: list[tuple[int, int]], turn: int) -> None:
        lines = [
            f"p\t{turn}\t{at}\t{' '.join(str(n) for n, _ in group)}\n"
            for at, group in itertools.groupby(records, key=lambda r: r[1])
        ]
        self._write("".join(lines))
        self.produced += len(records)

    def send(self, records: list[tuple[int, int]]) -> None:
        self._produce(records, 0)

    def flush(self, timeout: float) -> int:
        self._ask("f", 0)
        return 0

    def write_transaction(self, records: list[tuple[int, int]], txn_no: int) -> Written:
        turn = self._turn
        self._turn = (self._turn + 1) % len(self._replies)
        self._take()
        try:
            self._ask("b", turn)
        except AbortRequired as e:
            raise RuntimeError(f"the Java client could not begin a transaction: {e}") from None
        self._produce(records, turn)
        self._ask("f", turn)
        return Written(turn, records, txn_no, *self._take())

    def _commit_transaction(self, turn: int) -> None:
        self._ask("c", turn)

    def _abort_transaction(self, turn: int) -> None:
        self._ask("x", turn)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._write("q\n")
                self._replies[0].get(timeout=90)
            except (RuntimeError, queue.Empty):
                self.proc.kill()
        self.proc.wait()
        self._stderr.close()
