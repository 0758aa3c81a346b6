"""One query helper over the platform's results database (the ledger connection), for every
floor: rows as dicts, parameters bound, never pasted."""

from __future__ import annotations

import psycopg2
import psycopg2.extras

from delivery_semantics.plumbing.endpoints import ledger_database


def query(sql: str, params=()) -> list[dict]:
    with (
        psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c,
        c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur,
    ):
        cur.execute(sql, params)
        return [dict(r) for r in cur.fetchall()]
