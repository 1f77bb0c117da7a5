"""Shared vector snapshots: a new process maps them, and they never change a result."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.brute_force import brute_force
from tests.support.leases import leases, truncating
from thatch.frontend.store import vector_snapshot
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.schema import CHANGES_KEPT
from thatch.frontend.store.vector_snapshot import (
    ALIGN,
    PREFIX,
    DatabaseIdentity,
    peek_seq,
    read_snapshot,
    snapshot_path,
)

DIM = 16
INSERT = (
    "INSERT INTO entries (slug, store, label, content, embedding, archived, branch, "
    "created_at, updated_at) VALUES (?, ?, ?, '#', ?, ?, ?, 't', 't')"
)

# Run in a new process: search with snapshots on, print the results and how many full
# loads it needed (zero when it mapped the snapshot).
SEARCHER = """
import json, sys
import numpy as np
from pathlib import Path
from thatch.frontend.store.memory_store import Store

db, snaps, queries = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
loads = []
with Store.open(db, snapshot_dir=Path(snaps)) as store:
    original = store._load_matrix
    store._load_matrix = lambda name: (loads.append(name), original(name))[1]
    results = []
    for query, options in queries:
        found = store.search(["p", "q"], np.array(query, dtype=np.float32), **options)
        results.append([[m.memory.store, m.memory.slug, m.score] for m in found])
