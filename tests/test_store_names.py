"""Store names with control characters or surrounding whitespace are refused, never made
into look-alike stores; case is kept (names are literal, docs/tools.md §common-rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_embedder import rows, tool_context
from thatch.frontend.tools.memory_tools import Tools

BAD = {
    "global ": "must not start or end with whitespace",
    " GLOBAL": "must not start or end with whitespace",
    "\tglobal": "must not contain control characters",
    "glo\x00bal": "must not contain control characters",
    "glo\x1bbal": "must not contain control characters",
    "x\u202ey": "must not contain control characters",
    "a\nb": "must be a single line",
    # what thatch list and search read as the project store plus global: a store of the
    # name could be written and never listed
    "all": 'must not be "all" (thatch list all means the project store and global)',
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_tools_refuse_bad_store_names(tmp_path: Path, name: str) -> None:
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        expected = f"Invalid arguments: store: {BAD[name]}"
        result = tools.call("memory_remember", {"label": "L", "content": "c", "store": name})
        assert (result.is_error, result.text) == (True, expected)
        assert tools.ctx.store.store_names() == ["global"]
    assert rows(tmp_path / "thatch.db") == []


def test_case_is_kept_and_blank_means_omitted(tmp_path: Path) -> None:
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert not tools.call(
            "memory_remember", {"label": "A", "content": "a", "store": "GLOBAL"}
        ).is_error
        assert not tools.call(
            "memory_remember", {"label": "B", "content": "b", "store": "  "}
        ).is_error
        assert tools.ctx.store.store_names() == ["GLOBAL", "global", "o/r"]


def test_existing_odd_stores_stay_readable(tmp_path: Path) -> None:
    """Memories an earlier version saved under "global " or a control character can still
    be listed, shown and forgotten: only creating such a store is refused."""
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        store = tools.ctx.store
        for name in ("global ", "glo\x1bbal"):
            store.conn.execute("INSERT INTO stores (name) VALUES (?)", (name,))
            store.remember(name, "Odd", f"# Odd\n\nsaved in {name!r}", None, None)
            listed = tools.call("memory_list", {"store": name})
            assert not listed.is_error and "Odd" in listed.text
            assert not tools.call("memory_show", {"label": "Odd", "store": name}).is_error
            forgotten = tools.call("memory_forget", {"label": "Odd", "store": name})
            assert not forgotten.is_error, forgotten.text
        assert rows(tmp_path / "thatch.db") == []
