"""An audit's writer schemas: the files its `record.schemas` (the value's) and `record.key_schemas`
(the key's) name by schema id, as a registry numbers them. A record in Confluent's wire format
(a zero byte, the 4-byte schema id, the payload) is decoded with the schema of its own id, so a
topic written under several versions of a schema decodes each record as it was written, and a
record whose id is not here is malformed.

Read by the preflight (a bad file is one line and exit 2) and by the Spark application, which
decodes with them. No Spark here: the DAG file's process imports it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from delivery_semantics.audit import AuditError
from delivery_semantics.audit.formats import FORMATS

if TYPE_CHECKING:
    from delivery_semantics.audit.audits import Audit
from delivery_semantics.files import one_line

TIMESTAMP_TYPES = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")
PROTOBUF_TIMESTAMP = "google.protobuf.Timestamp"
SIDES = {"value": ("format", "schemas"), "key": ("key_format", "key_schemas")}


@dataclass(frozen=True)
class WriterSchema:
    id: int
    schema_type: str  # avro | protobuf
    text: str  # Avro's JSON, or the .proto file
    file: str  # the file it came from, relative to the audit's folder
    descriptor: bytes | None = field(default=None, repr=False)  # protobuf: a FileDescriptorSet, imports included

    def leaf(self, path: str) -> str | None:
        """What `path` (a.b, or $ for the whole) reaches in this schema: "timestamp", "value", or
        None when the schema has no such field. Raises AuditError for a path Spark cannot follow."""
        return (
            _avro_leaf(json.loads(self.text), path, self) if self.schema_type == "avro" else _protobuf_leaf(self, path)
        )


def paths(record: dict, side: str) -> list[str]:
    """The field paths the record section reads from the value (`field`) or the key (`key_field`)."""
    spec_key = "field" if side == "value" else "key_field"
    return [spec[spec_key] for spec in record.values() if isinstance(spec, dict) and spec_key in spec]


def load(audit: Audit) -> dict[str, dict[int, WriterSchema]]:
    """The writer schemas of the value and of the key, by id, each checked: it parses, and every
    field path the audit reads is in at least one of them."""
    rec = audit.record
    out: dict[str, dict[int, WriterSchema]] = {"value": {}, "key": {}}
    for side, (format_key, schemas_key) in SIDES.items():
        schema_type = FORMATS[rec.get(format_key) or ("json" if side == "value" else "string")].schemas
        if schema_type is None:
            continue
        files = rec.get(schemas_key)
        if not files:
            raise AuditError(
                audit.where(f"record.{schemas_key}")
                + f": a {schema_type} {side} needs its writer schemas by id (a file each, as the registry numbers them)"
            )
        for sid, name in files.items():
            out[side][int(sid)] = _read(audit, schema_type, int(sid), name, f"record.{schemas_key}.{sid}")
        for path in paths(rec, side):
            if not any(s.leaf(path) for s in out[side].values()):
                raise AuditError(
                    audit.where(f"record.{'field' if side == 'value' else 'key_field'}")
                    + f": {path!r} is in none of the {side}'s schemas ({', '.join(s.file for s in out[side].values())})"
                )
    return out


# A schema file's name: a path inside the audit's folder, never one protoc could read as an option
# (`-...`, or `@file`, which makes protoc read its arguments from the file).
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}){0,4}")
MAX_SCHEMA_BYTES = 1 << 20
MAX_AVRO_DEPTH = 64


def schema_file(audit: Audit, name, where: str) -> Path:
    """The schema file `name` names: inside the audit's folder once every link is followed."""
    folder = audit.path.resolve().parent
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name) or ".." in name.split("/"):
        raise AuditError(
            f"{audit.where(where)}: a schema file is named by a path relative to the audit's folder "
            "(letters, digits, '_', '.', '-' and '/'; not starting with '-', '@' or '.')"
        )
    path = (folder / name).resolve()
    if not path.is_relative_to(folder):
        raise AuditError(f"{audit.where(where)}: {name}: outside the audit's folder ({folder})")
    if not path.is_file():
        raise AuditError(f"{audit.where(where)}: {name}: no such file (looked in {folder})")
    if path.stat().st_size > MAX_SCHEMA_BYTES:
        raise AuditError(f"{audit.where(where)}: {name}: larger than {MAX_SCHEMA_BYTES >> 10} KiB")
    return path


def _read(audit: Audit, schema_type: str, sid: int, name: str, where: str) -> WriterSchema:
    path = schema_file(audit, name, where)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise AuditError(f"{audit.where(where)}: {name}: not UTF-8 text") from None
    if schema_type == "avro":
        import fastavro

        try:
            schema = json.loads(text)
            _avro_check(schema, 0)
            fastavro.parse_schema(schema)
        except (ValueError, fastavro.schema.SchemaParseException, TypeError, KeyError, RecursionError) as e:
            first = one_line(str(e).splitlines()[0] if str(e) else type(e).__name__, 200)
            raise AuditError(f"{audit.where(where)}: {name}: not an Avro schema: {first}") from None
        return WriterSchema(sid, schema_type, text, name)
    return WriterSchema(sid, schema_type, text, path.name, _compile_proto(path, audit.where(where)))