print(json.dumps({"loads": loads, "results": results}))
"""


def blob(rng: np.random.Generator, dim: int = DIM) -> bytes:
    return rng.normal(size=dim).astype("<f4").tobytes()


def fill(path: Path, rows: int, seed: int) -> None:
    """Rows of two dimensions, some archived, some on branches, in stores p and q."""
    rng = np.random.default_rng(seed)
    with Store.open(path) as store:
        conn = store.conn
        conn.execute("BEGIN")
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES ('p'), ('q')")
        conn.executemany(
            INSERT,
            [
                (f"m{i}", "pq"[i % 2], f"m{i}", blob(rng, DIM * 2 if i % 17 == 0 else DIM),
                 int(i % 5 == 0), [None, "dev", "main"][i % 3])
                for i in range(rows)
            ],
        )  # fmt: skip
        conn.execute("COMMIT")


def queries(seed: int) -> list:
    rng = np.random.default_rng(seed)
    options = [{}, {"branch": "dev"}, {"include_archived": True}, {"limit": 3}]
    found = [[rng.normal(size=DIM).tolist(), option] for option in options]
    return [*found, [rng.normal(size=DIM * 2).tolist(), {}]]


def search_in_new_process(path: Path, snaps: Path, asked: list) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SEARCHER, str(path), str(snaps), json.dumps(asked)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def assert_exact(path: Path, answer: dict, asked: list) -> None:
    for (query, options), got in zip(asked, answer["results"], strict=True):
        expected = brute_force(path, ["p", "q"], np.array(query, dtype=np.float32), **options)
        assert [tuple(row[:2]) for row in got] == [row[:2] for row in expected]
        assert [row[2] for row in got] == pytest.approx([row[2] for row in expected], abs=1e-12)


def snapshot_files(snaps: Path) -> list[Path]:
    return sorted(snaps.glob("*.vec")) if snaps.exists() else []


@pytest.fixture
def path(tmp_path: Path) -> Path:
    path = tmp_path / "thatch.db"
    fill(path, 2400, seed=1)
    return path


@pytest.fixture
def snaps(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "thatch" / "vectors"


def test_a_new_process_maps_the_snapshot_and_matches_brute_force(path: Path, snaps: Path) -> None:
    asked = queries(2)
    first = search_in_new_process(path, snaps, asked)
    assert sorted(first["loads"]) == ["p", "q"]  # nothing to map yet: loaded, then written
    assert len(snapshot_files(snaps)) == 2
    second = search_in_new_process(path, snaps, asked)
    assert second["loads"] == []
    assert_exact(path, second, asked)
    assert second["results"] == first["results"]


def test_writes_by_another_process_after_the_snapshot_are_seen(path: Path, snaps: Path) -> None:
    asked = queries(3)
    search_in_new_process(path, snaps, asked)
    rng = np.random.default_rng(4)
    target = np.array(asked[0][0], dtype=np.float32).astype("<f4").tobytes()
    writer = (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        f"conn.execute({INSERT!r}, ('new', 'p', 'new', bytes.fromhex(sys.argv[2]), 0, None))\n"
        "conn.execute(\"UPDATE entries SET embedding = ? WHERE slug = 'm2'\", "
        "(bytes.fromhex(sys.argv[3]),))\n"
        "conn.execute(\"UPDATE entries SET archived = 1 WHERE slug = 'm4'\")\n"
        "conn.execute(\"UPDATE entries SET branch = 'dev' WHERE slug = 'm6'\")\n"
        "conn.execute(\"UPDATE entries SET store = 'q' WHERE slug = 'm8'\")\n"
        "conn.execute(\"UPDATE entries SET embedding = NULL WHERE slug = 'm10'\")\n"
        "conn.execute(\"DELETE FROM entries WHERE slug IN ('m12', 'm13', 'm17')\")\n"
    )
    subprocess.run(
        [sys.executable, "-c", writer, str(path), target.hex(), blob(rng).hex()],
        check=True, timeout=60,
    )  # fmt: skip
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] == []  # mapped, then caught up from the log
    assert answer["results"][0][0][1] == "new"
    assert_exact(path, answer, asked)


@pytest.mark.parametrize("damage", ["truncated", "magic", "header", "foreign store", "empty"])
def test_a_damaged_or_foreign_snapshot_is_ignored_and_replaced(
    path: Path, snaps: Path, damage: str
) -> None:
    asked = queries(5)
    search_in_new_process(path, snaps, asked)
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    target = snapshot_path(snaps, identity, "p")
    other = snapshot_path(snaps, identity, "q")
    data = target.read_bytes()
    if damage == "truncated":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "magic":
        target.write_bytes(b"X" + data[1:])
    elif damage == "header":
        target.write_bytes(data[:20] + b"\xff{" + data[22:])
    elif damage == "foreign store":
        target.write_bytes(other.read_bytes())
    else:
        target.write_bytes(b"")
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] == ["p"]
    assert_exact(path, answer, asked)
    assert peek_seq(target, identity, "p") is not None  # replaced by a good one
    assert search_in_new_process(path, snaps, asked)["loads"] == []


def test_a_database_recreated_at_the_same_path_never_uses_the_old_snapshot(
    tmp_path: Path, snaps: Path
) -> None:
    """Same path and inode, same slugs in the same order, so the same log: only rows differ.

    (Copied over the old file in place, as a restore with ``cp`` does.)
    """
    path, other = tmp_path / "thatch.db", tmp_path / "other.db"
    fill(path, 2400, seed=6)
    fill(other, 2400, seed=8)
    asked = queries(7)
    search_in_new_process(path, snaps, asked)
    inode = path.stat().st_ino
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with open(path, "r+b") as target:
        target.truncate(0)
        target.write(other.read_bytes())
    assert path.stat().st_ino == inode
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] != []
    assert_exact(path, answer, asked)


def test_a_pruned_log_forces_a_reload(path: Path, snaps: Path) -> None:
    asked = queries(9)
    search_in_new_process(path, snaps, asked)
    rng = np.random.default_rng(10)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            INSERT, [(f"bulk{i}", "p", "b", blob(rng), 0, None) for i in range(CHANGES_KEPT + 20)]
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
    answer = search_in_new_process(path, snaps, asked)
    assert "p" in answer["loads"]
    assert_exact(path, answer, asked)


def test_small_stores_get_no_snapshot(tmp_path: Path, snaps: Path) -> None:
    path = tmp_path / "small.db"
    fill(path, 300, seed=15)
    asked = queries(16)
    for _ in range(2):
        answer = search_in_new_process(path, snaps, asked)
        assert sorted(answer["loads"]) == ["p", "q"]
        assert_exact(path, answer, asked)
    assert snapshot_files(snaps) == []


def test_a_read_only_cache_dir_still_answers_exactly(path: Path, snaps: Path) -> None:
    """(Run as root, the directory stays writable: then only the answers are checked.)"""
    snaps.mkdir(parents=True)
    snaps.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        asked = queries(11)
        answer = search_in_new_process(path, snaps, asked)
        assert_exact(path, answer, asked)
        if os.geteuid() != 0:
            assert snapshot_files(snaps) == []
            assert search_in_new_process(path, snaps, asked)["results"] == answer["results"]
    finally:
        snaps.chmod(stat.S_IRWXU)


def test_an_unusable_cache_path_still_answers_exactly(path: Path, tmp_path: Path) -> None:
    """A file where the directory should be: nothing can be written, nothing fails."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    asked = queries(12)
    answer = search_in_new_process(path, blocker / "vectors", asked)
    assert_exact(path, answer, asked)


