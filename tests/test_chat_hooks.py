"""Hooks anchor chat sessions (docs/chat.md §2, §6): reminder and flush-tools as processes."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hookrun import hook_env, run_hook
from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatStore, host_session_key
from thatch.frontend.timefmt import utc_now

LINE = re.compile(
    r'\[thatch\] chat: you are ([a-z]+-\d{5}) \((\d+) unread\)\. Pass "as": "\1:([0-9a-f]{16})" '
    r"to the chat tool; the part after the colon is your key: never write it anywhere else\."
)


def last_line(result: bytes) -> str:
    return result.decode().rstrip("\n").rsplit("\n", 1)[-1]


def chat(env: dict[str, str]) -> ChatStore:
    return ChatStore(db.connect(env["THATCH_DB_PATH"]), utc_now)


def test_reminder_names_the_session_and_flush_tools_only_with_mail(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))
    out = run_hook(["reminder"], {"session_id": "claude-a"}, env)
    assert out.returncode == 0 and out.stderr == b""
    match = LINE.fullmatch(last_line(out.stdout))
    assert match and match[2] == "0"
    name = match[1]
    # The same session keeps its name; flush-tools says nothing about chat without mail.
    again = run_hook(["reminder"], {"session_id": "claude-a"}, env)
    assert LINE.fullmatch(last_line(again.stdout)).groups() == (name, "0", match[3])  # type: ignore[union-attr]
    flush = run_hook(["flush-tools"], {"session_id": "claude-a", "prompt": "hi"}, env)
    assert flush.returncode == 0 and b"chat:" not in flush.stdout
    store = chat(env)
    other = store.register_server(project="proj", host_kind="claude", worktree="/")
    store.send(other.session_id, host_session_key("claude-a"), ["ping"])
    flush = run_hook(["flush-tools"], {"session_id": "claude-a", "prompt": "hi"}, env)
    flushed = LINE.fullmatch(last_line(flush.stdout))
    assert flushed and flushed.groups() == (name, "1", match[3])  # the same key every run
    # Another session's key is its own; the database keeps only a hash of either.
    other_line = LINE.fullmatch(
        last_line(run_hook(["reminder"], {"session_id": "claude-b"}, env).stdout)
    )
    assert other_line and other_line[3] != match[3]
    assert match[3].encode() not in Path(env["THATCH_DB_PATH"]).read_bytes()
    session = store.get(host_session_key("claude-a"))
    assert session is not None and session.auto and session.project == "proj"
    assert session.worktree == str(project.resolve())
    store.conn.close()


def test_cursor_anchors_by_conversation_id_in_json(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    payload = {"conversation_id": "conv-1", "session_id": "other", "workspace_roots": ["/"]}
    out = run_hook(["reminder", "--json", "--host", "cursor"], payload, env)
    context = json.loads(out.stdout)["additional_context"]
    assert LINE.fullmatch(context.rsplit("\n", 1)[-1])
    store = chat(env)
    session = store.get(host_session_key("conv-1"))
    assert session is not None and session.host_kind == "cursor"
    store.conn.close()


def test_a_session_that_left_is_not_anchored_again(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    run_hook(["reminder"], {"session_id": "s-left", "cwd": "/"}, env)
    store = chat(env)
    store.unregister(host_session_key("s-left"))
    out = run_hook(["reminder"], {"session_id": "s-left", "cwd": "/"}, env)
    assert out.returncode == 0 and b"chat:" not in out.stdout
    assert store.get(host_session_key("s-left")) is None
    store.conn.close()


def test_reminder_prunes_old_auto_rows_and_migrates_an_old_file(tmp_path: Path) -> None:
    """A database without the chat tables is migrated by the hook; stale auto rows go."""
    env = hook_env(tmp_path)
    conn = sqlite3.connect(env["THATCH_DB_PATH"])
    conn.execute(
        "CREATE TABLE chat_sessions (session_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE "
        "COLLATE NOCASE, topic TEXT, project TEXT, host_kind TEXT NOT NULL DEFAULT 'opencode', "
        "registered_at TEXT NOT NULL, last_seen TEXT NOT NULL, auto INTEGER NOT NULL DEFAULT 0, "
        "worktree TEXT NOT NULL DEFAULT '')"
    )
    old = "2020-01-01T00:00:00.000Z"
    conn.execute(
        "INSERT INTO chat_sessions VALUES ('mcp_old', 'old-1', NULL, 'p', 'claude', ?, ?, 1, '')",
        (old, old),
    )
    conn.execute(
        "INSERT INTO chat_sessions VALUES ('srv_kept', 'kept-1', NULL, 'p', 'claude', ?, ?, 0, '')",
        (old, old),
    )
    conn.commit()
    conn.close()
    out = run_hook(["reminder"], {"session_id": "fresh", "cwd": "/"}, env)
    assert out.returncode == 0, out.stderr
    assert LINE.fullmatch(last_line(out.stdout))
    store = chat(env)
    assert {s.session_id for s in store.sessions()} == {"srv_kept", host_session_key("fresh")}
    store.conn.close()


def test_no_session_id_no_chat_line(tmp_path: Path) -> None:
    env = hook_env(tmp_path)
    out = run_hook(["reminder"], {"cwd": "/"}, env)
    assert out.returncode == 0 and out.stderr == b"" and b"chat:" not in out.stdout


def test_ids_that_differ_in_outer_blanks_are_different_sessions(tmp_path: Path) -> None:
    """The id as the host gave it is the session: stripping it gave " a " the identity and
    the key of "a". A blank id is no session."""
    env = hook_env(tmp_path)
    seen = []
    for session in ("sessA", " sessA ", "sessA\t"):
        out = run_hook(["reminder"], {"session_id": session, "cwd": "/"}, env)
        match = LINE.fullmatch(last_line(out.stdout))
        assert match, out.stdout
        seen.append((match[1], match[3]))
    assert len({name for name, _ in seen}) == 3 and len({key for _, key in seen}) == 3
    blank = run_hook(["reminder"], {"session_id": "  ", "cwd": "/"}, env)
    assert blank.returncode == 0 and b"chat:" not in blank.stdout


def test_flush_tools_migrates_a_file_without_chat_tables(tmp_path: Path) -> None:
    """flush-tools opens no Store on a short prompt: a missing chat table migrates the file
    (a thatch file from before chat: its first table, nothing else)."""
    env = hook_env(tmp_path)
    with sqlite3.connect(env["THATCH_DB_PATH"]) as conn:
        conn.execute("CREATE TABLE stores (name TEXT PRIMARY KEY)")
    conn.close()
    out = run_hook(["flush-tools"], {"session_id": "s1", "prompt": "hi"}, env)
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    store = chat(env)
    assert store.get(host_session_key("s1")) is not None
    store.conn.close()


def test_chat_off_for_the_project_leaves_no_chat_line_and_no_wake(tmp_path: Path) -> None:
    """THATCH_CHAT=off (docs/tools.md §switches): the session is not anchored, the reminder
    and flush-tools print no chat line, and chat-notify wakes nobody, even with mail."""
    project = tmp_path / "proj"
    project.mkdir()
    on = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))
    run_hook(["reminder"], {"session_id": "claude-a"}, on)  # anchored while chat was on
    store = chat(on)
    other = store.register_server(project="proj", host_kind="claude", worktree="/")
    store.send(other.session_id, host_session_key("claude-a"), ["ping"])
    off = {**on, "THATCH_CHAT": "off"}
    out = run_hook(["reminder"], {"session_id": "claude-b"}, off)
    assert out.returncode == 0 and out.stderr == b"" and b"chat:" not in out.stdout
    assert store.get(host_session_key("claude-b")) is None
    flush = run_hook(["flush-tools"], {"session_id": "claude-a", "prompt": "hi"}, off)
    assert flush.returncode == 0 and b"chat:" not in flush.stdout
    wake = run_hook(["chat-notify"], {"session_id": "claude-a", "stop_hook_active": False}, off)
    assert wake.returncode == 0 and wake.stdout == b""
    # The same mail with chat on: the wake and the line come back.
    woken = run_hook(["chat-notify"], {"session_id": "claude-a", "stop_hook_active": False}, on)
    assert b"unread chat message" in woken.stdout
    store.conn.close()


@pytest.mark.parametrize("host", ["claude", "cursor"])
def test_setup_no_chat_reaches_the_hook_commands(tmp_path: Path, host: str) -> None:
    """Hosts give an MCP entry's environment to the server alone: `thatch setup --no-chat`
    also writes the switch on every hook command, so the hooks that setup wrote print no
    chat line and wake nobody, with THATCH_CHAT nowhere in the host's environment."""
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.hosts import host_paths

    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, HOME=str(tmp_path / "home"), THATCH_PROJECT_DIR=str(project))
    env.pop("THATCH_CHAT", None)
    bin_path = str(Path(sys.executable).with_name("thatch"))

    def commands(**switches: bool) -> dict[str, str]:
        request = SetupRequest(
            hosts=[host],
            project_dir=project,
            env=env,
            bin_path=bin_path,
            version="1",
            switches=switches,
        )
        assert run_setup(request).exit_code == 0
        hooks_file = host_paths(host, "local", project, env).hooks
        assert hooks_file is not None
        found: dict[str, str] = {}
        for event, entries in json.loads(hooks_file.read_text())["hooks"].items():
            for entry in entries:
                for hook in [entry, *entry.get("hooks", [])]:
                    if "command" in hook:
                        found[event] = hook["command"]
        return found

    def shell(command: str, payload: dict[str, object]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            command,
            shell=True,
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=env,
            cwd=project,
            timeout=60,
            check=False,
        )

    start, stop = ("SessionStart", "Stop") if host == "claude" else ("sessionStart", "stop")
    on = commands()
    assert b"chat:" in shell(on[start], {"session_id": "s-on"}).stdout
    off = commands(chat=False)
    assert all(command.endswith(" --off=chat") for command in off.values()), off
    out = shell(off[start], {"session_id": "s-off"})
    assert out.returncode == 0 and b"chat:" not in out.stdout, out.stdout
    store = chat(env)
    assert store.get(host_session_key("s-off")) is None
    store.send(
        store.register_server(project="p", host_kind=host, worktree="/").session_id,
        host_session_key("s-on"),
        ["ping"],
    )
    wake = shell(off[stop], {"session_id": "s-on", "stop_hook_active": False})
    assert wake.returncode == 0 and wake.stdout.strip() in (b"", b"{}"), wake.stdout
    assert commands(chat=True) == on  # switched back on: the commands carry nothing
    store.conn.close()


