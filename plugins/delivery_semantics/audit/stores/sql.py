"""SQL as the SQL stores build and check it: user identifiers validated and quoted (in each
store's dialect: `quote`), free SQL (`outbox.query`) checked with PostgreSQL's own parser, and a
select bounded in time by datetimes formatted here (`timestamp`), never by text from a file."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from delivery_semantics.audit import AuditError

if TYPE_CHECKING:
    from delivery_semantics.audit.audits import Audit


def quote_ident(name: str, mark: str = '"') -> str:
    """A validated (schema-qualified) identifier, quoted (PostgreSQL's double quotes, MySQL's
    backticks): matched exactly, never parsed as SQL."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", p) for p in parts):
        raise AuditError(f"{name!r} is not a SQL identifier")
    return ".".join(f"{mark}{p}{mark}" for p in parts)


def timestamptz(t: datetime) -> str:
    """A time as PostgreSQL reads it."""
    return f"TIMESTAMPTZ '{t.astimezone(UTC).isoformat()}'"


PARTITION_KEY = "partition_key"


def outbox_select(audit: Audit, quote=quote_ident) -> str:
    """The outbox rows as the checker reads them: each mapped column under its logical name (and
    the partitioning column as `partition_key`). Identifiers quoted; a query only when allowed."""
    ob = audit.outbox
    # The logical names quoted too: `key` is a reserved word in MySQL.
    items = [f"{quote(col)} AS {quote(logical)}" for logical, col in ob["columns"].items()]
    if "partitioning" in ob:
        items.append(f"{quote(ob['partitioning']['column'])} AS {PARTITION_KEY}")
    if "table" in ob:
        source = quote(ob["table"])
    elif ob.get("allow_query") is True:
        # On lines of their own: a trailing `--` comment ends with its line.
        source = f"(\n{free_select(ob['query'], audit.where('outbox.query'))}\n) AS outbox_query"
        return checked_select(f"SELECT {', '.join(items)} FROM {source}", audit.where("outbox.query"))
    else:
        raise AuditError(audit.where("outbox.query") + ": needs allow_query: true")
    return f"SELECT {', '.join(items)} FROM {source}"


# What a SELECT may not hold: a data-modifying WITH, SELECT INTO (creates a table), FOR UPDATE/SHARE.
_WRITES = {
    "InsertStmt": "writes (INSERT)",
    "UpdateStmt": "writes (UPDATE)",
    "DeleteStmt": "writes (DELETE)",
    "MergeStmt": "writes (MERGE)",
    "intoClause": "creates a table (SELECT INTO)",
    "lockingClause": "locks rows (FOR UPDATE/SHARE)",
}


def free_select(text: str, where: str) -> str:
    """Free SQL as PostgreSQL's own parser (libpg_query, through pglast) reads it: exactly one
    statement, a SELECT that neither writes nor locks, or AuditError naming `where`. Returns that
    statement's text, without a trailing semicolon, to be run as a subquery in a read-only
    transaction. Checked here, before any database sees it: a read-only transaction alone does
    not hold against `COMMIT; DROP TABLE ...` in the simple query protocol.

    What is returned is what was checked: the parser's offsets count UTF-8 bytes, so the statement
    is cut from the bytes and parsed again, and must give the same tree. A character the parser
    and the server could read differently (NUL, which ends the parser's input; a lone surrogate;
    any other control character but tab and the line ends) is refused outright."""
    bad = next((c for c in text if _unreadable(c)), None)
    if bad is not None:
        raise AuditError(
            f"{where}: holds the character U+{ord(bad):04X}: free SQL is printable text (tab and line ends allowed)"
        )
    (stmt,) = _one_select(text, where)
    _no_inner_semicolon(text, where)
    start, length = stmt.get("stmt_location", 0), stmt.get("stmt_len", 0)
    raw = text.encode("utf-8")
    piece = (raw[start : start + length] if length else raw[start:]).decode("utf-8", errors="strict").strip()
    (again,) = _one_select(piece, where)
    if _shape(again["stmt"]) != _shape(stmt["stmt"]):
        raise AuditError(f"{where}: reads differently once cut from the text around it; give the SELECT alone")
    return piece


def checked_select(sql: str, where: str) -> str:
    """A whole statement the platform built around free SQL, checked again just before it is sent:
    exactly one SELECT that neither writes nor locks."""
    _one_select(sql, where)
    return sql


def _one_select(text: str, where: str) -> list[dict]:
    """The parse of `text` when it is exactly one SELECT that neither writes nor locks."""
    from pglast.parser import ParseError, parse_sql_json

    try:
        stmts = json.loads(parse_sql_json(text))["stmts"] if text.strip() else []
    except ParseError as e:
        raise AuditError(f"{where}: not valid SQL: {e}") from None
    if len(stmts) != 1:
        raise AuditError(f"{where}: holds {len(stmts)} statements; free SQL is exactly one SELECT")
    (stmt,) = stmts
    if "SelectStmt" not in stmt["stmt"]:
        statement = next(iter(stmt["stmt"]))
        raise AuditError(f"{where}: is a {statement}, not a SELECT; free SQL is exactly one SELECT")
    found = _nodes(stmt["stmt"], set(_WRITES))
    if found:
        raise AuditError(f"{where}: {_WRITES[min(found)]}; free SQL is a SELECT that only reads")
    return stmts


def _no_inner_semicolon(text: str, where: str) -> None:
    """A semicolon only as the last token: an empty statement before the SELECT is refused as
    another statement would be, so that what runs is the whole text."""
    from pglast.parser import scan

    tokens = [t.name for t in scan(text) if t.name not in ("C_COMMENT", "SQL_COMMENT")]
    if "ASCII_59" in tokens[:-1]:
        raise AuditError(f"{where}: holds a ';' before its end; free SQL is exactly one SELECT")


def _unreadable(c: str) -> bool:
    o = ord(c)
    return (o < 32 and c not in "\t\n\r") or 127 <= o < 160 or 0xD800 <= o <= 0xDFFF or o in (0x2028, 0x2029, 0xFEFF)


def _shape(tree):
    """A parse tree without its offsets: two texts of the same statement have the same shape."""
    if isinstance(tree, dict):
        return {k: _shape(v) for k, v in tree.items() if k not in ("location", "stmt_location", "stmt_len")}
    if isinstance(tree, list):
        return [_shape(v) for v in tree]
    return tree


def _nodes(tree, names: set[str]) -> set[str]:
    """Which of `names` are keys anywhere in a parse tree (pglast's JSON)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found |= names & node.keys()
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def sink_select(audit: Audit, quote=quote_ident) -> str:
    """The sink rows as the checker reads them, each mapped column under its logical name."""
    items = [f"{quote(col)} AS {quote(logical)}" for logical, col in audit.sink["columns"].items()]
    return f"SELECT {', '.join(items)} FROM {quote(audit.sink['table'])}"


def time_bounded(select: str, column: str, since: datetime | None, until: datetime, timestamp=timestamptz) -> str:
    """`select` (whose logical column `column` is a time) restricted to [since, until). The bounds
    are datetimes this module formats, never text from a file."""
    low = f"{column} >= {timestamp(since)} AND " if since else ""
    return f"SELECT * FROM ({select}) AS bounded WHERE {low}{column} < {timestamp(until)}"
