"""The lexical index of memories (m009; m017 adds column ``camel``) and their backfill steps
(docs/database.md §lexical-index)."""

from __future__ import annotations

import sqlite3

from thatch.frontend.store import backfill, lexical

__all__ = [
    "FTS_TRIGGERS",
    "fill_fts",
    "fill_fts_identifiers",
    "m009_fts",
    "m017_fts_identifiers",
]

_FTS, _DOCS = lexical.FTS_TABLE, lexical.DOCS_TABLE


FTS_TRIGGERS = (
    "thatch_entries_fts_insert",
    "thatch_entries_fts_delete",
    "thatch_entries_fts_update",
)


def _unindex(row: str) -> str:
    """Drop the indexed text of ``row``'s key, if any, from the index and the docs table.

    By key, not by ``entries.rowid``: VACUUM may renumber that, and ``INSERT OR REPLACE``
    deletes the row it replaces without firing delete triggers (unless the writer enabled
    recursive_triggers), so its text is still indexed when the insert trigger runs. The
    FTS5 ``'delete'`` command needs the text exactly as indexed: the docs table keeps it.
    Nothing here can conflict, so the outer statement's conflict policy never matters.
    """
    return (
        f"INSERT INTO {_FTS} ({_FTS}, rowid, words, parts) "
        f"SELECT 'delete', doc, body, replace(body, '_', ' ') FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug; "
        f"DELETE FROM {_DOCS} WHERE store = {row}.store AND slug = {row}.slug;"
    )


def _index(row: str) -> str:
    """Index ``row``'s label and content under its key (replacing what the key had)."""
    return (
        f"{_unindex(row)} "
        f"INSERT INTO {_DOCS} (store, slug, body) "
        f"VALUES ({row}.store, {row}.slug, {row}.label || char(10) || {row}.content); "
        f"INSERT INTO {_FTS} (rowid, words, parts) "
        f"SELECT doc, body, replace(body, '_', ' ') FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug;"
    )


def m009_fts(conn: sqlite3.Connection) -> None:
    """The lexical index of memories (docs/database.md §lexical-index); existing rows are
    indexed afterwards by its backfill (``fill_fts``), a few thousand per transaction.

    ``_thatch_fts_docs`` holds each key's indexed text once (``label`` newline ``content``);
    the FTS5 table reads its columns through a view (external content), so the text is
    not stored a second time. Triggers keep both in step with ``entries`` for every writer
    from this transaction on, so the backfill only adds keys they have not indexed yet.
    Skipped (not recorded) by a SQLite without FTS5: see ``init_schema``.
    """
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_DOCS} (doc INTEGER PRIMARY KEY, store TEXT NOT NULL, "
        "slug TEXT NOT NULL, body TEXT NOT NULL, UNIQUE (store, slug))"
    )
    conn.execute(
        f"CREATE VIEW IF NOT EXISTS {lexical.SOURCE_VIEW} AS "
        f"SELECT doc, body AS words, replace(body, '_', ' ') AS parts FROM {_DOCS}"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {_FTS} USING fts5(words, parts, "
        f"content='{lexical.SOURCE_VIEW}', content_rowid='doc', "
        f'tokenize="{lexical.TOKENIZER}")'
    )
    for name in FTS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    # Emptied first: also right for a file whose index a crash or an older SQLite left
    # behind half-made (empty in every file this release has not indexed: no cost).
    conn.execute(f"DELETE FROM {_DOCS}")
    conn.execute(f"INSERT INTO {_FTS} ({_FTS}) VALUES ('delete-all')")
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_index('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_unindex('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[2]} AFTER UPDATE OF slug, store, label, content "
        "ON entries WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        "OR OLD.label IS NOT NEW.label OR OLD.content IS NOT NEW.content "
        f"BEGIN {_unindex('OLD')} {_index('NEW')} END"
    )
    backfill.schedule(conn, lexical.BACKFILL_009)


def fill_fts(conn: sqlite3.Connection, after: list[str] | None, rows: int) -> list[str] | None:
    """Backfill step of m009: index up to ``rows`` entries after key ``after`` (slug, store)."""
    return _fill(conn, after, rows, "words, parts", "body, replace(body, '_', ' ')")


