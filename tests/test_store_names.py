"""Store names with control characters or surrounding whitespace are refused, never made
into look-alike stores; case is kept (names are literal, tools.md §2)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from thatch.cli.main import cli
from thatch.frontend.tools import Tools

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows, tool_context

BAD = {
    "global ": "must not start or end with whitespace",
    " GLOBAL": "must not start or end with whitespace",
    "\tglobal": "must not contain control characters",
    "glo\x00bal": "must not contain control characters",
    "glo\x1bbal": "must not contain control characters",
    "x\u202ey": "must not contain control characters",
    "a\nb": "must be a single line",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_tools_refuse_bad_store_names(tmp_path: Path, name: str) -> None:
    tools = Tools(tool_context(tmp_path))
    try:
        expected = f"Invalid arguments: store: {BAD[name]}"
        for tool, args in [
            ("memory_remember", {"label": "L", "content": "c", "store": name}),
            ("memory_recall", {"query": "q", "store": name}),
            ("memory_list", {"store": name}),
            ("memory_forget", {"label": "L", "store": name}),
        ]:
            result = tools.call(tool, args)
            assert (result.is_error, result.text) == (True, expected), tool
        assert tools.ctx.store.store_names() == ["global"]
    finally:
        tools.ctx.store.close()
    assert rows(tmp_path / "thatch.db") == []


def test_case_is_kept_and_blank_means_omitted(tmp_path: Path) -> None:
    tools = Tools(tool_context(tmp_path))
    try:
        assert not tools.call(
            "memory_remember", {"label": "A", "content": "a", "store": "GLOBAL"}
        ).is_error
        assert not tools.call(
            "memory_remember", {"label": "B", "content": "b", "store": "  "}
        ).is_error
        assert tools.ctx.store.store_names() == ["GLOBAL", "global", "o/r"]
    finally:
        tools.ctx.store.close()


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    return tmp_path / "thatch.db"


def test_cli_refuses_bad_store_names_but_reads_existing_ones(db: Path) -> None:
    runner = CliRunner()
    saved = runner.invoke(cli, ["remember", "L", "c", "--store", "global "])
    assert saved.exit_code == 2
    assert saved.stderr.splitlines()[-1] == (
        "Error: Invalid arguments: store: must not start or end with whitespace"
    )
    for args in (["list", " global"], ["search", "q", "--store", "glo\x00bal"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, args
        assert result.stderr.startswith("Error: Invalid arguments: store: ")
        assert len(result.stderr.splitlines()) == 1
    assert runner.invoke(cli, ["remember", "Kept", "c"]).exit_code == 0
    conn = sqlite3.connect(db)  # a store an earlier release made stays readable
    conn.execute("UPDATE entries SET store = 'legacy ' WHERE slug = 'kept'")
    conn.execute("INSERT INTO stores (name) VALUES ('legacy ')")
    conn.commit()
    conn.close()
    listed = runner.invoke(cli, ["list", "legacy "])
    assert listed.exit_code == 0 and "Kept" in listed.stdout
