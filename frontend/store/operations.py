"""The operations the tools, CLI and UI ask of the database, as one interface per part.

``MemoryOperations`` (memories: remember, recall/search, list, show, forget, duplicates,
hygiene counts, pending embeddings, code anchors), ``EngineOperations`` (one engine's predictions or
behaviors) and ``ChatOperations`` (sessions and messages) are ``typing.Protocol``s: the
SQLite classes (``memory_store.Store``, ``engine_store.EngineStore``,
``chat_store.ChatStore``) implement them, and a second backend implements the same.
``StoreBackend`` is what a caller holds: the memory operations, and the engine and chat
stores over the same database (``engines``, ``chat``).

Not part of the interface: the SQLite connection (``conn``) and lock the UI's page queries
and the lenient text decoding (``db.read_leniently``) still use (docs/architecture.md
§the-database-core).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from thatch.frontend.store.anchor_queries import HYGIENE_ROWS, Anchor, Key
from thatch.frontend.store.chat_rows import ChatMessage, ChatSession, Refusal, TailRead
from thatch.frontend.store.duplicates import (
    CLUSTER_PAIRS,
    PAGE_CLUSTERS,
    DuplicatePage,
    DuplicateProgress,
    DuplicateSummary,
)
from thatch.frontend.store.engine_rows import (
    AUTO_FIRE_THRESHOLD,
    DEDUP_THRESHOLD,
    Engine,
    Item,
    Listed,
    Lookup,
    Recorded,
    Scored,
    SeedPlan,
)
from thatch.frontend.store.memory import (
    DUPLICATE_THRESHOLD,
    DuplicatePair,
    Match,
    Memory,
    RememberOutcome,
)
from thatch.frontend.timefmt import Clock

__all__ = ["ChatOperations", "EngineOperations", "MemoryOperations", "StoreBackend"]


class MemoryOperations(Protocol):
    """Memories (docs/database.md §memory-operations, §hygiene-queries, §pending-embeddings)."""

    clock: Clock

    # -- stores
    def store_names(self) -> list[str]: ...
    def store_counts(self) -> dict[str, int]: ...
    def store_exists(self, name: str) -> bool: ...

    # -- writes
    def remember(
        self,
        store: str,
        label: str,
        stored_text: str,
        vector: Any | None,
        model: str | None,
        *,
        branch: str | None = None,
        confidence: int | None = None,
        overwrite: bool = False,
        archived: bool | None = None,
        anchors: Sequence[Anchor] = (),
        related: Sequence[str] = (),
    ) -> RememberOutcome: ...
    def forget(self, store: str, label: str) -> Memory | None: ...
    def mark_checked(self, store: str, slug_a: str, slug_b: str, status: str) -> None: ...

    # -- reads and ranking
    def list(self, store: str) -> list[Memory]: ...
    def show(self, store: str, label: str) -> Memory | None: ...
    def find_similar(
        self,
        store: str,
        vector: Any,
        *,
        threshold: float = DUPLICATE_THRESHOLD,
        limit: int = 3,
        exclude_slug: str | None = None,
    ) -> builtins.list[Match]: ...
    def search(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> builtins.list[Match]: ...
    def recall(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
        floor: float | None = None,
    ) -> builtins.list[Match]: ...
    def stamp_recalls(self, matches: Sequence[Match], at: str | None = None) -> None: ...

    # -- code anchors (docs/database.md §code-anchors)
    def anchors_of(self, keys: Iterable[Key]) -> dict[Key, builtins.list[Anchor]]: ...
    def supplements_of(self, keys: Iterable[Key]) -> dict[Key, builtins.list[tuple[str, str]]]: ...
    def related_of(self, keys: Iterable[Key]) -> dict[Key, builtins.list[tuple[str, str]]]: ...
    def stores_holding(self, slug: str) -> builtins.list[str]: ...
    def anchored_in(
        self, store: str, limit: int = HYGIENE_ROWS
    ) -> dict[str, builtins.list[Anchor]]: ...
    def set_anchor_status(self, verdicts: Sequence[tuple[Anchor, str]]) -> None: ...
    def anchor_commits(self) -> builtins.list[tuple[str, str]]: ...
    def remember_worktree(self, root: str, main: str, store: str) -> None: ...

    def worktree_mains(self, roots: Iterable[str]) -> dict[str, str]: ...

    def gone_asked(self, top: str, head: str) -> set[str]: ...
    def anchor_files(
        self, taken: Mapping[str, Sequence[str]]
    ) -> builtins.list[tuple[str, str, str, str]]: ...
    def reroot_anchors(
        self,
        files: Sequence[tuple[str, str, str, str]],
        top: str,
        head: str,
        asked: Iterable[str],
        strangers: Iterable[str] = (),
    ) -> int: ...
    def move_anchors(
        self,
        root: str,
        head: str,
        committed: Mapping[str, Sequence[tuple[str, str]]],
        staged: Sequence[tuple[str, str]] | None,
    ) -> int: ...

    # -- duplicate candidates
    def check_all_duplicates(
        self, store: str, *, deadline: float | None = None, up_to: int | None = None
    ) -> DuplicateProgress: ...
    def duplicate_progress(self, store: str, *, up_to: int | None = None) -> DuplicateProgress: ...
    def duplicate_summary(
        self, store: str, threshold: float = DUPLICATE_THRESHOLD, *, up_to: int | None = None
    ) -> DuplicateSummary: ...
    def duplicate_page(
        self,
        store: str,
        threshold: float = DUPLICATE_THRESHOLD,
        *,
        offset: int = 0,
        clusters: int = PAGE_CLUSTERS,
        pairs_per_cluster: int = CLUSTER_PAIRS,
        up_to: int | None = None,
    ) -> DuplicatePage: ...
    def find_duplicates(
        self, store: str, threshold: float = DUPLICATE_THRESHOLD
    ) -> builtins.list[DuplicatePair]: ...
    def duplicate_count(self, store: str, threshold: float = DUPLICATE_THRESHOLD) -> int: ...

    # -- hygiene counts, pending embeddings and re-embedding
    def stale_count(
        self, store: str, now: datetime | None = None, *, up_to: int | None = None
    ) -> int: ...
    def branches_in_store(self, store: str) -> builtins.list[str]: ...
    def count_for_branches(self, store: str, branches: Sequence[str]) -> int: ...
    def live_counts_on(self, store: str, branches: Sequence[str]) -> dict[str, int]: ...
    def model_mismatch_count(
        self, store: str, active_model: str, *, up_to: int | None = None
    ) -> int: ...
    def pending_count(self, store: str | None = None, *, up_to: int | None = None) -> int: ...
    def pending_count_in(self, stores: Sequence[str], *, up_to: int | None = None) -> int: ...
    def pending_memories(
        self, *, limit: int = 32, store: str | None = None
    ) -> builtins.list[Memory]: ...
    def reembed_candidates(
        self, active_model: str, *, store: str | None = None, missing_only: bool = False
    ) -> builtins.list[Memory]: ...
    def fill_embedding(self, memory: Memory, vector: Any, model: str) -> bool: ...
    def fill_backlog(self, stop: threading.Event) -> None: ...


class EngineOperations(Protocol):
    """One engine's predictions or behaviors (docs/engines.md)."""

    engine: Engine

    def item(self, item_id: str) -> Item | None: ...
    def lookup(
        self, stores: Sequence[str] | str, vector: Any, threshold: float = DEDUP_THRESHOLD
    ) -> Lookup: ...
    def match(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        threshold: float = AUTO_FIRE_THRESHOLD,
        *,
        auto_fire: bool = False,
    ) -> list[Scored]: ...
    def listing(self, stores: Sequence[str] | str) -> list[Listed]: ...
    def stamped(self, store: str, marker: str) -> list[Item]: ...
    def record(
        self,
        store: str,
        *,
        matcher: str,
        matcher_vector: Any,
        statement: str,
        statement_vector: Any,
        model: str,
        signal: str,
        rationale: str | None,
        detail: str | None = None,
    ) -> Recorded: ...
    def signal_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        signal: str,
        detail: str | None,
        threshold: float = DEDUP_THRESHOLD,
    ) -> Lookup: ...
    def delete_nearest(
        self,
        stores: Sequence[str] | str,
        vector: Any,
        threshold: float = DEDUP_THRESHOLD,
        *,
        switch_off: Callable[[Item], str | None] | None = None,
    ) -> Lookup: ...
    def delete(
        self, item_id: str, *, switch_off: Callable[[Item], str | None] | None = None
    ) -> Item | None: ...
    def defaults_off(self) -> set[str]: ...
    def switch_default(self, key: str, *, on: bool) -> bool: ...
    def seed(self, store: str, plan: SeedPlan, marker: str) -> bool: ...
    def embedding_counts(
        self, active_model: str, *, up_to: int | None = None
    ) -> tuple[int, int]: ...
    def reembed_candidates(
        self, active_model: str, *, missing_only: bool = False, store: str | None = None
    ) -> list[tuple[str, str, str]]: ...
    def set_vector(self, table: str, row_id: str, text: str, vector: Any, model: str) -> bool: ...