def test_results_are_identical_with_and_without_snapshots(path: Path, snaps: Path) -> None:
    """One long-lived store without snapshots, one mapped, through 200 random writes."""
    search_in_new_process(path, snaps, queries(13))
    rng = np.random.default_rng(14)
    other = sqlite3.connect(path, isolation_level=None)
    with Store.open(path) as plain, Store.open(path, snapshot_dir=snaps) as mapped:
        try:
            for step in range(200):
                slug = f"m{rng.integers(0, 2420)}"
                kind = rng.integers(0, 3)
                if kind == 0:
                    other.execute(
                        "INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, "
                        "created_at, updated_at) VALUES (?, ?, ?, '#', ?, 't', 't')",
                        (slug, str(rng.choice(["p", "q"])), slug, blob(rng)),
                    )
                elif kind == 1:
                    other.execute("DELETE FROM entries WHERE slug = ?", (slug,))
                else:
                    other.execute(
                        "UPDATE entries SET embedding = ? WHERE slug = ?", (blob(rng), slug)
                    )
                query = rng.normal(size=DIM).astype(np.float32)
                options: dict[str, Any] = {"branch": "dev"} if step % 3 == 0 else {}
                got = [
                    (m.memory.store, m.memory.slug, m.score)
                    for m in mapped.search(["p", "q"], query, limit=5, **options)
                ]
                expected = [
                    (m.memory.store, m.memory.slug, m.score)
                    for m in plain.search(["p", "q"], query, limit=5, **options)
                ]
                assert got == expected
        finally:
            other.close()


def test_a_mapped_store_never_writes_the_shared_file(path: Path, snaps: Path) -> None:
    """Catch-up edits rows of the private map; the file other processes map stays as is."""
    asked = queries(17)
    search_in_new_process(path, snaps, asked)
    before = {file: file.read_bytes() for file in snapshot_files(snaps)}
    rng = np.random.default_rng(18)
    with Store.open(path, snapshot_dir=snaps) as mapped:
        mapped.search(["p", "q"], rng.normal(size=DIM))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            for i in range(0, 40, 2):
                other.execute(
                    "UPDATE entries SET embedding = ? WHERE slug = ?", (blob(rng), f"m{i}")
                )
            other.execute("DELETE FROM entries WHERE slug IN ('m1', 'm3')")
        finally:
            other.close()
        query = rng.normal(size=DIM).astype(np.float32)
        got = [[m.memory.store, m.memory.slug, m.score] for m in mapped.search(["p", "q"], query)]
    expected = brute_force(path, ["p", "q"], query)
    assert [tuple(row[:2]) for row in got] == [row[:2] for row in expected]
    assert {file: file.read_bytes() for file in snapshot_files(snaps)} == before


def test_temp_files_of_dead_writers_are_removed(path: Path, snaps: Path) -> None:
    snaps.mkdir(parents=True)
    abandoned, recent = snaps / ".snap-dead.tmp", snaps / ".snap-busy.tmp"
    abandoned.write_bytes(b"half a snapshot")
    recent.write_bytes(b"being written")
    os.utime(abandoned, (1, 1))
    search_in_new_process(path, snaps, queries(19))
    assert not abandoned.exists()
    assert recent.exists()
    assert len(snapshot_files(snaps)) == 2


def test_a_long_lived_process_refreshes_a_snapshot_that_drifted(path: Path, snaps: Path) -> None:
    """Past half of what catch-up allows, the process writes its caught-up matrix anew."""
    search_in_new_process(path, snaps, queries(20))
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    target = snapshot_path(snaps, identity, "p")
    old_seq = peek_seq(target, identity, "p")
    assert old_seq is not None
    rng = np.random.default_rng(21)
    with Store.open(path, snapshot_dir=snaps) as mapped:
        mapped.search(["p"], rng.normal(size=DIM))
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN")
            other.executemany(
                "UPDATE entries SET embedding = ? WHERE slug = ?",
                [(blob(rng), f"m{i}") for i in range(0, 800, 2)],  # 400 rows of store p
            )
            other.execute("COMMIT")
        finally:
            other.close()
        mapped.search(["p"], rng.normal(size=DIM))
    new_seq = peek_seq(target, identity, "p")
    assert new_seq is not None and new_seq >= old_seq + 400
    asked = queries(22)
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] == []
    assert_exact(path, answer, asked)


