"""Checks that the lexical index (schema m009, m017) matches ``entries`` exactly."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store.lexical import DOCS_TABLE, FTS_TABLE


def index_rows(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    return conn.execute(
        f"SELECT store, slug, body FROM {DOCS_TABLE} ORDER BY store, slug"
    ).fetchall()


def assert_index_in_step(conn: sqlite3.Connection) -> None:
    """One indexed text per row, ``label`` newline ``content``, and FTS5's own check passes
    (its 'integrity-check' compares the index with the text it was built from)."""
    expected = conn.execute(
        "SELECT store, slug, label || char(10) || content FROM entries ORDER BY store, slug"
    ).fetchall()
    assert index_rows(conn) == expected
    conn.execute(f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('integrity-check')")
    (docs,) = conn.execute(f"SELECT count(*) FROM {DOCS_TABLE}").fetchone()
    (indexed,) = conn.execute(f"SELECT count(*) FROM {FTS_TABLE}_docsize").fetchone()
    assert indexed == docs
