"""The reads the tool layer has no operation for: a page of a store's memories, newest
first, filtered by branch and archived state, with the total (counted up to 10,000); the
branch filter's choices; a store's archived count; every store with its memories counted
up to 10,000.

``Store.list`` returns every memory with its text (80-100 ms at 10,000); a page needs 100.
This reads through the Store's own connection, lock and row mapping (``rows.COLUMNS``,
``memory_from_row``), never writes, and walks the order's index (m022) for the page's
rowids before fetching its rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from thatch.frontend.store.memory import Memory
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.migrations.flat_reads import (
    CREATED_ROWS,
    LABELLED_ROWS,
    RECALLED_ROWS,
    UPDATED_ROWS,
)
from thatch.frontend.store.rows import COLUMNS, memory_from_row
from thatch.frontend.store.transactions import atomic

__all__ = [
    "BRANCH_CHOICES",
    "COUNTED_UP_TO",
    "SORTS",
    "MemoryPage",
    "StoreSize",
    "archived_count",
    "branch_choices",
    "newest_page",
    "store_sizes",
]

# The Memories page's sort choices: (ORDER BY, how the page says it). Every order ends
# with slug so that pages never overlap or skip rows. _INDEXED_BY: the column whose
# partial index (migrations/flat_reads.py) serves each.
SORTS: dict[str, tuple[str, str]] = {
    "newest": ("created_at DESC, slug DESC", "newest first"),
    "oldest": ("created_at ASC, slug ASC", "oldest first"),
    "updated": ("updated_at DESC, slug DESC", "recently updated first"),
    "recalled": ("recall_count DESC, last_recalled_at DESC, slug DESC", "most recalled first"),
    "label": ("label, slug", "by label"),  # as memory_list and thatch list order
}
_INDEXED_BY = {
    "newest": CREATED_ROWS,
    "oldest": CREATED_ROWS,
    "updated": UPDATED_ROWS,
    "recalled": RECALLED_ROWS,
    "label": LABELLED_ROWS,
}
ORDER = SORTS["newest"][0]


# Past this many matching memories a page says "more than" instead of counting on: an
# exact count reads every row of the store (80 ms at 100k), a page only its 100.
COUNTED_UP_TO = 10_000


@dataclass(frozen=True)
class MemoryPage:
    memories: list[Memory]
    total: int  # matching the filters, all pages, up to COUNTED_UP_TO
    more: bool  # more than ``total`` match (counting stopped)
    next_page: bool  # rows follow this page


def newest_page(
    store: Store,
    name: str,
    *,
    branch: str | None,
    archived: str,
    offset: int,
    limit: int,
    sort: str = "newest",
) -> MemoryPage:
    """``archived``: "live" (not archived), "archived" (only archived) or "all"; ``sort``
    one of SORTS (KeyError otherwise: the caller checks what it was given)."""
    order = SORTS[sort][0]
    conditions = ["store = ?"]
    # Always true; it lets SQLite use the order's partial index (migrations/flat_reads.py).
    # Archived memories are read through their own index instead (usually a few), and a
    # branch's through the branch index (a walk of the store's order would read every row
    # to find a branch's three) unless the branch holds over 10,000 (below).
    walk = _INDEXED_BY[sort] if archived != "archived" else None
    if walk and branch is None:
        conditions.append(walk)
    params: list[object] = [name]
    if branch is not None:
        conditions.append("branch = ?")
        params.append(branch)
    if archived == "live":
        conditions.append("archived = 0")
    elif archived == "archived":
        conditions.append("archived != 0")
    where = " AND ".join(conditions)
    # One snapshot: the walk's rowids are fetched after it, and a rowid freed meanwhile
    # could be another store's new row.
    with store.lock, atomic(store.conn, immediate=False):
        (counted,) = store.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM entries WHERE {where} LIMIT ?)",
            [*params, COUNTED_UP_TO + 1],
        ).fetchone()
        found = None
        if walk and branch is not None and counted > COUNTED_UP_TO:
            found = _walked(store, name, walk, order, branch, archived, offset + limit + 1)
        # One row past the page says whether another follows. The index m022 made for
        # each order serves the inner query: it reads the page's rows, not the store's.
        if found is None:
            rows = store.conn.execute(
                f"SELECT {COLUMNS} FROM entries WHERE rowid IN (SELECT rowid FROM entries "
                f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?) ORDER BY {order}",
                [*params, limit + 1, offset],
            ).fetchall()
        else:
            wanted = found[offset:]
            marks = ", ".join("?" * len(wanted))
            rows = store.conn.execute(
                f"SELECT {COLUMNS} FROM entries WHERE rowid IN ({marks}) ORDER BY {order}",
                wanted,
            ).fetchall()
    return MemoryPage(
        [memory_from_row(row) for row in rows[:limit]],
        min(int(counted), COUNTED_UP_TO),
        more=int(counted) > COUNTED_UP_TO,
        next_page=len(rows) > limit,
    )


# A branch of over 10,000 memories is paged by walking the store's order up to this many
# times as far as the page reaches, when that finds it (the branch is most of its store):
# sorting a branch of 98,000 took 0.1-0.3 s a page, now 7-29 ms. A big branch sparse in
# a bigger store is sorted as before, after a walk of at most 20,000 rows.
_WALK_REACH = 2
_WALK_AT_MOST = 20_000


def _walked(
    store: Store, name: str, walk: str, order: str, branch: str, archived: str, reach: int
) -> list[int] | None:
    """The rowids of the branch's first ``reach`` memories in the page's order, read from
    the order's index, or None when they are not all among its first rows."""
    if reach * _WALK_REACH > _WALK_AT_MOST:
        return None  # a deep page: the walk could not reach it, the sort will
    found: list[int] = []
    rows = store.conn.execute(
        f"SELECT rowid, branch, archived FROM entries WHERE store = ? AND {walk} "
        f"ORDER BY {order} LIMIT ?",
        (name, reach * _WALK_REACH),
    )
    try:
        for rowid, on, flag in rows:  # streamed: a dense branch stops at its page
            if on == branch and (archived == "all" or flag == 0):
                found.append(rowid)
                if len(found) == reach:
                    return found
    finally:
        rows.close()
    return None


