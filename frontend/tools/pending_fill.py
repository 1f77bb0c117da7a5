"""Embedding memories from their stored text: the one component that fills embeddings.

Pending memories (saved while the embedder was unreachable) and memories tagged with
another model than the active one are embedded again from ``content`` — the exact text
that was embedded originally — and written with a compare-and-set on ``updated_at`` and
the text, so a memory changed meanwhile is skipped rather than given a stale vector.

Every fill goes through ``PendingFill.fill``:
- ``thatch reembed`` fills its plan now, batch by batch, with progress;
- ``find_duplicates`` fills a store's pending memories now (``fill_store``): it compares
  vectors, so it needs them all;
- ``remember`` and ``recall`` only ``schedule`` an opportunistic pass (the 32 oldest
  pending memories) once one of their Embed calls succeeded, so the embedder is up. A
  long-lived ``thatch mcp`` runs passes on its background thread (``start``); a one-shot
  CLI process runs a scheduled pass when its ToolContext closes, after the answer is out.
  Recall never waits for a fill: until a pass ran, pending memories are counted under its
  results as not indexed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from thatch.embedder.client.errors import EmbedRequestError
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.memory import Memory
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.embedding import Embedder

__all__ = [
    "BATCH",
    "OPPORTUNISTIC_LIMIT",
    "FillSource",
    "FillSummary",
    "PendingFill",
    "Progress",
    "embed_stored_texts",
]


class FillSource(Protocol):
    """What a fill reads at each use: ``ToolContext`` is one."""

    store: Store
    embedder: Embedder
    embed_timeout: float
    start_wait: float


BATCH = 32
OPPORTUNISTIC_LIMIT = 32

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class FillSummary:
    filled: int
    changed: int  # embedded, but the row changed meanwhile: not written
    refused: list[Memory]  # texts the embedder refuses: still pending

    @property
    def skipped(self) -> int:
        return self.changed + len(self.refused)


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


class PendingFill:
    """Fills embeddings for one ToolContext: now (``fill``, ``fill_store``) or later
    (``schedule``). Reads the context's Store and embedder at each use."""

    def __init__(self, ctx: FillSource) -> None:
        self._ctx = ctx
        self._state = threading.Condition()
        self._scheduled = False
        self._running = False
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- filling now -------------------------------------------------------------------

    def fill(
        self,
        memories: Sequence[Memory],
        *,
        batch: int = BATCH,
        timeout: float,
        start_wait: float,
        progress: Progress | None = None,
    ) -> FillSummary:
        """Embed ``memories`` in batches of ``batch`` texts; raises EmbedderUnavailable."""
        store, embedder = self._ctx.store, self._ctx.embedder
        filled = changed = 0
        refused: list[Memory] = []
        total = len(memories)
        for offset in range(0, total, batch):
            chunk = memories[offset : offset + batch]
            pairs, model_id, rejected = embed_stored_texts(
                embedder, chunk, timeout=timeout, start_wait=start_wait
            )
            refused += rejected
            for memory, vector in pairs:
                if store.fill_embedding(memory, vector, model_id):
                    filled += 1
                else:
                    changed += 1
            if progress:
                progress(offset + len(chunk), total)
        return FillSummary(filled, changed, refused)

    def fill_store(self, store: str) -> None:
        """Every pending memory of ``store``; raises EmbedderUnavailable when needed.

        Rows the embedder refuses stay pending (and are not asked for again here).
        """
        ctx = self._ctx
        refused: set[tuple[str, str]] = set()
        while True:
            pending = [
                memory
                for memory in ctx.store.pending_memories(limit=BATCH + len(refused), store=store)
                if (memory.slug, memory.store) not in refused
            ]
            if not pending:
                return
            summary = self.fill(
                pending, batch=len(pending), timeout=ctx.embed_timeout, start_wait=ctx.start_wait
            )
            refused.update((memory.slug, memory.store) for memory in summary.refused)
            if not summary.filled and not summary.refused:  # every row changed meanwhile
                return

    def fill_opportunistically(self) -> int:
        """Up to 32 pending memories, oldest first, without waiting for an embedder to
        start; any failure is ignored (the next pass tries again)."""
        ctx = self._ctx
        try:
            pending = ctx.store.pending_memories(limit=OPPORTUNISTIC_LIMIT)
            return self.fill(pending, timeout=ctx.embed_timeout, start_wait=0).filled
        except Exception:  # opportunistic: nobody's answer depends on it
            return 0

    # -- filling later -----------------------------------------------------------------

    def schedule(self) -> None:
        """Ask for one opportunistic pass; returns at once. Requests coalesce."""
        with self._state:
            self._scheduled = True
            self._state.notify_all()

    def start(self) -> None:
        """Run scheduled passes on a background thread from now on (a long-lived server)."""
        with self._state:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._serve, name="thatch-pending-fill", daemon=True
            )
            self._thread.start()

    def run_scheduled(self) -> int:
        """Run a scheduled pass now, in this thread; the memories filled (0 if none asked)."""
        with self._state:
            if not self._scheduled:
                return 0
            self._scheduled = False
            self._running = True
        try:
            return self.fill_opportunistically()
        finally:
            self._finished()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no pass is scheduled or running (the background thread's work done)."""
        with self._state:
            return self._state.wait_for(
                lambda: not (self._scheduled or self._running), timeout=timeout
            )

    def close(self) -> None:
        """Stop the background thread after its current pass; without one, run the pass
        still scheduled (a CLI command's, now that its answer is out)."""
        with self._state:
            self._closed = True
            thread = self._thread
            self._state.notify_all()
        if thread is not None:
            thread.join()
            with self._state:
                self._scheduled = False  # nobody runs it now
        else:
            self.run_scheduled()

    def _serve(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._scheduled or self._closed)
                if self._closed:
                    return
                self._scheduled = False
                self._running = True
            try:
                self.fill_opportunistically()
            finally:
                self._finished()

    def _finished(self) -> None:
        with self._state:
            self._running = False
            self._state.notify_all()
