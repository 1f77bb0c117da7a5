"""A database this process may not write, left at an older schema (docs/database.md
§compatibility): read with its own schema by the CLI, the hooks and the UI; a later
migration's tables and columns read as empty, and only what must write says so."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.support import earlier_release
from tests.support.embedder_proc import EmbedderProcess
from tests.support.hookrun import hook_env, run_hook, thatch_command
from tests.support.mounts import immutable
from tests.support.ui_client import running_ui
from tests.test_hooks_reminder import git_repo
from thatch.frontend.errors import DatabaseWriteError
from thatch.frontend.store import db, faults
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.schema import MIGRATIONS, MIGRATIONS_TABLE, has_table, init_schema
from thatch.frontend.tools.context import ToolContext

# The previous thatch's file: chat sessions with topics (m003) and chat tables (m008), but
# no chat secret (m011), switched-off defaults (m012), branch records (m013) nor team
# conflict versions (m021).
OLDER_THATCH = 8


def build(path: Path, kind: str) -> None:
    """The earlier (TypeScript) release's file, or that file as an older thatch left it."""
    earlier_release.build(path, 20, legacy=False)
    if kind == "earlier":
        return
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(f"CREATE TABLE {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT)")
        for name, migrate in MIGRATIONS[:OLDER_THATCH]:
            migrate(conn)
            conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, 't')", (name,))
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.fixture(params=["earlier", "older"])
def frozen(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """The file, immutable (root ignores 0444) for the test."""
    path = tmp_path / "thatch.db"
    build(path, request.param)
    with immutable(path):
        yield path


def thatch(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        thatch_command(*args), env=env, cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    "args",
    [["hygiene"], ["chat", "list"], ["list", "acme/app"], ["search", "postgres port"]],
    ids=" ".join,
)
def test_read_commands_answer(
    frozen: Path, tmp_path: Path, mock_embedder: EmbedderProcess, args: list[str]
) -> None:
    """Reads answer in a git checkout (hygiene's branch sync has nothing to sync against);
    nothing of SQLite's own text reaches the user."""
    project = git_repo(tmp_path / "proj")
    env = hook_env(tmp_path, THATCH_EMBEDDER_ADDR=mock_embedder.address)
    done = thatch(env, project, *args)
    assert done.returncode == 0, done.stderr
    assert "Error" not in done.stdout + done.stderr
    if args == ["chat", "list"]:
        assert done.stdout.splitlines()[0].split() == [
            "NAME", "STATUS", "HOST", "PROJECT", "LAST", "SEEN", "TOPIC"
        ]  # fmt: skip
    if args[0] == "list":
        assert "[acme/app]" in done.stdout


def test_a_write_says_the_file_cannot_be_written(frozen: Path, tmp_path: Path) -> None:
    """A command that must write names the file and the fix, never "no such table"."""
    project = git_repo(tmp_path / "proj")
    done = thatch(hook_env(tmp_path), project, "restore-branch", "gone")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"Error: cannot write database {frozen}: {frozen} does not permit writes "
        f"(is it immutable? see lsattr {frozen})",
        f"Fix: chattr -i {frozen}",
    ]


@pytest.mark.parametrize("hook", ["reminder", "flush-tools"])
def test_hooks_say_one_line_at_most(frozen: Path, tmp_path: Path, hook: str) -> None:
    """Every step of the hook meets the same file: one stderr line for the whole hook (the
    chat line's anchoring is a write), and the rest of its output as from a healthy file."""
    project = git_repo(tmp_path / "proj")
    payload = {"session_id": "r1", "cwd": str(project), "prompt": "postgres port"}
    done = run_hook([hook], payload, hook_env(tmp_path))
    assert done.returncode == 0
    lines = done.stderr.decode().splitlines()
    assert len(lines) <= 1, lines
    assert all(f"cannot write database {frozen}" in line for line in lines), lines
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    shutil.copy(frozen, healthy / "thatch.db")
    env = hook_env(healthy, THATCH_CHAT="off")  # the chat line needs a write
    assert done.stdout == run_hook([hook], payload, env).stdout


