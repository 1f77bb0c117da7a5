"""Lexical recall (docs/database.md §lexical-index): the FTS5 index of memories and its queries.

The index (schema ``m009_fts``) is kept by triggers, so it can use only what every
client's SQLite has: FTS5's built-in ``porter unicode61`` tokenizer and built-in SQL
functions. Identifiers are therefore indexed twice: whole in column ``words`` (``_`` is a
token character, so ``thatch_db_path`` is one token; ``.``, ``/``, ``-`` and ``:`` split,
and a dotted or slashed name is matched as a phrase of its pieces), and split at ``_`` in
column ``parts`` (``replace()`` in the trigger). CamelCase cannot be split in SQL: it is
one token (``memorystore``) in both columns, and the query searches it whole and, as a
phrase, its parts. Plain query words search ``parts``, where every word stands alone.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "BACKFILL",
    "BACKFILL_009",
    "CAMEL_WEIGHT",
    "DOCS_TABLE",
    "EXACT_LIFT",
    "EXACT_MAX_MATCHES",
    "FILLS",
    "FTS_TABLE",
    "HIT_LIMIT",
    "LEXICAL_WEIGHT",
    "MATCH_BUDGET",
    "MAX_IDENTIFIERS",
    "MAX_WORDS",
    "PARTS_WEIGHT",
    "SOURCE_VIEW",
    "STOPWORDS",
    "TOKENIZER",
    "WORDS_WEIGHT",
    "Identifier",
    "affordable",
    "camel_sql",
    "camel_text",
    "evidence",
    "fts5_available",
    "has_camel",
    "index_present",
    "lexical_hits",
    "lifts",
    "query_items",
]

FTS_TABLE = "thatch_entries_fts"
DOCS_TABLE = "_thatch_fts_docs"
SOURCE_VIEW = "_thatch_fts_source"
TOKENIZER = "unicode61 remove_diacritics 2 tokenchars '_'"
# The backfill (schema ``fill_fts_identifiers``) that indexes the memories older than the
# index: while it is pending, the index holds only part of them. m009's own (``fill_fts``)
# is pending only in a file m017 has not reached yet.
BACKFILL = "m017_fts_identifiers"
BACKFILL_009 = "m009_fts"
FILLS = frozenset({BACKFILL, BACKFILL_009})

# Identifiers and words considered per query (a 2,000-character prompt must not become a
# 300-term OR), and the memories they may match in all (see ``affordable``).
MAX_IDENTIFIERS = 4
MAX_WORDS = 12
MATCH_BUDGET = 600
# Lexical hits read per query (the best by BM25, over the scope's stores).
HIT_LIMIT = 50
# BM25 column weights: whole identifiers, split parts, CamelCase split (column ``camel``,
# m017: 0.5 against 1.0 was level on every dev set fused, better by BM25 alone).
WORDS_WEIGHT = 1.0
PARTS_WEIGHT = 1.0
CAMEL_WEIGHT = 0.5
# What the query's best lexical hit adds to its cosine for ranking (chosen on the dev set
# of bench/recall_quality.py).
LEXICAL_WEIGHT = 0.15
# A query's identifier found whole in at most this many memories of the scope lifts them by
# EXACT_LIFT (docs/database.md §ranking says why 0.5: it outranks all but a far closer
# meaning, and cost the dev set 0.010 R@1 where 1.0 cost 0.013).
EXACT_MAX_MATCHES = 1
EXACT_LIFT = 0.5

# Words that carry no lexical evidence in a question ("how do I …").
_STOPWORDS_TEXT = """a about above after again against all also am an and any are as at be because
been before being below between both but by can could did do does doing done down during each
few for from further get gets had has have having he her here hers him his how i if in into is
it its itself just let lets like made make many may me might more most much must my no nor not
now of off on once only or other our ours out over own per please same she should show so some
such tell than that the their theirs them then there these they this those through thus to too
under until up upon us use used uses using very via was we were what when where which while who
whom why will with within without would yet you your yours"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())

