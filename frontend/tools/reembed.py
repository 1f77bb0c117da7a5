"""Re-embedding memories from their stored text (store.md §9).

Pending memories (saved while the embedder was unreachable) and memories tagged with
another model than the active one are embedded again from ``content`` — the exact text
that was embedded originally — and written with a compare-and-set on ``updated_at``, so
a memory changed meanwhile is skipped rather than overwritten with a stale vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from thatch.embedder.encoder import Kind
from thatch.embedder.errors import EmbedRequestError
from thatch.frontend.store.memory_store import Memory, Store
from thatch.frontend.tools.context import Embedder

REEMBED_TIMEOUT_S = 120.0
OPPORTUNISTIC_LIMIT = 32


@dataclass(frozen=True)
class ReembedPlan:
    memories: list[Memory]

    @property
    def stores(self) -> list[str]:
        return sorted({memory.store for memory in self.memories})


@dataclass(frozen=True)
class ReembedSummary:
    reembedded: int
    skipped: int


def embed_stored_texts(
    embedder: Embedder, memories: Sequence[Memory], *, timeout: float, start_wait: float
) -> tuple[list[tuple[Memory, npt.NDArray[np.float32]]], str, list[Memory]]:
    """Passage vectors of the memories' stored texts: ``(pairs, model_id, refused)``.

    A text the embedder refuses (a legacy row that is empty or over its length limit)
    must not block the rows around it forever: a refused batch is retried one by one and
    the refused rows are returned apart. Outages (EmbedderUnavailable) propagate.
    """
    if not memories:
        return [], "", []
    try:
        result = embedder.embed(
            [memory.content for memory in memories],
            Kind.PASSAGE,
            timeout=timeout,
            start_wait=start_wait,
        )
    except EmbedRequestError:
        if len(memories) == 1:
            return [], "", list(memories)
        pairs: list[tuple[Memory, npt.NDArray[np.float32]]] = []
        refused: list[Memory] = []
        model_id = ""
        for memory in memories:
            one, one_model, one_refused = embed_stored_texts(
                embedder, [memory], timeout=timeout, start_wait=start_wait
            )
            pairs += one
            refused += one_refused
            model_id = one_model or model_id
        return pairs, model_id, refused
    return list(zip(memories, result.vectors, strict=True)), result.model_id, []


def plan_reembed(
    store: Store, active_model: str, *, store_name: str | None = None, missing_only: bool = False
) -> ReembedPlan:
    return ReembedPlan(
        store.reembed_candidates(active_model, store=store_name, missing_only=missing_only)
    )


def run_reembed(
    store: Store,
    embedder: Embedder,
    plan: ReembedPlan,
    *,
    batch: int = 32,
    start_wait: float = 120.0,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedSummary:
    """Embed ``plan`` in batches of ``batch`` texts; raises EmbedderUnavailable."""
    done = skipped = 0
    total = len(plan.memories)
    for offset in range(0, total, batch):
        chunk = plan.memories[offset : offset + batch]
        pairs, model_id, refused = embed_stored_texts(
            embedder, chunk, timeout=REEMBED_TIMEOUT_S, start_wait=start_wait
        )
        skipped += len(refused)
        for memory, vector in pairs:
            if store.fill_embedding(memory, vector, model_id):
                done += 1
            else:
                skipped += 1
        if progress:
            progress(offset + len(chunk), total)
    return ReembedSummary(done, skipped)


def fill_pending_opportunistically(store: Store, embedder: Embedder, *, timeout: float) -> int:
    """Fill up to 32 pending memories, oldest first; any failure is ignored.

    Called by frontends (never hooks) right after one of their Embed calls succeeded,
    so the embedder is known to be up and this costs one more request at most.
    """
    try:
        pending = store.pending_memories(limit=OPPORTUNISTIC_LIMIT)
        pairs, model_id, _refused = embed_stored_texts(
            embedder, pending, timeout=timeout, start_wait=0
        )
        return sum(store.fill_embedding(memory, vector, model_id) for memory, vector in pairs)
    except Exception:  # opportunistic: the caller's answer must not depend on it
        return 0
