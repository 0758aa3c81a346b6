"""A cluster's finalized feature levels (`metadata.version`, `eligible.leader.replicas.version`,
`transaction.version`, ...), which decide what a release does (KIP-584, KIP-966): read from a
broker's ApiVersions response (v3 and later carry them as tagged fields), the one request that
reports them and that every client may send before it authenticates. Neither librdkafka nor
confluent-kafka exposes them, so this speaks that one request itself, over PLAINTEXT or SSL; a SASL
listener needs the SASL handshake first, and its features are then not read (None), never guessed.
"""

from __future__ import annotations

import socket
import ssl
import struct

API_VERSIONS = 18
VERSION = 3
FEATURES_TAG = 2  # FinalizedFeatures: (name, max_version_level, min_version_level)
MAX_RESPONSE = 1 << 20


class FeatureError(RuntimeError):
    """The broker did not answer ApiVersions v3 as the protocol says."""


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _compact_string(s: str) -> bytes:
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def request(correlation_id: int = 1, client_id: str = "delivery-semantics") -> bytes:
    """ApiVersionsRequest v3 with a request header v2, framed by its size."""
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, VERSION, correlation_id, len(cid)) + cid + _uvarint(0)
    body = _compact_string("delivery-semantics") + _compact_string("1") + _uvarint(0)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise FeatureError("ApiVersions response cut short")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise FeatureError("ApiVersions response: a varint too long")

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        return "" if n <= 0 else self.take(n).decode()

    def tags(self) -> dict[int, bytes]:
        return {self.uvarint(): self.take(self.uvarint()) for _ in range(self.uvarint())}


def parse(response: bytes, correlation_id: int = 1) -> dict[str, int]:
    """The finalized features of a response (its size prefix removed): name -> max version level."""
    r = _Reader(response)
    if r.int32() != correlation_id:
        raise FeatureError("ApiVersions response: another request's correlation id")
    error = r.int16()
    if error:
        raise FeatureError(f"ApiVersions v{VERSION} refused (error code {error}): a broker older than Kafka 2.4")
    for _ in range(r.uvarint() - 1):  # the API keys: key, min, max, tagged fields
        r.take(6)
        r.tags()
    r.int32()  # throttle time
    finalized = r.tags().get(FEATURES_TAG)
    if finalized is None:
        return {}
    f = _Reader(finalized)
    out = {}
    for _ in range(f.uvarint() - 1):
        name = f.compact_string()
        out[name] = f.int16()  # max version level: the level in force
        f.int16()
        f.tags()
    return out


def _ssl_context(conf: dict) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=conf.get("ssl.ca.location"))
    if conf.get("ssl.endpoint.identification.algorithm", "https") == "none":
        ctx.check_hostname = False
    if conf.get("ssl.certificate.location"):
        ctx.load_cert_chain(
            conf["ssl.certificate.location"], conf.get("ssl.key.location"), conf.get("ssl.key.password")
        )
    return ctx


def finalized_features(kafka_conf: dict, timeout: float = 10.0) -> dict[str, int] | None:
    """The cluster's finalized features as its first reachable bootstrap broker reports them; None
    on a SASL listener (not read). FeatureError or OSError when no broker answers."""
    protocol = str(kafka_conf.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SSL"):
        return None
    last: Exception | None = None
    for server in str(kafka_conf.get("bootstrap.servers", "")).split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            continue
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw:
                sock = _ssl_context(kafka_conf).wrap_socket(raw, server_hostname=host) if protocol == "SSL" else raw
                with sock:
                    sock.sendall(request())
                    size = struct.unpack(">i", _recv(sock, 4))[0]
                    if not 0 < size <= MAX_RESPONSE:
                        raise FeatureError(f"ApiVersions response of {size} bytes")
                    return parse(_recv(sock, size))
        except (OSError, FeatureError) as e:
            last = e
    raise last or FeatureError("no bootstrap server to ask")


def _recv(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise FeatureError("the broker closed the connection")
        buf += chunk
    return bytes(buf)