def archived_count(store: Store, name: str) -> int:
    """How many of a store's memories are archived (m022's partial index: no scan)."""
    with store.lock:
        (count,) = store.conn.execute(
            "SELECT count(*) FROM entries WHERE store = ? AND archived != 0", (name,)
        ).fetchone()
    return int(count)


# A branch filter offers a list up to this many branches, a text box past it: a store
# with 20,000 branches made every Memories page 1.3 MB of options.
BRANCH_CHOICES = 200


def branch_choices(store: Store, name: str) -> list[str] | None:
    """The store's branches, in order, or None when there are more than BRANCH_CHOICES."""
    with store.lock:
        rows = store.conn.execute(
            "SELECT DISTINCT branch FROM entries WHERE store = ? AND branch IS NOT NULL "
            "ORDER BY branch LIMIT ?",
            (name, BRANCH_CHOICES + 1),
        ).fetchall()
    return None if len(rows) > BRANCH_CHOICES else [row[0] for row in rows]


@dataclass(frozen=True)
class StoreSize:
    memories: int  # up to COUNTED_UP_TO
    more: bool  # more than ``memories`` (counting stopped)


CREATED_INDEX = "thatch_entries_created"  # m022's, on (store, created_at, slug)

# The stores with memories, found by stepping from one store to the next along the
# created-rows index (m022), then the stores only named: a few index seeks per store,
# where DISTINCT read the whole table's key index.
_STORE_NAMES = (
    "WITH RECURSIVE named(store) AS ("
    f"SELECT (SELECT store FROM entries WHERE {CREATED_ROWS} ORDER BY store LIMIT 1) "
    "UNION ALL "
    f"SELECT (SELECT e.store FROM entries e WHERE e.{CREATED_ROWS} AND e.store > named.store "
    "ORDER BY e.store LIMIT 1) FROM named WHERE named.store IS NOT NULL) "
    "SELECT store FROM named WHERE store IS NOT NULL UNION SELECT name FROM stores ORDER BY 1"
)


def store_sizes(store: Store) -> dict[str, StoreSize]:
    """Every store, by name, with its memories counted up to COUNTED_UP_TO, each count
    along the created-rows index: ``Store.store_counts`` counts every row of the table
    (24 ms at 100k memories, at every visit of the Stores page)."""
    sizes = {}
    with store.lock, atomic(store.conn, immediate=False):
        indexed = store.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (CREATED_INDEX,)
        ).fetchone()
        if indexed is None:
            # A file read with its own older schema (read-only, not migrated): without the
            # index each step is a scan and a sort (1.6 s at 100k against 35 ms whole).
            return {
                name: StoreSize(min(count, COUNTED_UP_TO), count > COUNTED_UP_TO)
                for name, count in store.store_counts().items()
            }
        names = [row[0] for row in store.conn.execute(_STORE_NAMES)]
        for name in names:
            (counted,) = store.conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM entries "
                f"WHERE store = ? AND {CREATED_ROWS} LIMIT ?)",
                (name, COUNTED_UP_TO + 1),
            ).fetchone()
            sizes[name] = StoreSize(min(int(counted), COUNTED_UP_TO), int(counted) > COUNTED_UP_TO)
    return sizes
