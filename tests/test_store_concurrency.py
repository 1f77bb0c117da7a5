"""Several processes on one database file, and the matrix cache staying correct meanwhile."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from thatch.frontend.store.db import atomic
from thatch.frontend.store.memory_store import Store

WORKERS = 6
WRITES_PER_WORKER = 150

# count < 0 writes until killed.
WRITER = """
import sys
import numpy as np
from thatch.frontend.store.memory_store import Store, RememberOutcome

path, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(worker)
with Store.open(path) as store:
    i = 0
    while count < 0 or i < count:
        vector = rng.normal(size=384).astype(np.float32)
        outcome = store.remember("p", f"w{worker}-{i}", f"# w{worker}-{i}", vector, "m")
        assert outcome is RememberOutcome.SAVED, outcome
        i += 1
print("ok")
"""


def spawn_writer(path: Path, worker: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(worker), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def row_count(path: Path) -> int:
    conn = sqlite3.connect(path, timeout=5)
    try:
        return int(conn.execute("SELECT count(*) FROM entries").fetchone()[0])
    finally:
        conn.close()


def test_parallel_writers_lose_nothing_and_never_see_locked(tmp_path: Path) -> None:
    """6 processes × 150 remembers into one fresh file: exact row count, no lock errors."""
    path = tmp_path / "thatch.db"
    writers = [spawn_writer(path, worker, WRITES_PER_WORKER) for worker in range(WORKERS)]
    results = [writer.communicate(timeout=120) for writer in writers]
    for writer, (out, err) in zip(writers, results, strict=True):
        assert "locked" not in err and "busy" not in err, err
        assert writer.returncode == 0 and out.strip() == "ok", err
    assert row_count(path) == WORKERS * WRITES_PER_WORKER
    with Store.open(path) as store:
        assert store.store_counts() == {"global": 0, "p": WORKERS * WRITES_PER_WORKER}
        assert store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_killed_writer_leaves_a_sound_database(tmp_path: Path) -> None:
    """SIGKILL in the middle of a write stream: integrity_check ok, store keeps working."""
    path = tmp_path / "thatch.db"
    Store.open(path).close()
    writer = spawn_writer(path, 99, -1)
    try:
        deadline = time.monotonic() + 60
        while row_count(path) < 100:
            assert writer.poll() is None, writer.communicate()[1]
            assert time.monotonic() < deadline, "writer made no progress"
            time.sleep(0.005)  # polling interval; the condition above is the synchronisation
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    with Store.open(path) as store:
        assert store.conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        written = store.store_counts()["p"]
        assert written >= 100
        assert [m.slug for m in store.list("p")] == sorted(f"w99-{i}" for i in range(written))
        store.remember("p", "after", "# after", np.ones(384, dtype=np.float32), "m")
        assert store.store_counts()["p"] == written + 1


@pytest.fixture
def long_lived(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db") as store:
        yield store


def vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def slugs(store: Store, query: np.ndarray) -> list[str]:
    return [m.memory.slug for m in store.search(["p"], query)]


def test_cache_sees_writes_of_another_connection(long_lived: Store, tmp_path: Path) -> None:
    """Insert, fill, archive and forget through a second connection all show up at once."""
    long_lived.remember("p", "first", "# first", vec(1, 0), "m")
    assert slugs(long_lived, vec(1, 0)) == ["first"]
    with Store.open(tmp_path / "thatch.db") as other:
        other.remember("p", "second", "# second", vec(1, 0.1), "m")
        assert slugs(long_lived, vec(1, 0)) == ["first", "second"]
        other.remember("p", "pending", "# pending", None, None)
        [pending] = other.pending_memories()
        assert other.fill_embedding(pending, vec(1, 0.05), "m")
        assert slugs(long_lived, vec(1, 0)) == ["first", "pending", "second"]
        other.remember("p", "first", "# first", vec(1, 0), "m", overwrite=True, archived=True)
        assert slugs(long_lived, vec(1, 0)) == ["pending", "second"]
        other.forget("p", "second")
        assert slugs(long_lived, vec(1, 0)) == ["pending"]
        assert [p.slug_a for p in long_lived.find_duplicates("p")] == []


def test_cache_sees_writes_of_another_process(long_lived: Store, tmp_path: Path) -> None:
    """A memory written by another process is found by the next search of a long-lived store."""
    long_lived.remember("p", "mine", "# mine", np.ones(384, dtype=np.float32), "m")
    assert len(long_lived.search(["p"], np.ones(384, dtype=np.float32))) == 1
    writer = spawn_writer(tmp_path / "thatch.db", 5, 3)
    _out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    found = long_lived.search(["p"], np.ones(384, dtype=np.float32))
    assert sorted(m.memory.slug for m in found) == ["mine", "w5-0", "w5-1", "w5-2"]


def test_cache_is_reused_until_the_store_changes(
    long_lived: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reload for searches, recall stamps or other stores' writes; a change is seen
    by re-reading the changed rows only, never by reloading the store."""
    long_lived.remember("p", "a", "# a", vec(1, 0), "m")
    loads: list[str] = []
    original = long_lived._load_matrix

    def counting(store: str):  # type: ignore[no-untyped-def]
        loads.append(store)
        return original(store)

    monkeypatch.setattr(long_lived, "_load_matrix", counting)
    long_lived.search(["p"], vec(1, 0))
    long_lived.search(["p"], vec(0, 1))
    long_lived.find_similar("p", vec(1, 0))
    # remember loaded p already (its duplicate check): no search loads it again.
    assert loads == []
    long_lived.recall(["p"], vec(1, 0))
    [match] = long_lived.search(["p"], vec(1, 0))
    assert match.memory.recall_count == 1  # shown as it is now, from the row itself
    long_lived.remember("q", "elsewhere", "# e", vec(1, 0), "m")
    long_lived.search(["p"], vec(1, 0))
    # The write to q compared it with its own store (duplicate candidates): q loads once.
    assert loads == ["q"]
    long_lived.remember("p", "b", "# b", vec(0, 1), "m")
    assert slugs(long_lived, vec(0, 1)) == ["b", "a"]
    long_lived.forget("p", "a")
    assert slugs(long_lived, vec(1, 0)) == ["b"]
    assert loads == ["q"]


