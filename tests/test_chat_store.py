"""The chat store (docs/chat.md §1, §2, §6): names, anchoring, tombstones, messages, wakes."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from thatch.frontend.store import db
from thatch.frontend.store.chat_store import ChatStore, host_session_key, name_word
from thatch.frontend.store.chat_words import WORDS
from thatch.frontend.store.memory_store import Store


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def chat(tmp_path: Path, clock: Clock) -> ChatStore:
    Store.open(tmp_path / "thatch.db").close()  # schema
    return ChatStore(db.connect(tmp_path / "thatch.db"), clock)


def anchor(chat: ChatStore, host_id: str, project: str = "o/r") -> str:
    session = chat.anchor(
        host_session_key(host_id), project=project, host_kind="claude", worktree="/w"
    )
    assert session is not None
    return session.name


def test_row_key_and_name_word_follow_the_hash() -> None:
    """mcp_ + sha256(host id)[:12]; the word is entry int(sha256(row key)) mod 64."""
    key = host_session_key("c246e25f")
    assert key == "mcp_" + hashlib.sha256(b"c246e25f").hexdigest()[:12]
    assert name_word(key) == WORDS[int(hashlib.sha256(key.encode()).hexdigest(), 16) % 64]
    assert len(WORDS) == 64 and len(set(WORDS)) == 64
    assert all(re.fullmatch(r"[a-z]{2,8}", word) for word in WORDS)


def test_names_are_assigned_per_word_and_never_reused(chat: ChatStore) -> None:
    """Each assignment bumps its word's counter; a departed session's name is not reused."""
    ids = [f"host-{i}" for i in range(200)]
    names = [anchor(chat, host_id) for host_id in ids]
    assert len(set(names)) == 200
    for host_id, name in zip(ids, names, strict=True):
        word, number = name.rsplit("-", 1)
        assert word == name_word(host_session_key(host_id))
        assert re.fullmatch(r"\d{5}", number)
    by_word: dict[str, list[int]] = {}
    for name in names:
        word, number = name.rsplit("-", 1)
        by_word.setdefault(word, []).append(int(number))
    assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in by_word.values())
    # Anchoring again keeps the name.
    assert anchor(chat, ids[0]) == names[0]
    # A server identity with the same word gets the next number, never an old one.
    first = chat.by_name(names[0])
    assert first is not None
    chat.unregister(first.session_id)
    server = chat.register_server(project="o/r", host_kind="claude", worktree="/w")
    assert server.name not in names and server.session_id.startswith("srv_")


def test_a_name_taken_by_an_earlier_release_row_is_skipped(chat: ChatStore) -> None:
    key = host_session_key("x")
    taken = f"{name_word(key)}-00001"
    chat.conn.execute(
        "INSERT INTO chat_sessions (session_id, name, registered_at, last_seen) "
        "VALUES ('old', ?, 't', 't')",
        (taken.upper(),),
    )
    assert anchor(chat, "x") == f"{name_word(key)}-00002"


def test_tombstone_keeps_a_session_out_for_seven_days(chat: ChatStore, clock: Clock) -> None:
    name = anchor(chat, "a")
    session = chat.by_name(name)
    assert session is not None
    chat.unregister(session.session_id)
    assert chat.get(session.session_id) is None
    assert chat.anchor(session.session_id, project="o/r", host_kind="claude", worktree="/w") is None
    clock.advance(days=7, seconds=1)
    again = chat.anchor(session.session_id, project="o/r", host_kind="claude", worktree="/w")
    assert again is not None and again.name != name


def test_liveness_and_pruning_once_a_day(chat: ChatStore, clock: Clock) -> None:
    """Active = seen within 30 min; auto rows unseen 7 days are pruned, at most daily."""
    old = anchor(chat, "old")
    server = chat.register_server(project="o/r", host_kind="claude", worktree="/w")
    clock.advance(minutes=30)
    session = chat.by_name(old)
    assert session is not None and session.is_active(clock.now)
    clock.advance(seconds=1)
    assert not session.is_active(clock.now)
    assert chat.prune()
    assert {s.name for s in chat.sessions()} == {old, server.name}  # 31 min unseen: kept
    clock.advance(days=7)
    fresh = anchor(chat, "fresh")
    assert chat.prune()
    names = {s.name for s in chat.sessions()}
    assert names == {fresh, server.name}  # the server row (auto = 0) stays
    clock.advance(hours=23)
    chat.conn.execute("UPDATE chat_sessions SET last_seen = '2000-01-01T00:00:00.000Z'")
    assert not chat.prune()  # ran less than a day ago: nothing deleted
    assert len(chat.sessions()) == 2


def test_send_read_and_retry_dedup(chat: ChatStore, clock: Clock) -> None:
    a = chat.by_name(anchor(chat, "a"))
    b = chat.by_name(anchor(chat, "b"))
    assert a is not None and b is not None
    assert chat.send(a.session_id, b.session_id, ["hello"])
    clock.advance(seconds=9)
    assert not chat.send(a.session_id, b.session_id, ["hello"])  # a retry
    clock.advance(seconds=2)
    assert chat.send(a.session_id, b.session_id, ["hello"])  # 11 s later: a new message
    assert chat.unread_count(b.session_id) == 2
    read, left = chat.read_unread(b.session_id)
    assert [(m.body, m.from_name) for m in read] == [("hello", a.name), ("hello", a.name)]
    assert left == 0
    assert chat.unread_count(b.session_id) == 0
    assert chat.send(a.session_id, b.session_id, ["hello"])  # the earlier copy was read
    chat.unregister(a.session_id)
    (late,), _ = chat.read_unread(b.session_id)
    assert late.from_name is None  # the sender left


def test_wakes_renudge_window_and_hourly_cap(chat: ChatStore, clock: Clock) -> None:
    a = chat.by_name(anchor(chat, "a"))
    b = chat.by_name(anchor(chat, "b"))
    assert a is not None and b is not None
    assert chat.wake_telling(b.session_id)[1] is None  # nothing unread
    chat.send(a.session_id, b.session_id, ["one"])
    assert chat.wake_telling(b.session_id)[1] == (1, [a.name])
    assert chat.wake_telling(b.session_id)[1] is None  # delivered within 15 minutes
    clock.advance(minutes=15, seconds=1)
    assert chat.wake_telling(b.session_id)[1] == (1, [a.name])  # re-nudged
    for _ in range(4):
        clock.advance(minutes=1)
        chat.send(a.session_id, b.session_id, [f"more {clock.now}"])
        assert chat.wake_telling(b.session_id)[1] is not None
    clock.advance(minutes=1)
    chat.send(a.session_id, b.session_id, ["seventh"])
    assert chat.wake_telling(b.session_id)[1] is None  # six wakes within the hour
    clock.advance(minutes=45)
    assert chat.wake_telling(b.session_id)[1] == (6, [a.name])
    chat.read_unread(b.session_id)
    clock.advance(hours=1)
    assert chat.wake_telling(b.session_id)[1] is None


def test_a_host_key_is_per_session_and_only_its_hash_is_stored(chat: ChatStore) -> None:
    key_a, key_b = chat.host_key("claude-a"), chat.host_key("claude-b")
    assert re.fullmatch(r"[0-9a-f]{16}", key_a) and key_a != key_b
    assert chat.host_key("claude-a") == key_a  # every hook run prints the same key
    row = host_session_key("claude-a")
    chat.anchor(row, project="o/r", host_kind="claude", worktree="/w", key=key_a)
    assert chat.holds(row, key_a) and not chat.holds(row, key_b) and not chat.holds(row, "")
    stored = [tuple(r) for r in chat.conn.execute("SELECT * FROM chat_keys")]
    assert stored == [(row, hashlib.sha256(key_a.encode()).hexdigest())]
    server = chat.register_server(project="o/r", host_kind="claude", worktree="/w")
    assert not chat.holds(server.session_id, "")  # bound to nothing: nobody holds it
    chat.unregister(row)
    assert not chat.holds(row, key_a)


def test_read_unread_marks_only_the_page_it_returns(chat: ChatStore) -> None:
    a = chat.by_name(anchor(chat, "a"))
    b = chat.by_name(anchor(chat, "b"))
    assert a is not None and b is not None
    chat.send(a.session_id, b.session_id, [f"m{i}" for i in range(5)] + ["x" * 5000])
    page, left = chat.read_unread(b.session_id, lambda found: 2)
    assert [m.body for m in page] == ["m0", "m1"] and left == 4
    page, left = chat.read_unread(b.session_id, lambda found: 0)  # at least one
    assert [m.body for m in page] == ["m2"] and left == 3
    page, left = chat.read_unread(b.session_id, lambda found: len(found), prefix=10)
    assert [(m.body, m.length) for m in page] == [("m3", 2), ("m4", 2), ("x" * 10, 5000)]
    assert left == 0 and chat.unread_count(b.session_id) == 0
    assert chat.read_unread(b.session_id) == ([], 0)


def test_messages_are_pruned_by_age_and_count_in_bounded_steps(
    chat: ChatStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older than 30 days (read or not) or beyond the newest MESSAGES_KEPT: deleted, at
    most PRUNE_BATCH rows a step; the daily stamp only once nothing more is due."""
    from thatch.frontend.store import chat_store

    monkeypatch.setattr(chat_store, "PRUNE_BATCH", 4)
    monkeypatch.setattr(chat_store, "MESSAGES_KEPT", 6)
    a = chat.by_name(anchor(chat, "a"))
    b = chat.by_name(anchor(chat, "b"))
    assert a is not None and b is not None
    chat.send(a.session_id, b.session_id, [f"old{i}" for i in range(6)])
    clock.advance(days=20)
    chat.send(a.session_id, b.session_id, [f"mid{i}" for i in range(3)])
    clock.advance(days=10, seconds=1)
    anchor(chat, "a"), anchor(chat, "b")
    chat.send(a.session_id, b.session_id, [f"new{i}" for i in range(5)])

    def bodies() -> list[str]:
        return [str(r[0]) for r in chat.conn.execute("SELECT body FROM chat_messages ORDER BY id")]

    # Step 1: four of the six 30-day-old rows; then 10 rows > 6, the cap takes the
    # oldest four; a full batch was deleted, so the day is not stamped.
    assert chat.prune()
    assert bodies() == ["mid2", *[f"new{i}" for i in range(5)]]
    assert chat.prune()  # nothing more is due: this step stamps the day
    assert not chat.prune()
    clock.advance(days=1, seconds=1)
    chat.send(a.session_id, b.session_id, ["newest"])
    assert chat.prune()
    assert bodies() == [*[f"new{i}" for i in range(5)], "newest"]