def test_the_prompt_hook_refreshes_last_seen_at_most_once_a_minute(tmp_path: Path) -> None:
    """A prompt within a minute of the last refresh, same project and worktree, writes
    nothing (``last_seen`` and the file unchanged); one after it, or from another
    worktree, refreshes the row; the reminder always does. The session stays active
    (seen within 30 minutes) throughout."""
    from datetime import UTC, datetime, timedelta

    from thatch.frontend.timefmt import format_timestamp

    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project))
    key = host_session_key("claude-a")
    assert run_hook(["reminder"], {"session_id": "claude-a"}, env).returncode == 0
    store = chat(env)
    seen = store.get(key)
    assert seen is not None
    wal = Path(env["THATCH_DB_PATH"] + "-wal")
    before = (store.conn.execute("PRAGMA data_version").fetchone(), wal.stat().st_size)

    def prompt(directory: Path = project) -> None:
        payload = {"session_id": "claude-a", "prompt": "hi"}
        here = {**env, "THATCH_PROJECT_DIR": str(directory)}
        assert run_hook(["flush-tools"], payload, here).returncode == 0

    prompt()
    assert store.get(key) == seen
    assert (store.conn.execute("PRAGMA data_version").fetchone(), wal.stat().st_size) == before
    assert seen.is_active(datetime.now(UTC))

    two_minutes_ago = format_timestamp(datetime.now(UTC) - timedelta(minutes=2))
    store.conn.execute("UPDATE chat_sessions SET last_seen = ? WHERE session_id = ?",
                       (two_minutes_ago, key))  # fmt: skip
    prompt()
    refreshed = store.get(key)
    assert refreshed is not None and refreshed.last_seen > two_minutes_ago

    other = tmp_path / "other"
    other.mkdir()
    prompt(other)
    moved = store.get(key)
    assert moved is not None and moved.worktree == str(other.resolve())
    store.conn.close()


