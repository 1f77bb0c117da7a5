"""What ``thatch reembed`` re-embeds (docs/database.md §pending-embeddings);
``pending_fill.PendingFill`` fills it.

Pending memories (saved while the embedder was unreachable) and memories tagged with
another model than the active one are embedded again from their stored text; so are the
engines' matchers and items (``plan_engine_reembed``), which this module embeds itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from thatch.embedder.client.kind import Kind
from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, Engine
from thatch.frontend.store.memory_store import Memory, Store
from thatch.frontend.tools.context import Embedder

__all__ = [
    "REEMBED_TIMEOUT_S",
    "EngineRow",
    "ReembedPlan",
    "plan_engine_reembed",
    "plan_reembed",
    "reembed_engine_rows",
]

REEMBED_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ReembedPlan:
    memories: list[Memory]

    @property
    def stores(self) -> list[str]:
        return sorted({memory.store for memory in self.memories})


def plan_reembed(
    store: Store, active_model: str, *, store_name: str | None = None, missing_only: bool = False
) -> ReembedPlan:
    return ReembedPlan(
        store.reembed_candidates(active_model, store=store_name, missing_only=missing_only)
    )


@dataclass(frozen=True)
class EngineRow:
    """One matcher or item of an engine to embed again from its text (engines.md §1)."""

    engine: Engine
    table: str
    id: str
    text: str


def plan_engine_reembed(
    store: Store, active_model: str, *, store_name: str | None = None, missing_only: bool = False
) -> list[EngineRow]:
    """Engine matchers and items not embedded, or (unless ``missing_only``) embedded with
    another model than ``active_model``."""
    rows: list[EngineRow] = []
    for engine in (PREDICTIONS, BEHAVIORS):
        engines = store.engines(engine)
        candidates = engines.reembed_candidates(
            active_model, missing_only=missing_only, store=store_name
        )
        rows += [EngineRow(engine, table, row_id, text) for table, row_id, text in candidates]
    return rows


def reembed_engine_rows(
    store: Store,
    embedder: Embedder,
    rows: Sequence[EngineRow],
    *,
    batch: int = 32,
    timeout: float = REEMBED_TIMEOUT_S,
    start_wait: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Embed ``rows`` again (passage, raw text) in batches; (re-embedded, skipped: changed
    meanwhile). The model tag written is the one each Embed response carries."""
    done = skipped = 0
    for start in range(0, len(rows), max(1, batch)):
        chunk = rows[start : start + max(1, batch)]
        result = embedder.embed(
            [row.text for row in chunk], Kind.PASSAGE, timeout=timeout, start_wait=start_wait
        )
        for row, vector in zip(chunk, result.vectors, strict=True):
            engines = store.engines(row.engine)
            if engines.set_vector(row.table, row.id, row.text, vector, result.model_id):
                done += 1
            else:
                skipped += 1
        if progress is not None:
            progress(start + len(chunk), len(rows))
    return done, skipped