def _avro_check(schema, depth: int) -> None:
    """What Avro's specification requires and fastavro lets pass: a record has its `fields`, each
    a mapping with a name and a type; and nesting is bounded. ValueError otherwise."""
    if depth > MAX_AVRO_DEPTH:
        raise ValueError(f"nested deeper than {MAX_AVRO_DEPTH} levels")
    if isinstance(schema, list):
        for branch in schema:
            _avro_check(branch, depth + 1)
        return
    if not isinstance(schema, dict):
        return
    avro_type = schema.get("type")
    if avro_type == "record" or avro_type == "error":
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise ValueError(f"record {schema.get('name', '?')!s:.60} has no fields list (Avro requires one)")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                raise ValueError(f"a field of record {schema.get('name', '?')!s:.60} needs a name and a type")
            _avro_check(f["type"], depth + 1)
    elif avro_type == "array":
        _avro_check(schema.get("items"), depth + 1)
    elif avro_type == "map":
        _avro_check(schema.get("values"), depth + 1)
    elif isinstance(avro_type, (dict, list)):
        _avro_check(avro_type, depth + 1)


# protoc's bounds: a schema folder is a page of files, and protoc is given a minute.
PROTOC_SECONDS = 60
_PROTO_FILES, _PROTO_BYTES = 1000, 16 << 20


def _compile_proto(path: Path, where: str) -> bytes:
    """protoc (grpcio-tools') on the file, with its folder and the well-known types on the import
    path: the descriptor set Python's protobuf runtime builds message classes from. protoc reads a
    copy of the folder's .proto files made without following a link or opening anything but a
    regular file (a committed link to a file elsewhere, or a FIFO that would hold it, is left
    behind), and is stopped after PROTOC_SECONDS."""
    import importlib.resources

    well_known = importlib.resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "schemas"
        _copy_protos(path.parent, copy, where)
        out = Path(tmp) / "set.pb"
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grpc_tools.protoc",
                    f"-I{copy}",
                    f"-I{well_known}",
                    "--include_imports",
                    f"--descriptor_set_out={out}",
                    path.name,
                ],
                capture_output=True,
                text=True,
                cwd=copy,
                timeout=PROTOC_SECONDS,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise AuditError(f"{where}: {path.name}: protoc did not finish in {PROTOC_SECONDS} s") from None
        if proc.returncode != 0:
            first = (proc.stderr.strip() or proc.stdout.strip() or "protoc failed").splitlines()[0]
            raise AuditError(one_line(f"{where}: {path.name}: not a .proto schema: {first}"))
        return out.read_bytes()


def _copy_protos(source: Path, target: Path, where: str) -> None:
    """Every regular .proto file under `source`, read without following links (O_NOFOLLOW, and no
    descent into a linked folder), copied to `target` within bounds."""
    import stat

    files = total = 0
    for folder, _dirs, names in os.walk(source, followlinks=False):
        for name in names:
            if not name.endswith(".proto"):
                continue
            src = Path(folder) / name
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link, or gone
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue  # a FIFO, a device
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read(_PROTO_BYTES + 1)
            finally:
                os.close(fd)
            files, total = files + 1, total + len(data)
            if files > _PROTO_FILES or total > _PROTO_BYTES:
                raise AuditError(f"{where}: more .proto files than a schema folder holds ({_PROTO_FILES}, 16 MiB)")
            dest = target / src.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)


# --------------------------------------------------------------------------- Avro


def _avro_leaf(schema, path: str, ws: WriterSchema) -> str | None:
    named: dict[str, dict] = {}
    node = _avro_resolve(schema, named)
    if path != "$":
        for part in path.split("."):
            node = _avro_resolve(node, named)
            if not isinstance(node, dict) or node.get("type") != "record":
                return None
            fields = {f["name"]: f["type"] for f in node["fields"]}
            if part not in fields:
                return None
            _register(fields[part], named)
            node = fields[part]
    node = _avro_resolve(node, named)
    logical = node.get("logicalType") if isinstance(node, dict) else None
    return "timestamp" if logical in TIMESTAMP_TYPES else "value"


def _register(schema, named: dict) -> None:
    """Records, enums and fixed types named where they are first defined, for later references."""
    if isinstance(schema, dict) and "name" in schema and schema.get("type") in ("record", "enum", "fixed"):
        named[schema["name"]] = schema
        named[f"{schema.get('namespace', '')}.{schema['name']}".lstrip(".")] = schema
        for f in schema.get("fields", []):
            _register(f["type"], named)
    elif isinstance(schema, list):
        for s in schema:
            _register(s, named)


def _avro_resolve(schema, named: dict):
    """A schema with a nullable union unwrapped (Spark reads ["null", T] as a nullable T) and a
    named reference looked up."""
    _register(schema, named)
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise AuditError(
                f"a union of {len(branches)} types ({json.dumps(schema)[:80]}) on a field path: "
                "Spark reads it as member0, member1, ...; name a field outside it"
            )
        return _avro_resolve(branches[0], named)
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        return _avro_resolve(schema["type"], named)
    return schema


# --------------------------------------------------------------------------- Protobuf


def message_classes(ws: WriterSchema) -> list:
    """The top-level message classes of the schema's own file, in declaration order: the order
    the wire format's message indexes count in."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files = descriptor_pb2.FileDescriptorSet.FromString(ws.descriptor)
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    own = pool.FindFileByName(ws.file)
    return [message_factory.GetMessageClass(d) for d in own.message_types_by_name.values()]


def _protobuf_leaf(ws: WriterSchema, path: str) -> str | None:
    found = None
    for cls in message_classes(ws):
        desc = cls.DESCRIPTOR
        leaf = _descriptor_leaf(desc, path)
        found = found or leaf
    return found


def _descriptor_leaf(desc, path: str) -> str | None:
    if path == "$":
        return "value"
    for i, part in enumerate(path.split(".")):
        if desc is None or part not in desc.fields_by_name:
            return None
        f = desc.fields_by_name[part]
        desc = f.message_type
        if i == len(path.split(".")) - 1:
            return "timestamp" if desc is not None and desc.full_name == PROTOBUF_TIMESTAMP else "value"
    return None