def _fill(
    conn: sqlite3.Connection, after: list[str] | None, rows: int, columns: str, values: str
) -> list[str] | None:
    """Index up to ``rows`` entries after key ``after`` (slug, store): ``values`` (SQL of
    the docs table's ``body``) into the index's ``columns``.

    Walks the primary key's index, so it is exact whatever VACUUM does to rowids. A key
    already in ``_thatch_fts_docs`` was indexed by a trigger (written since m009) with its
    current text: skipped, so no memory is indexed twice. A key changed or inserted behind
    the walk is the triggers' too, so none is missed.
    """
    slug, store = after if after is not None else ("", "")
    found = conn.execute(
        "SELECT slug, store FROM entries WHERE (slug, store) > (?, ?) "
        "ORDER BY slug, store LIMIT 1 OFFSET ?",
        (slug, store, rows - 1),
    ).fetchone()
    (top,) = conn.execute(f"SELECT coalesce(max(doc), 0) FROM {_DOCS}").fetchone()
    bound = "" if found is None else "AND (e.slug, e.store) <= (?, ?)"
    conn.execute(
        f"INSERT INTO {_DOCS} (store, slug, body) "
        "SELECT e.store, e.slug, e.label || char(10) || e.content FROM entries AS e "
        f"WHERE (e.slug, e.store) > (?, ?) {bound} AND NOT EXISTS "
        f"(SELECT 1 FROM {_DOCS} AS d WHERE d.store = e.store AND d.slug = e.slug)",
        (slug, store) if found is None else (slug, store, *found),
    )
    # Docs rows made just now are exactly those above the old maximum (INTEGER PRIMARY KEY
    # assigns max + 1; no other writer runs inside this transaction).
    conn.execute(
        f"INSERT INTO {_FTS} (rowid, {columns}) SELECT doc, {values} FROM {_DOCS} WHERE doc > ?",
        (top,),
    )
    return None if found is None else list(found)


# Column ``camel`` (m017): the indexed text with CamelCase split, in built-in SQL only.
_CAMEL_BODY = lexical.camel_sql("body")
_COLUMNS_017 = f"body, replace(body, '_', ' '), {_CAMEL_BODY}"


def _unindex_017(row: str) -> str:
    """``_unindex`` for the three columns of m017."""
    return (
        f"INSERT INTO {_FTS} ({_FTS}, rowid, words, parts, camel) "
        f"SELECT 'delete', doc, {_COLUMNS_017} FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug; "
        f"DELETE FROM {_DOCS} WHERE store = {row}.store AND slug = {row}.slug;"
    )


def _index_017(row: str) -> str:
    """``_index`` for the three columns of m017."""
    return (
        f"{_unindex_017(row)} "
        f"INSERT INTO {_DOCS} (store, slug, body) "
        f"VALUES ({row}.store, {row}.slug, {row}.label || char(10) || {row}.content); "
        f"INSERT INTO {_FTS} (rowid, words, parts, camel) "
        f"SELECT doc, {_COLUMNS_017} FROM {_DOCS} "
        f"WHERE store = {row}.store AND slug = {row}.slug;"
    )


def m017_fts_identifiers(conn: sqlite3.Connection) -> None:
    """The lexical index rebuilt with a third column, ``camel``: the text with CamelCase
    split (``lexical.camel_sql``), so that a question's words find ``getUserName`` and
    a query naming ``UserName`` finds it too (docs/database.md §lexical-index).

    An FTS5 table cannot gain a column: the index, its view and its triggers are made
    anew, and every memory is indexed again by this migration's backfill
    (``fill_fts_identifiers``) in short transactions, as m009's was; m009's own backfill,
    if still pending, is dropped (this one indexes every memory). The triggers use
    built-in functions only, so the earlier release's writes are indexed as before.
    """
    for name in FTS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(f"DROP TABLE IF EXISTS {_FTS}")
    conn.execute(f"DROP VIEW IF EXISTS {lexical.SOURCE_VIEW}")
    conn.execute(
        f"CREATE VIEW {lexical.SOURCE_VIEW} AS SELECT doc, body AS words, "
        f"replace(body, '_', ' ') AS parts, {_CAMEL_BODY} AS camel FROM {_DOCS}"
    )
    conn.execute(
        f"CREATE VIRTUAL TABLE {_FTS} USING fts5(words, parts, camel, "
        f"content='{lexical.SOURCE_VIEW}', content_rowid='doc', "
        f'tokenize="{lexical.TOKENIZER}")'
    )
    # Emptied: the backfill indexes every memory again (no cost in a new file).
    conn.execute(f"DELETE FROM {_DOCS}")
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[0]} AFTER INSERT ON entries BEGIN {_index_017('NEW')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[1]} AFTER DELETE ON entries BEGIN {_unindex_017('OLD')} END"
    )
    conn.execute(
        f"CREATE TRIGGER {FTS_TRIGGERS[2]} AFTER UPDATE OF slug, store, label, content "
        "ON entries WHEN OLD.slug IS NOT NEW.slug OR OLD.store IS NOT NEW.store "
        "OR OLD.label IS NOT NEW.label OR OLD.content IS NOT NEW.content "
        f"BEGIN {_unindex_017('OLD')} {_index_017('NEW')} END"
    )
    backfill.schedule(conn, lexical.BACKFILL)
    conn.execute(f"DELETE FROM {backfill.BACKFILLS_TABLE} WHERE name = ?", (lexical.BACKFILL_009,))


def fill_fts_identifiers(
    conn: sqlite3.Connection, after: list[str] | None, rows: int
) -> list[str] | None:
    """Backfill step of m017: ``fill_fts`` with the three columns."""
    return _fill(conn, after, rows, "words, parts, camel", _COLUMNS_017)
