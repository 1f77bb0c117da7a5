"""``thatch chat list|tail|send`` (docs/chat.md §cli) as processes over a real database, and
the tail's backlog in this process (to count the bodies it reads)."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

from tests.support.hookrun import hook_env, run_hook
from thatch.cli.chat_cmds import (
    FileSeen,
    TailFilter,
    backlog,
    poll,
    read_event,
    sent_event,
    watched,
)
from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatStore
from thatch.frontend.store.memory_store import Store
from thatch.frontend.timefmt import format_timestamp, utc_now


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


def test_list_json_writes_format_characters_escaped(tmp_path: Path) -> None:
    """A topic's bidi override and isolate reach --json as \\uXXXX, not raw (they would
    reorder the rest of the line in a terminal); its other non-ASCII stays readable."""
    env, store, ids = setup_sessions(tmp_path)
    topic = "schéma \u202eevil\u2066 \U000e0041"
    store.set_topic(ids[1], topic)
    code, out, _ = thatch(env, "chat", "list", "--json")
    assert code == 0 and "schéma \\u202eevil\\u2066 \\udb40\\udc41" in out
    assert not {"\u202e", "\u2066", "\U000e0041"} & set(out)
    topics = {row["session_id"]: row["topic"] for row in json.loads(out)}
    assert topics[ids[1]] == topic
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
    # --limit is named when refused, as click names every other option.
    for limit, why in (
        ("abc", "'abc' is not a number or all"),
        ("-1", "-1 is not a number ≥ 0 or all"),
    ):
        code, _, err = thatch(env, "chat", "tail", "--once", "--limit", limit)
        assert code == 2
        assert err.splitlines()[-1] == f"Error: Invalid value for '--limit': {why}"
    store.conn.close()


def test_send_errors_exit_1(tmp_path: Path) -> None:
    env, store, ids = setup_sessions(tmp_path)
    assert thatch(env, "chat", "send", "nobody-00001", "hi")[::2] == (
        1,
        'Error: no chat session named "nobody-00001"\nFix: see who is here: thatch chat list\n',
    )
    # Quoted once: the line break shows as \n, not as \\n.
    assert thatch(env, "chat", "send", "a\nb", "hi")[::2] == (
        1,
        'Error: no chat session named "a\\nb"\nFix: see who is here: thatch chat list\n',
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
        "Error: you cannot send a message to yourself\nFix: see who is here: thatch chat list\n",
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


def bodies_read(store: ChatStore) -> list[str]:
    """Every chat body the store's connection hands to Python from now on."""
    seen: list[str] = []

    def counting(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> tuple[object, ...]:
        seen.extend(v for v in row if isinstance(v, str) and v.startswith(("a to b", "c: ")))
        return row

    store.conn.row_factory = counting
    return seen


def test_tail_backlog_reads_only_the_bodies_it_shows(tmp_path: Path) -> None:
    """A 20-event backlog read every message's body (50,000 messages of 2,000 characters:
    1.65 s and 187 MB) to keep the last 20; it pages back from the newest event."""
    _env, store, ids = setup_sessions(tmp_path)
    a, b, c = ids
    store.send(c, b, ["c: one", "c: two"])
    store.send(a, b, [f"a to b {i}" for i in range(600)])
    names = store.names()
    seen = bodies_read(store)
    shown = backlog(store, TailFilter(None, None, None, None, []), 20)[0]
    assert [event["body"] for event in shown] == [f"a to b {i}" for i in range(580, 600)]
    assert len(seen) <= 20
    seen.clear()
    shown = backlog(store, TailFilter(names[c].upper(), None, None, None, []), 20)[0]
    assert [event["body"] for event in shown] == ["c: one", "c: two"]
    assert sorted(seen) == ["c: one", "c: two"]
    store.conn.close()


def every_event(
    store: ChatStore, rule: TailFilter, limit: int | None
) -> tuple[list[dict[str, Any]], set[int]]:
    """The backlog and the unread ids to watch as the tail computed them from every
    message at once: what paging back must still answer."""
    names = store.names()
    messages = [m for m in store.messages_after(0) if rule.message(m, names)]
    events = [(m.created_at, 0, m.id, sent_event(m, names)) for m in messages]
    events += [(m.read_at, 1, m.id, read_event(m, names)) for m in messages if m.read_at]
    events.sort(key=lambda event: event[:3])
    shown = [event for at, _, _, event in events if rule.at(at)]
    if limit is not None:
        shown = shown[-limit:] if limit else []
    return shown, {m.id for m in messages if m.read_at is None}


def test_tail_backlog_pages_back_to_the_same_events(tmp_path: Path) -> None:
    """Ids do not follow time everywhere (a team's mail keeps the hub's time, reads come
    any time later, events tie within a millisecond): the last events are still those of
    every message sorted by time."""
    _env, store, ids = setup_sessions(tmp_path)
    a, b, c = ids
    gone = store.register_server(project="o/r", host_kind="claude", worktree="/w").session_id
    chance = random.Random(7)
    pairs = [(a, b), (b, a), (c, b), (a, c), (gone, a)]
    for i in range(300):
        sender, recipient = chance.choice(pairs)
        store.send(sender, recipient, [f"a to b {i} {chance.choice(['deploy', 'wait'])}"])
    second = "2026-12-05T10:{:02d}:{:02d}.000Z"
    for message_id in range(1, 301):
        at = message_id if chance.random() < 0.9 else chance.randrange(1, 300)
        read = chance.choice([None, -1, at, at + chance.randrange(0, 400)])
        read_at = None if read is None else "" if read < 0 else second.format(*divmod(read, 60))
        store.conn.execute(
            "UPDATE chat_messages SET created_at = ?, read_at = ? WHERE id = ?",
            (second.format(*divmod(at, 60)), read_at, message_id),
        )
    store.conn.commit()
    store.unregister(gone)
    names = store.names()
    rules = [
        TailFilter(None, None, None, None, []),
        TailFilter(names[a], None, None, None, []),
        TailFilter(None, names[b].upper(), None, None, []),
        TailFilter("unknown", None, None, None, []),
        TailFilter("nobody-00001", None, None, None, []),
        TailFilter(None, None, None, None, [re.compile("deploy")]),
        TailFilter(names[a], names[c], None, None, [re.compile(r"\d5 ")]),
        TailFilter(None, None, second.format(1, 40), second.format(3, 0), []),
    ]
    for rule in rules:
        for limit in (0, 1, 7, 20, 250, None):
            shown, _ = backlog(store, rule, limit)
            assert shown == every_event(store, rule, limit)[0], (rule, limit)
        assert watched(store, rule) == every_event(store, rule, None)[1], rule
    store.conn.close()


def test_tail_follow_reads_only_the_bodies_it_shows(tmp_path: Path) -> None:
    """Following read every unread message's body to know which reads to report, each of
    their bodies again once read (a read event shows none), and every new message's body,
    shown or not; it reads the bodies it shows, and with --match those the match needs."""
    for case in range(4):
        root = tmp_path / str(case)
        root.mkdir()
        _env, store, ids = setup_sessions(root)
        a, b, c = ids
        gone = store.register_server(project="o/r", host_kind="claude", worktree="/w")
        store.send(c, b, ["c: one"])
        store.send(gone.session_id, a, ["c: gone"])
        store.send(a, b, [f"a to b {i}" for i in range(600)])
        store.unregister(gone.session_id)
        names = store.names()
        rule, needed = [
            (TailFilter(None, None, None, None, []), []),
            (TailFilter(names[c].upper(), None, None, None, []), []),
            (TailFilter("unknown", None, None, None, []), []),
            # The match needs the bodies of c's messages: the one watched, the new one.
            (TailFilter(names[c], None, None, None, [re.compile("two")]), ["c: one"]),
        ][case]
        seen = bodies_read(store)
        with store.snapshot():
            last = backlog(store, rule, 20)[1]
            seen.clear()  # the backlog reads the bodies it meets (the test above)
            watch = watched(store, rule)
        started = list(seen)
        store.send(a, b, ["a to b new"])
        store.send(c, b, ["c: two"])
        # Every message is read but one watched: following reports the reads, no body.
        store.conn.execute(
            "UPDATE chat_messages SET read_at = ? WHERE id <> 300", (format_timestamp(utc_now()),)
        )
        store.conn.commit()
        wanted = [e for e in every_event(store, rule, None)[0] if e["id"] > last or "by" in e]
        seen.clear()
        polled, last = poll(store, rule, last, watch)
        assert polled == wanted, case
        assert poll(store, rule, last, watch)[0] == [], case  # nothing twice
        bodies = [event["body"] for event in polled if "body" in event]
        assert sorted(started + seen) == sorted(bodies + needed), case
        store.conn.close()


def test_a_follow_poll_reads_nothing_while_no_other_connection_wrote(tmp_path: Path) -> None:
    """A poll asked which watched messages were read by reading them all (19-25 ms a poll
    at 30,000 watched): while no other connection wrote the file since the tail last read
    it, a poll reads no chat row. Its events stay those of a poll that reads every time,
    whatever is sent, read (also at no time: ``''``) or otherwise written meanwhile."""
    env, tail, ids = setup_sessions(tmp_path)  # the tail's own connection
    a, b, c = ids
    # The sessions' writes come from other connections (hooks, servers), as in use.
    writer = ChatStore(db.connect(env["THATCH_DB_PATH"]), utc_now)
    writer.send(a, b, [f"a to b {i}" for i in range(30)])
    writer.send(c, a, ["c: one"])
    names = tail.names()
    rules = [
        TailFilter(None, None, None, None, []),
        TailFilter(None, names[b], None, None, []),
        TailFilter(None, None, None, None, [re.compile("1")]),
    ]
    followers: list[tuple[TailFilter, FileSeen, list[Any], list[Any]]] = []
    for rule in rules:
        with tail.snapshot():
            seen = FileSeen(tail.file_version())
            last = backlog(tail, rule, 20)[1]
            watch = watched(tail, rule)
        followers.append((rule, seen, [last, watch], [last, set(watch)]))
    statements: list[str] = []
    chance = random.Random(5)
    done: list[str] = []
    reported = 0
    for step in range(80):
        action = chance.choice(["nothing", "nothing", "send", "read", "blank", "other"])
        if action == "send":
            sender, recipient = chance.choice([(a, b), (c, b), (b, a), (a, c)])
            writer.send(sender, recipient, [f"a to b new {step}"])
        elif action == "read":
            writer.read_unread(chance.choice([a, b, c]), take=lambda found: 3)
        elif action == "blank":  # another writer's row: read at no time
            writer.conn.execute(
                "UPDATE chat_messages SET read_at = '' WHERE id = (SELECT min(id) "
                "FROM chat_messages WHERE read_at IS NULL)"
            )
        elif action == "other":  # a write that is no chat event: a heartbeat
            writer.set_topic(chance.choice([a, b, c]), f"topic {step}")
        done.append(action)
        for rule, seen, gated, every in followers:
            tail.conn.set_trace_callback(statements.append)
            polled, gated[0] = poll(tail, rule, gated[0], gated[1], seen)
            tail.conn.set_trace_callback(None)
            if action == "nothing":
                assert polled == [] and not [s for s in statements if "chat_" in s], statements
            statements.clear()
            expected, every[0] = poll(tail, rule, every[0], every[1])
            assert polled == expected, (step, action, rule)
            assert gated == every, (step, action, rule)
            reported += len(polled)
    assert reported > 50 and {"nothing", "send", "read", "blank", "other"} <= set(done)
    writer.conn.close()
    tail.conn.close()


def test_a_send_committed_while_a_poll_reads_is_reported_by_the_next_poll(
    tmp_path: Path,
) -> None:
    """The file's version and the events a poll reads name one state of the file: a send
    another connection commits between the poll's reads is not in them, so the version the
    poll keeps is older than the send, and the next poll reads and reports it. A version
    read after the events would name the send the events lack: every later poll would skip
    the file, and the send would never be reported."""
    env, tail, ids = setup_sessions(tmp_path)
    a, b, _ = ids
    writer = ChatStore(db.connect(env["THATCH_DB_PATH"]), utc_now)
    rule = TailFilter(None, None, None, None, [])
    with tail.snapshot():
        seen = FileSeen(tail.file_version())
        last = backlog(tail, rule, 20)[1]
        watch = watched(tail, rule)
    sent: list[str] = []

    def send_once_the_poll_reads(statement: str) -> None:
        if "chat_messages" in statement and not sent:
            sent.append(statement)
            writer.send(a, b, ["sent while the poll read"])

    writer.set_topic(a, "a heartbeat: the next poll reads the file")
    tail.conn.set_trace_callback(send_once_the_poll_reads)
    polled, last = poll(tail, rule, last, watch, seen)
    tail.conn.set_trace_callback(None)
    assert sent, "the poll read no chat_messages row"
    assert [event.get("body") for event in polled] == []
    polled, last = poll(tail, rule, last, watch, seen)
    assert [event.get("body") for event in polled] == ["sent while the poll read"]
    writer.conn.close()
    tail.conn.close()


def test_tail_backlog_walks_time_indexes_not_a_sort_of_every_event(tmp_path: Path) -> None:
    """The backlog's events were every message's send and read, sorted whole (897 ms at
    1M messages) to keep the last 20; each kind of event now walks its own time index
    newest first, whatever the filters, and stops once the backlog is full."""
    _env, store, ids = setup_sessions(tmp_path)
    a, b, _c = ids
    store.send(a, b, ["a to b 0"])
    names = store.names()
    rules = [
        TailFilter(None, None, None, None, []),
        TailFilter(names[a], names[b], "2026-01-01T00:00:00.000Z", None, []),
        TailFilter(None, names[b], None, "2999-01-01T00:00:00.000Z", [re.compile("x")]),
    ]
    for rule in rules:
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        backlog(store, rule, 20)
        store.conn.set_trace_callback(None)
        (events,) = [s for s in statements if "UNION ALL" in s]
        plan = [row[3] for row in store.conn.execute(f"EXPLAIN QUERY PLAN {events}")]
        assert any("INDEX thatch_chat_messages_sent (created_at" in s for s in plan), plan
        assert any("INDEX thatch_chat_messages_read (read_at" in s for s in plan), plan
        # Only ties of one time are put in order: never the whole set of events.
        assert not [s for s in plan if "TEMP B-TREE FOR ORDER BY" in s], plan
    store.conn.close()


def test_tail_backlog_reads_no_body_it_does_not_print(tmp_path: Path) -> None:
    """A read event shows no body, and --from unknown (the sessions that have left) is
    decided from the sender's id: the backlog read the body of every event it met, and
    with --from unknown that of every message back to the last 20 of the departed."""
    _env, store, ids = setup_sessions(tmp_path)
    a, b, _c = ids
    gone = store.register_server(project="o/r", host_kind="claude", worktree="/w").session_id
    store.send(gone, a, ["c: from gone 0", "c: from gone 1"])
    store.send(a, b, [f"a to b {i}" for i in range(300)])
    store.unregister(gone)
    second = "2026-12-05T10:{:02d}:{:02d}.000Z"
    for message_id in range(1, 303):  # read 5 s after it was sent, but for the last few
        sent, read = (
            second.format(*divmod(message_id, 60)),
            second.format(*divmod(message_id + 5, 60)),
        )
        store.conn.execute(
            "UPDATE chat_messages SET created_at = ?, read_at = ? WHERE id = ?",
            (sent, read if message_id < 295 else None, message_id),
        )
    store.conn.commit()
    for rule in [
        TailFilter(None, None, None, None, []),
        TailFilter("unknown", None, None, None, []),
    ]:
        seen = bodies_read(store)
        shown = backlog(store, rule, 20)[0]
        store.conn.row_factory = None
        printed = [event["body"] for event in shown if "body" in event]
        assert shown and printed and len(printed) < len(shown), rule
        assert sorted(seen) == sorted(printed), rule
    # --match reads the bodies it checks, each once, the printed ones included.
    seen = bodies_read(store)
    shown = backlog(store, TailFilter(None, None, None, None, [re.compile("gone")]), 3)[0]
    assert [event.get("body") for event in shown] == ["c: from gone 1", None, None]
    assert sorted(seen) == sorted(set(seen)) and "c: from gone 1" in seen
    store.conn.close()


def test_tail_reports_no_read_at_an_empty_time(tmp_path: Path) -> None:
    """``read_at = ''`` (a row another writer left) is no read time: the chat's reads
    take it as read (only NULL is unread), the backlog shows no read event for it, and
    following reported such a message "read" at "" once it had met it."""
    _env, store, ids = setup_sessions(tmp_path)
    a, b, _c = ids
    store.send(a, b, ["a to b watched"])
    rule = TailFilter(None, None, None, None, [])
    with store.snapshot():
        last = backlog(store, rule, 20)[1]
        watch = watched(store, rule)
    store.send(a, b, ["a to b blank", "a to b later"])
    store.conn.execute("UPDATE chat_messages SET read_at = '' WHERE body <> 'a to b later'")
    store.conn.commit()
    polled, last = poll(store, rule, last, watch)
    assert [(e["event"], e.get("body")) for e in polled] == [
        ("sent", "a to b blank"),
        ("sent", "a to b later"),
    ]
    store.conn.execute("UPDATE chat_messages SET read_at = '' WHERE body = 'a to b later'")
    store.conn.commit()
    assert poll(store, rule, last, watch)[0] == []
    assert backlog(store, rule, 20)[0][1:] == polled
    store.conn.close()
