"""What ``thatch reembed`` re-embeds (docs/database.md §pending-embeddings);
``pending_fill.PendingFill`` fills it.

Pending memories (saved while the embedder was unreachable) and memories tagged with
another model than the active one are embedded again from their stored text.
"""

from __future__ import annotations

from dataclasses import dataclass

from thatch.frontend.store.memory_store import Memory, Store

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