_TOKEN = re.compile(r"\w(?:[\w./:\-]*\w)?")
_PIECES = re.compile(r"[./:\-]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CAPITALS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CAPITAL = re.compile("([A-Z])")
_CAMEL_TOKEN = re.compile(r"[^\W_]+")


def fts5_available(conn: sqlite3.Connection) -> bool:
    """Whether this connection's SQLite can create FTS5 tables."""
    if conn.execute("SELECT sqlite_compileoption_used('ENABLE_FTS5')").fetchone()[0]:
        return True
    try:  # FTS5 may also come as a loadable extension
        conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp._thatch_fts_probe USING fts5(x)")
        conn.execute("DROP TABLE IF EXISTS temp._thatch_fts_probe")
    except sqlite3.OperationalError:
        return False
    return True


def index_present(conn: sqlite3.Connection) -> bool:
    """Whether the file holds the index (``m009_fts`` ran) and this SQLite can read it."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (FTS_TABLE,)
    ).fetchone()
    if row is None:
        return False
    try:
        conn.execute(f"SELECT 1 FROM {FTS_TABLE} WHERE 0").fetchall()
    except sqlite3.OperationalError:  # no such module: fts5
        return False
    return True


def has_camel(conn: sqlite3.Connection) -> bool:
    """Whether the index has column ``camel`` (``m017_fts_identifiers`` ran)."""
    columns = conn.execute(f"SELECT name FROM pragma_table_info('{FTS_TABLE}')").fetchall()
    return ("camel",) in columns


def _phrase(words: Sequence[str]) -> str:
    return '"' + " ".join(words) + '"'


def _split_part(piece: str) -> list[str]:
    """``memory_store`` / ``MemoryStore`` / ``HTTP2Server`` → their lowercase words."""
    found: list[str] = []
    for chunk in piece.split("_"):
        if chunk.isascii():
            found.extend(word.lower() for word in _CAMEL.findall(chunk))
        elif chunk:  # CamelCase is an ASCII habit; other scripts stay whole
            found.append(chunk.lower())
    return [word for word in found if word]


class Identifier(NamedTuple):
    """One identifier of a query as FTS5 items: ``whole`` matches it as written (column
    ``words``), ``parts`` its words as a phrase (column ``parts``), ``camel`` its pieces
    as column ``camel`` holds them (``camel_text``)."""

    whole: str
    parts: str
    camel: str


def camel_sql(expression: str) -> str:
    """SQL of column ``camel`` for the text ``expression``: ``_`` a space and a space
    before every ASCII capital, with built-in ``replace()`` only (the triggers run in every
    writer's SQLite): ``getUserName`` → ``get User Name``. A run of capitals splits into
    letters (``HTTPServer`` → ``H T T P Server``); the query splits its names the same way
    (``camel_text``), and column ``parts`` still holds ``httpserver`` whole."""
    out = f"replace({expression}, '_', ' ')"
    for capital in _CAPITALS:
        out = f"replace({out}, '{capital}', ' {capital}')"
    return out


def camel_text(text: str) -> str:
    """``camel_sql`` in Python, for the query's names."""
    return _CAPITAL.sub(r" \1", text.replace("_", " "))


def query_items(text: str) -> tuple[list[Identifier], list[str]]:
    """(identifiers, plain words) of ``text``; words lowercase, stopwords and single letters
    dropped; each once, in order."""
    identifiers: list[Identifier] = []
    words: list[str] = []
    for token in _TOKEN.findall(text):
        pieces = [piece for piece in _PIECES.split(token) if piece]
        parts = [word for piece in pieces for word in _split_part(piece)]
        if not parts:
            continue
        if len(pieces) == 1 and len(parts) == 1 and pieces[0].lower() == parts[0]:
            word = parts[0]
            if word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
                words.append(word)
            continue
        whole = f"words: {_phrase([piece.lower() for piece in pieces])}"
        camel = _CAMEL_TOKEN.findall(camel_text(token).lower())
        identifiers.append(
            Identifier(whole, f"parts: {_phrase(parts)}", f"camel: {_phrase(camel)}")
        )
    return list(dict.fromkeys(identifiers)), list(dict.fromkeys(words))


def _word_item(word: str, camel: bool) -> str:
    return f"{{parts camel}}: {_phrase([word])}" if camel else f"parts: {_phrase([word])}"


def _identifier_items(identifier: Identifier, camel: bool) -> list[str]:
    # A name without ``_`` or CamelCase has the same tokens in each column: one item.
    parts = identifier.parts.removeprefix("parts: ")
    items = []
    if identifier.whole.removeprefix("words: ") != parts:
        items.append(identifier.whole)
    if not camel:
        items.append(identifier.parts)
    elif identifier.camel.removeprefix("camel: ") == parts:
        items.append(f"{{parts camel}}: {parts}")
    else:
        items += [identifier.parts, identifier.camel]
    return items


def _counts(conn: sqlite3.Connection, items: Sequence[str], limit: int) -> list[int]:
    """How many memories each item matches, each counted only up to ``limit`` + 1 and
    unscored, in one statement."""
    if not items:
        return []
    one = f"(SELECT count(*) FROM (SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH ? LIMIT ?))"
    params: list[object] = []
    for item in items:
        params += [item, limit + 1]
    row = conn.execute("SELECT " + ", ".join([one] * len(items)), params).fetchone()
    return [int(count) for count in row]


def affordable(
    conn: sqlite3.Connection,
    identifiers: Sequence[Identifier],
    words: Sequence[str],
    camel: bool = False,
) -> tuple[list[Identifier], list[str]]:
    """The identifiers and words worth scoring, within ``MATCH_BUDGET`` matched memories.

    Scoring costs a look-up per matched memory (~1.5 µs), and BM25 gives an item found in
    many memories little weight anyway: identifiers go first (the exact names recall is
    for; counted as whole or parts), then words from
    the rarest; one that would overrun the budget, or matches nothing, is left out.
    Counting stops at the budget and scores nothing (``fts5vocab`` would read each word's
    whole list: ~0.2 ms a word at 10k memories).
    """
    identifiers = list(identifiers[:MAX_IDENTIFIERS])
    words = list(words[:MAX_WORDS])
    either = [" OR ".join([i.whole, *_identifier_items(i, camel)]) for i in identifiers]
    counts = _counts(conn, either + [_word_item(word, camel) for word in words], MATCH_BUDGET)
    budget = MATCH_BUDGET
    kept: list[Identifier] = []
    for identifier, count in zip(identifiers, counts, strict=False):
        if 0 < count <= budget:
            kept.append(identifier)
            budget -= count
    kept_words: list[str] = []
    for count, word in sorted(zip(counts[len(identifiers) :], words, strict=True)):
        if 0 < count <= budget:
            kept_words.append(word)
            budget -= count
    return kept, kept_words


def _expression(identifiers: Sequence[Identifier], words: Sequence[str], camel: bool) -> str:
    items = [item for identifier in identifiers for item in _identifier_items(identifier, camel)]
    items += [_word_item(word, camel) for word in words]
    return " OR ".join(items)


def evidence(
    conn: sqlite3.Connection,
    stores: Sequence[str],
    text: str,
    limit: int = HIT_LIMIT,
    *,
    camel: bool = False,
    camel_weight: float | None = None,
) -> tuple[dict[tuple[str, str], float], set[tuple[str, str]]]:
    """(hits, exact) for ``text`` over ``stores``: the best ``limit`` memories by BM25 as
    ``{(store, slug): score}`` (score > 0, higher is better), and the memories holding one
    of its identifiers whole when at most ``EXACT_MAX_MATCHES`` of those stores do (a name
    that specific is what the query asks for, however far its memory is by meaning)."""
    if not stores or limit <= 0:
        return {}, set()
    identifiers, words = affordable(conn, *query_items(text), camel)
    if not identifiers and not words:
        return {}, set()
    marks = ", ".join("?" * len(stores))
    weights = [WORDS_WEIGHT, PARTS_WEIGHT]
    if camel:
        weights.append(CAMEL_WEIGHT if camel_weight is None else camel_weight)
    columns = ", ".join("?" * len(weights))
    # CROSS JOIN: the index drives; the other order re-runs the match for every row.
    rows = conn.execute(
        f"SELECT d.store, d.slug, -bm25({FTS_TABLE}, {columns}) AS score "
        f"FROM {FTS_TABLE} CROSS JOIN {DOCS_TABLE} AS d ON d.doc = {FTS_TABLE}.rowid "
        f"WHERE {FTS_TABLE} MATCH ? AND d.store IN ({marks}) ORDER BY score DESC LIMIT ?",
        (*weights, _expression(identifiers, words, camel), *stores, limit),
    )
    hits = {(store, slug): float(score) for store, slug, score in rows if score > 0}
    exact: set[tuple[str, str]] = set()
    for identifier in identifiers:
        found = conn.execute(
            f"SELECT d.store, d.slug FROM {FTS_TABLE} "
            f"CROSS JOIN {DOCS_TABLE} AS d ON d.doc = {FTS_TABLE}.rowid "
            f"WHERE {FTS_TABLE} MATCH ? AND d.store IN ({marks}) LIMIT ?",
            (identifier.whole, *stores, EXACT_MAX_MATCHES + 1),
        ).fetchall()
        if len(found) <= EXACT_MAX_MATCHES:
            exact.update((store, slug) for store, slug in found)
    return hits, exact


def lexical_hits(
    conn: sqlite3.Connection, stores: Sequence[str], text: str, limit: int = HIT_LIMIT
) -> dict[tuple[str, str], float]:
    """The hits of ``evidence``: the best ``limit`` memories by BM25 (with column ``camel``
    when the index has it)."""
    return evidence(conn, stores, text, limit, camel=has_camel(conn))[0]


def lifts(
    hits: dict[tuple[str, str], float],
    exact: set[tuple[str, str]] | frozenset[tuple[str, str]] = frozenset(),
    weight: float = LEXICAL_WEIGHT,
    exact_lift: float = EXACT_LIFT,
) -> dict[tuple[str, str], float]:
    """What each memory adds to its cosine for ranking: ``weight`` × its BM25 over the
    query's best (per query, over the scope's stores), plus ``EXACT_LIFT`` for an exact
    match of a specific identifier."""
    best = max(hits.values(), default=0.0)
    lifted = {key: weight * score / best for key, score in hits.items()} if best > 0 else {}
    for key in exact:
        lifted[key] = lifted.get(key, 0.0) + exact_lift
    return lifted
