"""The cached ranking matrix follows every change by any writer, row by row (schema m007)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.brute_force import brute_force
from thatch.frontend.store.matrix import StoreMatrix
from thatch.frontend.store.memory import RememberOutcome
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.schema import CHANGES_KEPT, CHANGES_TABLE

DIM = 16


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "thatch.db"


@pytest.fixture
def cached(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Store, list[str]]]:
    """A long-lived store and the list of stores it loaded whole."""
    with Store.open(path) as store:
        loads: list[str] = []
        original = store._load_matrix

        def counting(name: str):  # type: ignore[no-untyped-def]
            loads.append(name)
            return original(name)

        monkeypatch.setattr(store, "_load_matrix", counting)
        yield store, loads


def found(store: Store, stores: list[str], query: np.ndarray, **options: object) -> list:
    return [
        (m.memory.store, m.memory.slug, m.score)
        for m in store.search(stores, query, **options)  # type: ignore[arg-type]
    ]


def assert_same(got: list, expected: list) -> None:
    assert [(s, slug) for s, slug, _ in got] == [(s, slug) for s, slug, _ in expected]
    assert [score for *_, score in got] == pytest.approx([s for *_, s in expected], abs=1e-12)


def blob(rng: np.random.Generator, dim: int = DIM) -> bytes:
    return rng.normal(size=dim).astype("<f4").tobytes()


def test_other_connection_writes_are_seen_without_reloading(
    cached: tuple[Store, list[str]], path: Path
) -> None:
    """Insert, update, archive, branch, move store, rename, NULL and bad BLOBs, delete."""
    store, loads = cached
    rng = np.random.default_rng(3)
    for i in range(40):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    query = rng.normal(size=DIM).astype(np.float32)
    assert_same(found(store, ["p", "q"], query), brute_force(path, ["p", "q"], query))
    assert loads == ["p", "q"]
    other = sqlite3.connect(path, isolation_level=None)
    insert = (
        "INSERT INTO entries (slug, store, label, content, embedding, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, 't', 't')"
    )
    steps = [
        (insert, ("new", "p", "new", "# new", query.astype("<f4").tobytes())),
        ("UPDATE entries SET embedding = ? WHERE slug = 'm1'", (blob(rng),)),
        ("UPDATE entries SET archived = 1 WHERE slug = 'new'", ()),
        ("UPDATE entries SET archived = 0, branch = 'dev' WHERE slug = 'new'", ()),
        ("INSERT OR IGNORE INTO stores (name) VALUES ('q')", ()),
        ("UPDATE entries SET store = 'q' WHERE slug = 'm2'", ()),
        ("UPDATE entries SET slug = 'm3-renamed' WHERE slug = 'm3'", ()),
        ("UPDATE entries SET embedding = NULL WHERE slug = 'm4'", ()),
        ("UPDATE entries SET embedding = x'0102' WHERE slug = 'm5'", ()),
        ("UPDATE entries SET embedding = ? WHERE slug = 'm6'", (blob(rng, DIM * 2),)),
        ("UPDATE entries SET embedding = ? WHERE slug = 'm7'", (b"\x00\x00\xc0\x7f" * DIM,)),
        ("DELETE FROM entries WHERE slug = 'm8'", ()),
        ("INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, created_at, "
         "updated_at) VALUES ('m9', 'p', 'm9', '# m9 again', ?, 't', 't')", (blob(rng),)),
    ]  # fmt: skip
    try:
        for sql, params in steps:
            other.execute(sql, params)
            for options in ({}, {"include_archived": True}, {"branch": "dev"}, {"limit": 3}):
                assert_same(
                    found(store, ["p", "q"], query, **options),
                    brute_force(path, ["p", "q"], query, **options),
                )
    finally:
        other.close()
    wide = rng.normal(size=DIM * 2).astype(np.float32)
    assert [m.memory.slug for m in store.search(["p"], wide)] == ["m6"]
    assert loads == ["p", "q"]


def test_random_changes_keep_cache_equal_to_a_fresh_load(
    cached: tuple[Store, list[str]], path: Path
) -> None:
    """300 random writes through another connection; after each, cache == brute force."""
    store, loads = cached
    rng = np.random.default_rng(11)
    for i in range(60):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("INSERT OR IGNORE INTO stores (name) VALUES ('q')")
    try:
        for step in range(300):
            slug = f"m{rng.integers(0, 80)}"
            kind = rng.integers(0, 5)
            if kind == 0:
                other.execute(
                    "INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, "
                    "archived, created_at, updated_at) VALUES (?, ?, ?, '#', ?, ?, 't', 't')",
                    (slug, str(rng.choice(["p", "q"])), slug, blob(rng), int(rng.integers(0, 2))),
                )
            elif kind == 1:
                other.execute("DELETE FROM entries WHERE slug = ?", (slug,))
            elif kind == 2:
                other.execute("UPDATE entries SET embedding = ? WHERE slug = ?", (blob(rng), slug))
            elif kind == 3:
                other.execute(
                    "UPDATE OR REPLACE entries "
                    "SET store = CASE store WHEN 'p' THEN 'q' ELSE 'p' END WHERE slug = ?",
                    (slug,),
                )
            else:
                other.execute(
                    "UPDATE entries SET branch = ? WHERE slug = ?",
                    (None if step % 2 else "dev", slug),
                )
            query = rng.normal(size=DIM).astype(np.float32)
            options = {"branch": "dev"} if step % 3 == 0 else {}
            assert_same(
                found(store, ["p", "q"], query, limit=5, **options),
                brute_force(path, ["p", "q"], query, limit=5, **options),
            )
    finally:
        other.close()
    assert loads == ["p", "q"]


def test_a_cache_behind_the_pruned_log_reloads_once_and_is_right(
    cached: tuple[Store, list[str]], path: Path
) -> None:
    """More changes than the log keeps since the cached state: one full load, exact again."""
    store, loads = cached
    rng = np.random.default_rng(5)
    store.remember("p", "a", "# a", rng.normal(size=DIM), "m")
    query = rng.normal(size=DIM).astype(np.float32)
    found(store, ["p"], query)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN")
        other.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, created_at, "
            "updated_at) VALUES (?, 'p', ?, '#', ?, 't', 't')",
            [(f"bulk{i}", f"bulk{i}", blob(rng)) for i in range(CHANGES_KEPT + 50)],
        )
        other.execute("COMMIT")
        kept = other.execute(f"SELECT count(*), min(seq) FROM {CHANGES_TABLE}").fetchone()
    finally:
        other.close()
    assert kept[0] <= CHANGES_KEPT + 1 and kept[1] > 2
    assert_same(found(store, ["p"], query), brute_force(path, ["p"], query))
    assert loads == ["p", "p"]


EARLIER_WRITER = """
import sqlite3, sys
import numpy as np
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=5)
rng = np.random.default_rng(int(sys.argv[2]))
for i in range(int(sys.argv[3])):
    vector = rng.normal(size=16).astype("<f4").tobytes()
    conn.execute(
        "INSERT INTO entries (slug, store, label, content, embedding, model, branch, "
        "confidence, archived, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(slug, store) DO UPDATE SET embedding = excluded.embedding, "
        "updated_at = excluded.updated_at",
        (f"x{i % 7}", "p", f"x{i % 7}", "#", vector, "m", None, None, 0, "t", "t"),
    )
    if i % 5 == 4:
        conn.execute("DELETE FROM entries WHERE slug = ? AND store = ?", (f"x{(i * 3) % 7}", "p"))