class ChatOperations(Protocol):
    """Chat between sessions (docs/chat.md)."""

    @property
    def clock(self) -> Clock: ...

    # -- sessions and binding
    def get(self, session_id: str) -> ChatSession | None: ...
    def by_name(self, name: str) -> ChatSession | None: ...
    def sessions(self) -> list[ChatSession]: ...
    def anchor(
        self,
        session_id: str,
        *,
        project: str,
        host_kind: str,
        worktree: str,
        key: str | None = None,
    ) -> ChatSession | None: ...
    def register_server(
        self, *, project: str, host_kind: str, worktree: str, key: str | None = None
    ) -> ChatSession: ...
    def ensure_person(self, session_id: str, *, project: str, worktree: str) -> ChatSession: ...
    def host_key(self, host_session: str) -> str: ...
    def holds(self, session_id: str, key: str) -> bool: ...
    def touch(self, session_id: str) -> None: ...
    def set_topic(self, session_id: str, topic: str | None) -> None: ...
    def unregister(self, session_id: str) -> None: ...
    def prune(self, *, task: str = "prune") -> bool: ...

    # -- messages and delivery
    def send(self, from_session: str, to_session: str, parts: Sequence[str]) -> bool: ...
    def broadcast(
        self, from_session: str, to_sessions: Sequence[str], parts: Sequence[str]
    ) -> None: ...
    def unread_count(self, session_id: str) -> int: ...
    def read_unread(
        self,
        session_id: str,
        take: Callable[[Sequence[ChatMessage]], int] | None = None,
        prefix: int | None = None,
        tell: Callable[[list[Refusal]], None] | None = None,
    ) -> tuple[list[ChatMessage], int]: ...
    def message(self, message_id: int) -> ChatMessage | None: ...
    def mark_read(self, message_id: int) -> None: ...
    def wake_telling(
        self, session_id: str
    ) -> tuple[list[Refusal], tuple[int, list[str]] | None]: ...

    # -- the tail
    def messages_after(self, after_id: int, limit: int | None = None) -> list[ChatMessage]: ...
    def read_among(self, ids: Sequence[int]) -> list[TailRead]: ...
    def names(self) -> dict[str, str]: ...


class StoreBackend(MemoryOperations, Protocol):
    """A database as the tools hold it: its memories, and its engines and chat."""

    def engines(self, engine: Engine) -> EngineOperations: ...
    def chat(self) -> ChatOperations: ...
    def close(self) -> None: ...


if TYPE_CHECKING:  # the SQLite classes implement the interface (mypy checks it here)
    from thatch.frontend.store.chat_store import ChatStore
    from thatch.frontend.store.engine_store import EngineStore
    from thatch.frontend.store.memory_store import Store

    def _sqlite_implements(
        store: Store, engines: EngineStore, chat: ChatStore
    ) -> tuple[StoreBackend, EngineOperations, ChatOperations]:
        return store, engines, chat
