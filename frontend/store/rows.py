"""Shared pieces of the Store's SQL: row predicates, the memory column list, argument checks."""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

import numpy as np

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.store.memory import Memory

__all__ = [
    "COLUMNS",
    "MISSING",
    "USABLE",
    "counted",
    "locked",
    "memory_from_row",
    "store_list",
    "store_name",
    "threshold_value",
]

# A usable embedding is a BLOB of 4·k bytes, k > 0; anything else counts as missing.
USABLE = "(typeof(embedding) = 'blob' AND length(embedding) > 0 AND length(embedding) % 4 = 0)"
MISSING = f"(NOT {USABLE})"
COLUMNS = (
    "slug, store, label, content, model, branch, confidence, archived, created_at, "
    f"updated_at, recall_count, last_recalled_at, CASE WHEN {USABLE} "
    "THEN length(embedding) / 4 END"
)


class Lockable(Protocol):
    _lock: threading.RLock


S = TypeVar("S", bound=Lockable)
P = ParamSpec("P")
R = TypeVar("R")


def locked(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Serialise calls: one connection, possibly shared by a server's worker threads."""

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    # mypy does not equate functools.wraps' _Wrapped[[S, **P], ...] with Concatenate[S, P].
    return cast("Callable[Concatenate[S, P], R]", wrapper)


def memory_from_row(row: Sequence[Any]) -> Memory:
    """A Memory from the first 13 values of a ``SELECT {COLUMNS}`` row."""
    return Memory(
        slug=row[0],
        store=row[1],
        label=row[2],
        content=row[3],
        model=row[4],
        branch=row[5],
        confidence=row[6],
        archived=bool(row[7]),
        created_at=row[8],
        updated_at=row[9],
        recall_count=int(row[10] or 0),
        last_recalled_at=row[11],
        dim=row[12],
    )


def store_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidInputError("store name must be a non-empty string")
    return name


def store_list(stores: Sequence[str] | str) -> list[str]:
    """Distinct store names in order; a bare string counts as one name."""
    names = [stores] if isinstance(stores, str) else list(stores)
    return list(dict.fromkeys(store_name(name) for name in names))


def threshold_value(value: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError("threshold must be a number") from None
    if not np.isfinite(number):
        raise InvalidInputError("threshold must be a finite number")
    return number


def counted(conn: sqlite3.Connection, rows: str, params: Sequence[Any], up_to: int | None) -> int:
    """``SELECT count(*) <rows>``, or of its first ``up_to + 1`` rows (the last says "more"):
    a count shown before a model stops there, flat in the store's size."""
    if up_to is None:
        (count,) = conn.execute(f"SELECT count(*) {rows}", tuple(params)).fetchone()
    else:
        (count,) = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 {rows} LIMIT ?)", (*params, up_to + 1)
        ).fetchone()
    return int(count)