def test_a_map_only_store_writes_no_snapshot_but_maps_one(path: Path, snaps: Path) -> None:
    """The prompt hook's store (write_snapshots=False) never writes a file (its host waits
    for it to exit); once another process wrote one, it maps it with no load."""
    asked = queries(7)
    with Store.open(path, snapshot_dir=snaps, write_snapshots=False) as store:
        for query, options in asked:
            store.search(["p", "q"], np.array(query, dtype=np.float32), **options)
    assert snapshot_files(snaps) == []
    search_in_new_process(path, snaps, asked)  # writes them
    written = snapshot_files(snaps)
    assert written
    loads: list[str] = []
    with Store.open(path, snapshot_dir=snaps, write_snapshots=False) as store:
        original = store._load_matrix
        store._load_matrix = lambda name: (loads.append(name), original(name))[1]  # type: ignore[method-assign, assignment, func-returns-value]
        store.search(["p", "q"], np.array(asked[0][0], dtype=np.float32))
    assert loads == [] and snapshot_files(snaps) == written


def test_a_process_writing_its_own_memories_still_refreshes_its_snapshot(
    path: Path, snaps: Path
) -> None:
    """Own writes taken into the matrix directly still count as drift: past half of what
    catch-up allows, the next read writes the snapshot anew, and a new process maps it."""
    search_in_new_process(path, snaps, queries(23))
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    target = snapshot_path(snaps, identity, "p")
    old_seq = peek_seq(target, identity, "p")
    assert old_seq is not None
    rng = np.random.default_rng(24)
    with Store.open(path, snapshot_dir=snaps) as store:
        store.search(["p"], rng.normal(size=DIM))
        for i in range(300):  # store p has 1,200 rows: catch-up allows 512, so 256 drift
            store.remember("p", f"own {i}", f"# own {i}", rng.normal(size=DIM), "m")
            if i % 50 == 0:  # the mapped matrix took the row in: still exact
                query = rng.normal(size=DIM).astype(np.float32)
                got = [(m.memory.store, m.memory.slug) for m in store.search(["p"], query)]
                assert got == [row[:2] for row in brute_force(path, ["p"], query)]
        store.search(["p"], rng.normal(size=DIM))
    new_seq = peek_seq(target, identity, "p")
    assert new_seq is not None and new_seq >= old_seq + 257
    asked = queries(25)
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] == []
    assert_exact(path, answer, asked)