conn.close()
print("ok")
"""


def test_writes_by_other_processes_are_seen(cached: tuple[Store, list[str]], path: Path) -> None:
    """Processes upserting and deleting (earlier-release style) between searches."""
    store, loads = cached
    rng = np.random.default_rng(8)
    for i in range(20):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    for round_ in range(4):
        done = subprocess.run(
            [sys.executable, "-c", EARLIER_WRITER, str(path), str(round_), "23"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
        query = rng.normal(size=DIM).astype(np.float32)
        assert_same(found(store, ["p"], query, limit=30), brute_force(path, ["p"], query, limit=30))
        similar = store.find_similar("p", query, threshold=0.2, limit=50)
        expected = [
            (s, slug, sc) for s, slug, sc in brute_force(path, ["p"], query, limit=50) if sc >= 0.2
        ]
        assert_same([(m.memory.store, m.memory.slug, m.score) for m in similar], expected)
    assert loads == ["p"]


def test_extreme_vectors_rank_exactly(cached: tuple[Store, list[str]], path: Path) -> None:
    """Subnormal, huge and non-finite stored vectors: screening never hides a winner."""
    store, _ = cached
    rows = {
        "tiny": [1e-45] + [0.0] * (DIM - 1),
        "huge": [3e38] * DIM,
        "nan": [float("nan")] + [1.0] * (DIM - 1),
        "zero": [0.0] * DIM,
        "signalling": b"\x01\x00\x80\x7f" * DIM,  # raw bits: a float conversion quiets it
        "plain": [1.0, 2.0] + [0.0] * (DIM - 2),
    }
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for slug, values in rows.items():
            conn.execute(
                "INSERT INTO entries (slug, store, label, content, embedding, created_at, "
                "updated_at) VALUES (?, 'p', ?, '#', ?, 't', 't')",
                (
                    slug,
                    slug,
                    values
                    if isinstance(values, bytes)
                    else np.asarray(values, dtype="<f4").tobytes(),
                ),
            )
    finally:
        conn.close()
    for query in (np.eye(DIM, dtype=np.float32)[0], np.ones(DIM, dtype=np.float32)):
        assert_same(found(store, ["p"], query), brute_force(path, ["p"], query))
        assert found(store, ["p"], query)[0][1] in {"tiny", "huge"}


# A second, long-lived process: searches store p for each query line, printing the
# (store, slug, score) rows and how many full loads it has needed so far.
WATCHER = """
import json, sys
import numpy as np
from thatch.frontend.store.matrix import StoreMatrix
from thatch.frontend.store.memory import RememberOutcome
from thatch.frontend.store.memory_store import Store