@pytest.mark.parametrize("page", ["/", "/engines", "/chat"])
def test_ui_pages_answer(
    frozen: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock_embedder: EmbedderProcess,
    page: str,
) -> None:
    project = git_repo(tmp_path / "proj")
    monkeypatch.setenv("THATCH_DB_PATH", str(frozen))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    with ToolContext.from_env() as ctx, running_ui(ctx) as (client, guard):
        assert client.get("/", token=guard.token).status == 303
        answered = client.get(page)
        assert answered.status == 200, answered.body[:2000]


@pytest.mark.parametrize("args", [["chat", "tail", "--once"], ["team", "status"]], ids=" ".join)
def test_reads_of_later_tables_answer_none(frozen: Path, tmp_path: Path, args: list[str]) -> None:
    """The chat tail and team status read a later migration's table: none here."""
    done = thatch(hook_env(tmp_path), git_repo(tmp_path / "proj"), *args)
    assert (done.returncode, done.stderr) == (0, "")
    if args[0] == "team":
        assert done.stdout.startswith("No store is shared with a team")
    else:
        assert done.stdout == ""


def migrated(path: Path) -> Path:
    with Store.open(path):
        pass
    return path


def test_a_lost_table_of_a_recorded_migration_is_an_error(tmp_path: Path) -> None:
    """Only a migration not recorded (a file no thatch could upgrade) makes its tables read
    as empty: a writable, migrated file that lost them says so, as before."""
    db = migrated(tmp_path / "thatch.db")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE _thatch_branch_refs")
        conn.execute("DROP TABLE team_conflict_versions")
    done = thatch(hook_env(tmp_path), git_repo(tmp_path / "proj"), "hygiene")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"Error: database {db}: no such table: _thatch_branch_refs"]


def test_the_schema_is_read_once_per_connection(tmp_path: Path) -> None:
    """The hooks ask has_table several times a prompt: the migrations are read once."""
    conn = db.connect(migrated(tmp_path / "thatch.db"))
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    try:
        for table in ("_thatch_branch_refs", "team_conflict_versions", "chat_messages"):
            assert has_table(conn, table)
        assert len(seen) == 2  # is the migrations table there, and what does it record
        assert has_table(conn, "thatch_defaults_off")
        assert len(seen) == 2
    finally:
        conn.close()


def test_the_schema_is_read_again_once_migrated(tmp_path: Path) -> None:
    """A connection that read an older file's schema, then migrated it, reads its tables."""
    path = tmp_path / "thatch.db"
    build(path, "older")
    conn = db.connect(path)
    try:
        assert not has_table(conn, "_thatch_branch_refs")
        init_schema(conn, "t")
        assert has_table(conn, "_thatch_branch_refs")
    finally:
        conn.close()


def test_a_long_lived_reader_sees_the_tables_another_process_made(tmp_path: Path) -> None:
    """An MCP server or the UI opened the file before it could be migrated; another
    process migrates it: the tables made meanwhile are read, not taken as absent until a
    restart (a switched-off default read as on, chat messages as none)."""
    path = tmp_path / "thatch.db"
    build(path, "older")
    with immutable(path):
        reader = db.connect(path)
    try:
        assert not has_table(reader, "_thatch_branch_refs")
        migrated(path)
        assert has_table(reader, "_thatch_branch_refs")
    finally:
        reader.close()


def test_no_such_table_is_not_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what stops an upgrade (read-only, permission, immutable) turns a missing table
    into "cannot write": a full disk stopped no upgrade, the table is simply lost."""
    path = migrated(tmp_path / "thatch.db")
    monkeypatch.setattr(faults, "free_bytes", lambda directory: 1 << 20)
    assert faults.write_fault(path) is not None  # the disk does look full
    error = faults.store_error(sqlite3.OperationalError("no such table: x"), path)
    assert not isinstance(error, DatabaseWriteError)
    assert str(error) == f"database {path}: no such table: x"
