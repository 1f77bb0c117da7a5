"""The store interface (frontend/store/operations.py) and the SQLite classes behind it.

A second backend implements the same Protocols; these tests keep the SQLite classes and the
Protocols saying the same thing (mypy checks the types, in operations.py), and check that
the engine and chat stores a Store hands out share its connection, lock and clock.
"""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from thatch.frontend.store.chat_store import ChatStore
from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, EngineStore
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.operations import (
    ChatOperations,
    EngineOperations,
    MemoryOperations,
    StoreBackend,
)


def members(protocol: type) -> list[str]:
    return sorted(
        name
        for klass in protocol.__mro__
        if klass.__dict__.get("_is_protocol")
        for name in klass.__dict__
        if not name.startswith("_")
    )


@pytest.mark.parametrize(
    ("protocol", "implementation"),
    [
        (MemoryOperations, Store),
        (StoreBackend, Store),
        (EngineOperations, EngineStore),
        (ChatOperations, ChatStore),
    ],
)
def test_each_operation_has_the_same_parameters_in_the_sqlite_class(
    protocol: type, implementation: type
) -> None:
    """Every operation of the interface exists on the SQLite class, with the same
    parameters (names, kinds and defaults): a caller typed against the Protocol calls it
    the same way."""
    names = members(protocol)
    assert "remember" in names or "record" in names or "send" in names
    for name in names:
        declared = inspect.getattr_static(protocol, name)
        present = inspect.getattr_static(implementation, name, None)
        assert present is not None, f"{implementation.__name__} lacks {name}"
        if not callable(declared):
            continue
        wanted = inspect.signature(declared).parameters
        found = inspect.signature(present).parameters
        assert [(p.name, p.kind, p.default) for p in wanted.values()] == [
            (p.name, p.kind, p.default) for p in found.values()
        ], name


def test_the_engine_and_chat_stores_share_the_stores_connection_lock_and_clock(
    tmp_path: Path,
) -> None:
    at = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    with Store.open(tmp_path / "thatch.db", clock=lambda: at) as store:
        engines = store.engines(PREDICTIONS)
        chat = store.chat()
        assert engines.tx.lock is store.lock and chat.tx.lock is store.lock
        assert engines.conn is store.conn and chat.conn is store.conn
        vector = np.ones(4, dtype=np.float32)
        recorded = engines.record(
            "global",
            matcher="when tests run",
            matcher_vector=vector,
            statement="they pass",
            statement_vector=vector,
            model="m",
            signal="create",
            rationale=None,
        )
        assert recorded.item.created_at == "2025-03-04T05:06:07.000Z"
        assert store.engines(BEHAVIORS).listing(["global"]) == []
        assert len(store.engines(PREDICTIONS).listing(["global"])) == 1
        session = chat.ensure_person("person_a", project="p", worktree="")
        assert session.registered_at == "2025-03-04T05:06:07.000Z"
        assert store.chat().get("person_a") == session


def test_every_engine_operation_has_a_caller_outside_the_store() -> None:
    """One way to do each thing: every operation of the engine interface is called by
    thatch's own code (the tools, the CLI, the UI, the team sync), none by the tests alone
    (``nearest_item`` was ``lookup`` without its hint, kept for one test; ``count`` and
    ``signal`` were called by tests only). A call counts on an engine store only: the
    receiver its callers name it by (``engines``, ``engine_store(…)``, ``….engines(E)``),
    never ``text.count(`` or ``signal.signal(``."""
    import re

    root = Path(__file__).resolve().parent.parent
    store = root / "frontend" / "store"
    sources = [
        path.read_text()
        for folder in ("frontend", "cli", "teamsync", "hub")
        for path in (root / folder).rglob("*.py")
        if path.parent != store or path.stem not in {"operations", "engine_store", "engine_upkeep"}
    ]
    receiver = r"(?:\bengines|\bengine_store\([^()]*\)|\.engines\([^()]*\))"
    assert re.search(rf"{receiver}\.count\(", "text.count(x); signal.signal(s)") is None
    for name in members(EngineOperations):
        call = re.compile(rf"{receiver}\.{re.escape(name)}\(")
        assert any(call.search(text) for text in sources), f"no caller of {name}"