with Store.open(sys.argv[1]) as store:
    loads = []
    original = store._load_matrix
    store._load_matrix = lambda name: (loads.append(name), original(name))[1]
    for line in sys.stdin:
        query = np.array(json.loads(line), dtype=np.float32)
        found = store.search(["p"], query, limit=50)
        rows = [[m.memory.store, m.memory.slug, m.score] for m in found]
        print(json.dumps({"loads": len(loads), "rows": rows}), flush=True)
"""


def log_reads(store: Store) -> list[str]:
    """Statements on the store's connection that read or write the change log, from now."""
    seen: list[str] = []
    store.conn.set_trace_callback(
        lambda sql: seen.append(sql) if CHANGES_TABLE in sql and "INSERT" not in sql else None
    )
    return seen


def test_own_writes_reach_the_cache_without_a_catch_up_and_other_processes_see_them(
    cached: tuple[Store, list[str]], path: Path
) -> None:
    """remember (new, overwrite, archive, branch, pending) and forget in this process: the
    next search reads no change log and equals brute force; a process that cached the
    store before catches up to the same answers."""
    store, loads = cached
    rng = np.random.default_rng(21)
    for i in range(30):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watcher.stdin is not None and watcher.stdout is not None

    def watched(query: np.ndarray) -> dict:
        watcher.stdin.write(json.dumps(query.tolist()) + "\n")  # type: ignore[union-attr]
        watcher.stdin.flush()  # type: ignore[union-attr]
        return json.loads(watcher.stdout.readline())  # type: ignore[union-attr]

    try:
        query = rng.normal(size=DIM).astype(np.float32)
        watched(query)
        found(store, ["p"], query)
        near = (query + rng.normal(scale=0.05, size=DIM)).astype(np.float32)
        writes = [
            lambda: store.remember("p", "new", "# new", near, "m"),
            lambda: store.remember("p", "m1", "# m1 again", near, "m", overwrite=True),
            lambda: store.remember("p", "m1", "# m1", near, "m", overwrite=True, archived=True),
            lambda: store.remember("p", "m2", "# m2", near, "m", overwrite=True, branch="dev"),
            lambda: store.remember("p", "m3", "# m3", None, None, overwrite=True),
            lambda: store.remember("p", "pending", "# pending", None, None),
            lambda: store.forget("p", "m4"),
            lambda: store.remember("p", "m4", "# m4", near, "m"),
        ]
        for write in writes:
            write()
            reads = log_reads(store)
            for options in ({}, {"include_archived": True}, {"branch": "main"}):
                expected = brute_force(path, ["p"], query, limit=50, **options)
                assert_same(found(store, ["p"], query, limit=50, **options), expected)
            store.conn.set_trace_callback(None)
            assert reads == []
            answer = watched(query)
            assert_same(
                [tuple(row) for row in answer["rows"]], brute_force(path, ["p"], query, limit=50)
            )
            assert answer["loads"] == 1
        assert loads == ["p"]
    finally:
        watcher.stdin.close()
        watcher.wait(timeout=60)
        watcher.stdout.close()