def test_chat_notify_wakes_as_before_in_a_file_without_m027(tmp_path: Path) -> None:
    """A file an older thatch left (m027 not recorded: chat_outbox without its columns),
    which the hook does not migrate: no refusal to tell, the wake as before, no error."""
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.store.migrations.chat_remote import CHAT_OUTBOX_TRIGGER, m018_chat_remote
    from thatch.frontend.store.schema import MIGRATIONS_TABLE

    env = hook_env(tmp_path)
    Store.open(env["THATCH_DB_PATH"]).close()
    with sqlite3.connect(env["THATCH_DB_PATH"]) as older:
        older.execute(f"DROP TRIGGER {CHAT_OUTBOX_TRIGGER}")
        older.execute("DROP INDEX thatch_chat_outbox_untold")
        older.execute("DROP INDEX thatch_chat_outbox_waiting")
        older.execute("DROP INDEX thatch_chat_outbox_told")  # m029's, of a column of m027
        for column in ("to_name", "refused", "told_at"):
            older.execute(f"ALTER TABLE chat_outbox DROP COLUMN {column}")
        m018_chat_remote(older)
        older.execute(
            f"DELETE FROM {MIGRATIONS_TABLE} "
            "WHERE name IN ('m027_chat_refused', 'm029_chat_outbox_told')"
        )
    older.close()
    store = chat(env)  # the session as a hook that does not migrate anchors it
    me = host_session_key("claude-a")
    store.anchor(
        me, project="proj", host_kind="claude", worktree="/", key=store.host_key("claude-a")
    )
    other = store.register_server(project="proj", host_kind="claude", worktree="/")
    store.send(other.session_id, me, ["ping"])
    woken = run_hook(["chat-notify"], {"session_id": "claude-a", "stop_hook_active": False}, env)
    assert (woken.returncode, woken.stderr) == (0, b"")
    context = json.loads(woken.stdout)["hookSpecificOutput"]["additionalContext"]
    assert context.startswith("[thatch] System notification, not user input: 1 unread chat")
    migrations = store.conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}").fetchall()
    assert ("m027_chat_refused",) not in migrations  # read as it is, not migrated
    store.conn.close()