def test_rolled_back_writes_never_linger_in_the_cache(long_lived: Store) -> None:
    """A search inside a caller's transaction that is then rolled back leaves no trace."""
    long_lived.remember("p", "kept", "# kept", vec(1, 0), "m")
    assert slugs(long_lived, vec(1, 0)) == ["kept"]
    with pytest.raises(RuntimeError), atomic(long_lived.conn):
        long_lived.conn.execute(
            "INSERT INTO entries (slug, store, label, content, embedding, created_at, "
            "updated_at) VALUES ('ghost', 'p', 'ghost', '# g', ?, 't', 't')",
            (vec(1, 0).tobytes(),),
        )
        assert slugs(long_lived, vec(1, 0)) == ["ghost", "kept"]
        raise RuntimeError("roll back")
    assert slugs(long_lived, vec(1, 0)) == ["kept"]


# Everything is imported before the process says it is ready: released at once, the
# openers reach the WAL switch together (released before importing, they arrived
# hundreds of milliseconds apart and the race never happened).
OPENER = """
import os, sys
from thatch.frontend.store.memory_store import Store
ready, go = int(sys.argv[2]), int(sys.argv[3])
os.write(ready, b"r")
os.read(go, 1)  # all released at once
with Store.open(sys.argv[1]) as store:
    store.store_names()
"""


def test_processes_opening_a_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """8 processes released together onto a file none has made yet: every one opens it
    (the directory, the WAL switch and the schema made once). SQLite answers a loser of
    the WAL switch SQLITE_BUSY at once; the openers meet that only when scheduled within
    microseconds of each other, so test_wal_switch_refused_at_once_is_retried makes the
    refusal for sure."""
    for round_ in range(5):
        db = tmp_path / f"round{round_}.db"
        ready_r, ready_w = os.pipe()
        go_r, go_w = os.pipe()
        openers = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(db), str(ready_w), str(go_r)],
                pass_fds=(ready_w, go_r),
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(8)
        ]
        for _ in openers:
            assert os.read(ready_r, 1) == b"r"
        os.write(go_w, b"g" * len(openers))
        results = [opener.communicate(timeout=120) for opener in openers]
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
        assert [(o.returncode, err) for o, (_, err) in zip(openers, results, strict=True)] == [
            (0, "")
        ] * len(openers)
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# Holds the write lock on a file that is not in WAL mode yet, as another opener does in
# the middle of its own switch, until told to let go.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
print("released", flush=True)
"""

# Opens the file with the store. The retry's pause is where it says, once, that the
# switch was refused ("busy" on stdout) and waits to be told the lock is free: the
# only change to the code under test is that the first pause waits for that word.
SWITCHER = """
import sys, time
from thatch.frontend.store import db
from thatch.frontend.store.memory_store import Store


class FirstPauseWaits:
    monotonic = staticmethod(time.monotonic)
    waited = False

    def sleep(self, seconds):
        if not self.waited:
            self.waited = True
            print("busy", flush=True)
            assert sys.stdin.readline() == "go\\n"
        time.sleep(seconds)


db.time = FirstPauseWaits()
with Store.open(sys.argv[1]) as store:
    print(store.store_names(), flush=True)
"""


def test_wal_switch_refused_at_once_is_retried(tmp_path: Path) -> None:
    """SQLite refuses the WAL switch at once, without the busy handler, while another
    connection holds the write lock on the file (waiting could deadlock): the opener
    retries, and opens once that lock is let go. The refusal is made for sure (a holder
    process) and the lock let go only after the opener has met it."""
    db = tmp_path / "thatch.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    switcher = None
    try:
        assert holder.stdin is not None and holder.stdout is not None
        assert holder.stdout.readline() == "held\n", holder.stderr
        switcher = subprocess.Popen(
            [sys.executable, "-c", SWITCHER, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert switcher.stdin is not None and switcher.stdout is not None
        said = switcher.stdout.readline()
        assert said == "busy\n", (said, switcher.stderr and switcher.stderr.read())
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "released\n"
        out, err = switcher.communicate("go\n", timeout=120)
        assert (switcher.returncode, out, err) == (0, "['global']\n", "")
    finally:
        for process in (holder, switcher):
            if process is not None:
                if process.poll() is None:
                    process.kill()
                process.communicate()  # closes its pipes
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