def test_own_writes_after_another_writer_catch_up_from_the_log(
    cached: tuple[Store, list[str]], path: Path
) -> None:
    """Own and other connections' writes interleaved at random: always exactly right.

    When another connection wrote the store since this process last read it, the own
    write must not be taken in directly (the matrix would skip the other's rows)."""
    store, loads = cached
    rng = np.random.default_rng(23)
    for i in range(40):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        for step in range(200):
            for _ in range(int(rng.integers(1, 4))):  # several writes between two searches
                slug = f"m{rng.integers(0, 60)}"
                kind = rng.integers(0, 6)
                if kind == 0:
                    other.execute(
                        "INSERT OR REPLACE INTO entries (slug, store, label, content, "
                        "embedding, archived, created_at, updated_at) "
                        "VALUES (?, 'p', ?, '#', ?, ?, 't', 't')",
                        (slug, slug, blob(rng), int(rng.integers(0, 2))),
                    )
                elif kind == 1:
                    other.execute("DELETE FROM entries WHERE slug = ?", (slug,))
                elif kind == 2:
                    store.forget("p", slug)
                else:
                    store.remember(
                        "p", slug, f"# {slug}", rng.normal(size=DIM) if kind < 5 else None, "m",
                        overwrite=True, archived=bool(rng.integers(0, 2)),
                        branch=[None, "dev"][int(rng.integers(0, 2))],
                    )  # fmt: skip
            query = rng.normal(size=DIM).astype(np.float32)
            options = {"branch": "dev"} if step % 3 == 0 else {}
            assert_same(
                found(store, ["p"], query, limit=8, **options),
                brute_force(path, ["p"], query, limit=8, **options),
            )
    finally:
        other.close()
    assert loads == ["p"]


def test_a_cache_failure_after_an_own_write_never_fails_the_write(
    cached: tuple[Store, list[str]], path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row is committed before the cache takes it in: if that fails, the memory stays
    saved, the half-updated matrix is dropped and the next search loads it afresh."""
    store, loads = cached
    rng = np.random.default_rng(29)
    for i in range(10):
        store.remember("p", f"m{i}", f"# m{i}", rng.normal(size=DIM), "m")
    query = rng.normal(size=DIM).astype(np.float32)
    found(store, ["p"], query)

    def broken(*_args: object) -> None:
        raise MemoryError("no room for one more row")

    with monkeypatch.context() as patched:
        patched.setattr(StoreMatrix, "put", broken)
        assert store.remember("p", "new", "# new", query, "m") is RememberOutcome.SAVED
    assert store.show("p", "new") is not None
    assert_same(found(store, ["p"], query), brute_force(path, ["p"], query))
    assert found(store, ["p"], query)[0][1] == "new"
    assert loads == ["p", "p"]
