"""The one read the tool layer has no operation for: a page of a store's memories, newest
first, filtered by branch and archived state, with the total.

``Store.list`` returns every memory with its text (80-100 ms at 10,000); a page needs 100.
This reads through the Store's own connection, lock and row mapping (``rows.COLUMNS``,
``memory_from_row``), never writes, and sorts only keys before fetching the page's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from thatch.frontend.store.memory import Memory
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.rows import COLUMNS, memory_from_row

__all__ = ["SORTS", "MemoryPage", "newest_page"]

# The Memories page's sort choices: (ORDER BY, how the page says it). Every order ends
# with slug so that pages never overlap or skip rows.
SORTS: dict[str, tuple[str, str]] = {
    "newest": ("created_at DESC, slug DESC", "newest first"),
    "oldest": ("created_at ASC, slug ASC", "oldest first"),
    "updated": ("updated_at DESC, slug DESC", "recently updated first"),
    "recalled": ("recall_count DESC, last_recalled_at DESC, slug", "most recalled first"),
    "label": ("label COLLATE NOCASE, slug", "by label"),
}
ORDER = SORTS["newest"][0]


@dataclass(frozen=True)
class MemoryPage:
    memories: list[Memory]
    total: int  # matching the filters, all pages


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
    params: list[object] = [name]
    if branch is not None:
        conditions.append("branch = ?")
        params.append(branch)
    if archived == "live":
        conditions.append("archived = 0")
    elif archived == "archived":
        conditions.append("archived != 0")
    where = " AND ".join(conditions)
    with store.lock:
        total = int(
            store.conn.execute(f"SELECT count(*) FROM entries WHERE {where}", params).fetchone()[0]
        )
        rows = store.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE rowid IN (SELECT rowid FROM entries "
            f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?) ORDER BY {order}",
            [*params, limit, offset],
        ).fetchall()
    return MemoryPage([memory_from_row(row) for row in rows], total)
