"""``thatch chat list|tail|send`` (docs/chat.md §cli) as processes over a real database."""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from pathlib import Path

from tests.support.hookrun import hook_env, run_hook
from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatStore
from thatch.frontend.store.memory_store import Store
from thatch.frontend.timefmt import utc_now


def thatch(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    out = run_hook(list(args), None, env)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def setup_sessions(tmp_path: Path) -> tuple[dict[str, str], ChatStore, list[str]]:
    env = hook_env(tmp_path)
    Store.open(env["THATCH_DB_PATH"]).close()
    store = ChatStore(db.connect(env["THATCH_DB_PATH"]), utc_now)
    ids = []
    for project in ("o/r", "o/r", "x/y"):
        session = store.register_server(project=project, host_kind="claude", worktree="/w")
        ids.append(session.session_id)
    store.set_topic(ids[0], "schema\nwork \x1b[31m")
    store.conn.execute("UPDATE chat_sessions SET last_seen = '2020-01-01T00:00:00.000Z' "
                       "WHERE session_id = ?", (ids[2],))  # fmt: skip
    return env, store, ids


def test_list_text_and_json(tmp_path: Path) -> None:
    env, store, ids = setup_sessions(tmp_path)
    names = [s.name for s in sorted(store.sessions(), key=lambda s: ids.index(s.session_id))]
    code, out, err = thatch(env, "chat", "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "HOST", "PROJECT", "LAST", "SEEN", "TOPIC"]
    assert "\x1b" not in out  # no colour off a TTY, no escape from a topic
    assert lines[-1].startswith(names[2]) and " stale " in lines[-1]
    assert "schema\\nwork \\u001b[31m" in out
    code, out, _ = thatch(env, "chat", "list", "--json")
    rows = json.loads(out)
    assert [row["status"] for row in rows] == ["active", "active", "stale"]
    assert rows[2]["name"] == names[2] and rows[2]["project"] == "x/y"
    assert set(rows[0]) >= {"name", "status", "host", "project", "last_seen", "topic"}
    store.conn.close()


def test_tail_filters_and_limits(tmp_path: Path) -> None:
    env, store, ids = setup_sessions(tmp_path)
    a, b, c = ids
    for i in range(30):
        store.send(a, b, [f"a to b {i}"])
    store.send(c, b, ["from c: deploy now"])
    store.read_unread(b)
    names = store.names()
    code, out, _ = thatch(env, "chat", "tail", "--once")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(events) == 20
    assert [e["event"] for e in events[-2:]] == ["read", "read"]
    code, out, _ = thatch(
        env, "chat", "tail", "--once", "--limit", "all", "--from", names[c].upper()
    )
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in events] == ["sent", "read"]
    assert events[0]["body"] == "from c: deploy now" and events[1]["by"] == names[b]
    code, out, _ = thatch(
        env, "chat", "tail", "--once", "--limit", "all", "--match", r"b 1\d", "--match", "7"
    )
    assert [json.loads(line)["body"] for line in out.splitlines() if "body" in line] == [
        "a to b 17"
    ]
    code, out, _ = thatch(env, "chat", "tail", "--once", "--since", "2999-01-01")
    assert code == 0 and out == ""
    # Times are compared as times, not as text: an hour ahead with a space for the T (or
    # in another offset) is after every event; a word is a usage error, not silence.
    ahead = utc_now() + timedelta(hours=1)
    for since in (
        f"{ahead:%Y-%m-%d %H:%M}",
        ahead.astimezone(timezone(timedelta(hours=5))).isoformat(),
    ):
        code, out, _ = thatch(env, "chat", "tail", "--once", "--since", since)
        assert (code, out) == (0, ""), since
    behind = (utc_now() - timedelta(hours=1)).astimezone(timezone(timedelta(hours=-7)))
    code, out, _ = thatch(env, "chat", "tail", "--once", "--until", behind.isoformat())
    assert (code, out) == (0, "")
    code, _, err = thatch(env, "chat", "tail", "--once", "--since", "yesterday")
    assert code == 2 and "'yesterday' is not an ISO date or time" in err
    code, _, err = thatch(env, "chat", "tail", "--once", "--match", "(")
    assert code == 2 and "--match" in err
    store.conn.close()


def test_send_errors_exit_1(tmp_path: Path) -> None:
    env, store, ids = setup_sessions(tmp_path)
    assert thatch(env, "chat", "send", "nobody-00001", "hi")[::2] == (
        1,
        'Error: no chat session named "nobody-00001"\nFix: thatch chat list shows who is here\n',
    )
    # Quoted once: the line break shows as \n, not as \\n.
    assert thatch(env, "chat", "send", "a\nb", "hi")[::2] == (
        1,
        'Error: no chat session named "a\\nb"\nFix: thatch chat list shows who is here\n',
    )
    assert thatch(env, "chat", "send", "x", " ")[::2] == (
        1,
        "Error: Invalid arguments: body: must not be empty\nFix: write a message\n",
    )
    name = store.names()[ids[0]]
    code, out, err = thatch(env, "chat", "send", name, "y" * 20_001)
    assert code == 1 and err.startswith("Error: message too long: 20001 characters")
    code, out, _ = thatch(env, "chat", "send", name, "y" * 5000)
    assert code == 0 and out.startswith(f"[sent] → {name} (SENT AS 3 PARTS) as person-")
    me = out.rsplit(" as ", 1)[1].strip()
    assert thatch(env, "chat", "send", me, "to myself")[::2] == (
        1,
        "Error: you cannot send a message to yourself\nFix: thatch chat list shows who is here\n",
    )
    store.conn.close()


def test_an_unusable_database_is_one_error_and_its_fix(tmp_path: Path) -> None:
    """chat list, tail and send used to print Python tracebacks where every other
    command says what is wrong and what to do."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"garbage" * 200)
    cases = {
        str(garbage): (
            f"Error: cannot open database at {garbage}: file is not a database",
            f"Fix: move {garbage} aside (or restore it from a backup); thatch makes a new one",
        ),
        str(tmp_path): (
            f"Error: cannot open database at {tmp_path}: is a directory",
            f"Fix: set THATCH_DB_PATH to a file, e.g. {tmp_path / 'thatch.db'}",
        ),
    }
    for path, (error, fix) in cases.items():
        env = hook_env(tmp_path, THATCH_DB_PATH=path)
        for args in (["list"], ["tail", "--once"], ["send", "someone", "hi"]):
            code, out, err = thatch(env, "chat", *args)
            lines = err.splitlines()
            assert (code, out, len(lines)) == (1, "", 2), (args, err)
            assert lines[0].startswith(error) and lines[1] == fix
    assert garbage.read_bytes() == b"garbage" * 200
