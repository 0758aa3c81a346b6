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
    not hold against `COMMIT; DROP TABLE ...` in the simple query protocol."""
    from pglast.parser import ParseError, parse_sql_json

    try:
        stmts = json.loads(parse_sql_json(text))["stmts"] if text.strip() else []
    except ParseError as e:
        raise AuditError(f"{where}: not valid SQL: {e}") from None
    if len(stmts) != 1:
        raise AuditError(f"{where}: holds {len(stmts)} statements; free SQL is exactly one SELECT")
    (stmt,) = stmts
    if "SelectStmt" not in stmt["stmt"]:
        kind = next(iter(stmt["stmt"]))
        raise AuditError(f"{where}: is a {kind}, not a SELECT; free SQL is exactly one SELECT")
    found = _nodes(stmt["stmt"], set(_WRITES))
    if found:
        raise AuditError(f"{where}: {_WRITES[min(found)]}; free SQL is a SELECT that only reads")
    start = stmt.get("stmt_location", 0)
    length = stmt.get("stmt_len", 0)
    return (text[start : start + length] if length else text[start:]).strip()


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