@pytest.mark.parametrize("array", ["unit", "norms", "archived", "codes", "slugs"])
def test_one_flipped_bit_in_any_array_fails_the_checksum(
    path: Path, snaps: Path, array: str
) -> None:
    """Read straight after a write the file maps; one bit changed anywhere a reader uses
    and it does not (the process then loads and replaces it)."""
    search_in_new_process(path, snaps, queries(26))
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    target = snapshot_path(snaps, identity, "p")
    assert read_snapshot(target, identity, "p") is not None
    raw = bytearray(target.read_bytes())
    header_len = PREFIX.unpack_from(raw)[2]
    header = json.loads(bytes(raw[PREFIX.size : PREFIX.size + header_len]))
    base = -(-(PREFIX.size + header_len) // ALIGN) * ALIGN
    group = max(header["groups"], key=lambda g: g["count"])
    raw[base + group[array] + 1] ^= 0x10
    target.chmod(0o600)
    target.write_bytes(bytes(raw))
    assert read_snapshot(target, identity, "p") is None
    asked = queries(27)
    answer = search_in_new_process(path, snaps, asked)
    assert answer["loads"] == ["p"]
    assert_exact(path, answer, asked)
    assert read_snapshot(target, identity, "p") is not None


# Run in a new process (a SIGBUS must not take pytest down): map the snapshot, then after
# the parent shortened it, save memories (the cache's own-write path) and search again.
SHORTENED = """
import json, sys
import numpy as np
from pathlib import Path
from thatch.frontend.store.memory_store import Store

db, snaps = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(28)
with Store.open(db, snapshot_dir=Path(snaps)) as store:
    store.search(["p"], rng.normal(size=16).astype(np.float32))
    print("mapped", flush=True)
    sys.stdin.readline()
    for i in range(40):
        store.remember("p", f"late {i}", f"# late {i}", rng.normal(size=16), "m")
    query = rng.normal(size=16).astype(np.float32)
    found = store.search(["p"], query)
    print(json.dumps([query.tolist(), [m.memory.slug for m in found]]), flush=True)
"""


def test_a_shortened_snapshot_is_never_touched_by_own_writes(path: Path, snaps: Path) -> None:
    """Own writes put rows straight into the mapped matrix: a truncated file would fault
    (SIGBUS); the waiting truncation shows in the lease, which drops the matrix first."""
    search_in_new_process(path, snaps, queries(29))
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    target = snapshot_path(snaps, identity, "p")
    child = subprocess.Popen(
        [sys.executable, "-c", SHORTENED, str(path), str(snaps)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "mapped\n"
        assert leases(target) == [("ACTIVE", child.pid)]
        # The truncation waits for the child's next use to let go of the file.
        with truncating(target, ALIGN * 2) as waiting:
            assert waiting.is_alive()  # nothing else can end the wait
            child.stdin.write("go\n")
            child.stdin.flush()
            query, slugs = json.loads(child.stdout.readline())
        assert child.wait(120) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                pipe.close()
    expected = brute_force(path, ["p"], np.array(query, dtype=np.float32))
    assert slugs == [row[1] for row in expected]
    # The child wrote a good snapshot again, or (its reload read the file into private
    # memory while the truncation waited) left the next process to replace it.
    asked = queries(30)
    assert_exact(path, search_in_new_process(path, snaps, asked), asked)
    assert peek_seq(target, identity, "p") is not None


def written_snapshot(path: Path, snaps: Path) -> tuple[Path, DatabaseIdentity]:
    search_in_new_process(path, snaps, queries(31))
    identity = DatabaseIdentity.of(path)
    assert identity is not None
    return snapshot_path(snaps, identity, "p"), identity


def unit_sums(target: Path, identity: DatabaseIdentity) -> tuple[list[float], bool]:
    """Every group's unit vectors summed (each page read), and whether the file is intact,
    from a snapshot that lives only in this call (its mapping is gone on return)."""
    found = read_snapshot(target, identity, "p")
    assert found is not None
    return [float(g.unit[: g.count].sum()) for g in found.groups], found.file.intact()


def test_a_writer_waits_until_the_mapping_is_gone(path: Path, snaps: Path) -> None:
    """The process mapping a snapshot holds a read lease: a truncation waits for it, the
    lease shows the wait (the cache then drops the matrix), every page stays readable,
    and the lease's signal (SIGURG, not SIGIO) leaves the process alone."""
    target, identity = written_snapshot(path, snaps)
    before, _ = unit_sums(target, identity)
    found = read_snapshot(target, identity, "p")
    assert found is not None and found.file.lease is not None
    assert found.file.intact()
    assert leases(target) == [("ACTIVE", os.getpid())]
    with truncating(target, ALIGN * 2) as waiting:
        assert not found.file.intact()
        assert waiting.is_alive()
        assert [float(g.unit[: g.count].sum()) for g in found.groups] == before
        assert target.stat().st_size > ALIGN * 2
        del found  # the last reference: the mapping goes, the lease with it
    assert target.stat().st_size == ALIGN * 2
    assert leases(target) == []
    assert read_snapshot(target, identity, "p") is None


def test_a_snapshot_open_for_writing_is_read_into_private_memory(path: Path, snaps: Path) -> None:
    """Someone holding the file open for writing refuses the lease (as NFS without a
    delegation does): a copy, which what that writer does next cannot touch."""
    target, identity = written_snapshot(path, snaps)
    before, _ = unit_sums(target, identity)
    target.chmod(0o600)
    writer = os.open(target, os.O_WRONLY)
    try:
        found = read_snapshot(target, identity, "p")
        assert found is not None and found.file.lease is None
        assert leases(target) == []
        os.ftruncate(writer, ALIGN * 2)
        os.pwrite(writer, b"\xff" * ALIGN, ALIGN)
    finally:
        os.close(writer)
    assert found.file.intact()
    assert [float(g.unit[: g.count].sum()) for g in found.groups] == before
    assert read_snapshot(target, identity, "p") is None  # the file itself is spoilt


@pytest.mark.parametrize("kind", ["refused", "not Linux"])
def test_without_leases_a_snapshot_is_read_into_private_memory(
    path: Path, snaps: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A file system that grants no lease (EINVAL), or a platform without leases (no
    F_SETLEASE in ``fcntl``): a copy, which a truncation cannot touch."""
    target, identity = written_snapshot(path, snaps)
    before, _ = unit_sums(target, identity)

    def no_leases(fd: int, command: int, arg: int = 0) -> int:
        if command == fcntl.F_SETLEASE:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return fcntl.fcntl(fd, command, arg)

    if kind == "refused":
        stand_in = {**vars(fcntl), "fcntl": no_leases}
    else:
        lease_names = ("F_SETLEASE", "F_GETLEASE", "F_SETSIG", "F_GETSIG")
        stand_in = {name: value for name, value in vars(fcntl).items() if name not in lease_names}
    monkeypatch.setattr(vector_snapshot, "fcntl", SimpleNamespace(**stand_in))
    found = read_snapshot(target, identity, "p")
    assert found is not None and found.file.lease is None
    assert leases(target) == []
    os.truncate(target, ALIGN * 2)  # nobody to wait for
    assert found.file.intact()
    assert [float(g.unit[: g.count].sum()) for g in found.groups] == before
