"""Duplicate candidates kept at write time (docs/database.md §duplicate-candidates, issue 21 §2):
real SQLite files, real processes for concurrency, the earlier release's exact SQL."""

from __future__ import annotations

import dataclasses
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.support import earlier_release
from tests.support.fake_embedder import tool_context
from tests.support.hookrun import hook_env, run_hook
from tests.test_store_compat import entry_params, run_earlier_release
from thatch.frontend.store import db as dbmod
from thatch.frontend.store import duplicates
from thatch.frontend.store.duplicates import (
    FLOOR,
    NEIGHBOURS,
    DuplicatePage,
    DuplicateProgress,
    DuplicateSummary,
    memories_with_candidates,
)
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.schema import (
    DUP_PAIRS_TABLE,
    DUP_SCANNED_TABLE,
    DUP_UNCHECKED_TABLE,
    MIGRATIONS_TABLE,
)
from thatch.frontend.tools import formatting as fmt
from thatch.frontend.tools.hygiene import hygiene
from thatch.frontend.tools.memory_tools import Tools

DIM = 64


def unit(vector: np.ndarray) -> np.ndarray:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def near_copies(base: np.ndarray, count: int, seed: int, scale: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(count, base.size)) * scale * np.linalg.norm(base)
    copies = (base + noise).astype(np.float32)
    return copies / np.linalg.norm(copies, axis=1, keepdims=True)


def stored_pairs(store: Store, name: str) -> dict[tuple[str, str], float]:
    rows = store.conn.execute(
        f"SELECT slug_a, slug_b, score FROM {DUP_PAIRS_TABLE} WHERE store = ?", (name,)
    )
    return {(a, b): score for a, b, score in rows}


def brute_force(slugs: list[str], vectors: np.ndarray, floor: float) -> set[tuple[str, str]]:
    v64 = vectors.astype(np.float64)
    unit64 = v64 / np.linalg.norm(v64, axis=1, keepdims=True)
    sims = unit64 @ unit64.T
    found = set()
    for i in range(len(slugs)):
        for j in range(i + 1, len(slugs)):
            if sims[i, j] >= floor:
                found.add(tuple(sorted((slugs[i], slugs[j]))))
    return found  # type: ignore[return-value]


# Writes ``count`` near-copies of one shared base, interleaved with unrelated memories,
# once a line arrives on stdin (both writers start writing together).
WRITER = """
import sys
import numpy as np
from thatch.frontend.store.memory_store import Store

path, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = np.random.default_rng(0).normal(size=64)
rng = np.random.default_rng(100 + worker)
with Store.open(path) as store:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        copy = (base + rng.normal(size=64) * 0.02 * np.linalg.norm(base)).astype(np.float32)
        store.remember("p", f"w{worker}-copy-{i}", "# copy", copy, "m")
        other = rng.normal(size=64).astype(np.float32)
        store.remember("p", f"w{worker}-other-{i}", "# other", other, "m")
print("ok")
"""


def test_two_writer_processes_writing_near_copies_at_once_keep_pairs_exact(
    tmp_path: Path,
) -> None:
    """Two processes write near-copies of one memory at the same time: with no backfill,
    every memory is checked at its write and the stored pairs are exactly the brute-force
    ones (a memory compared while the other process wrote still sees its rows)."""
    path = tmp_path / "thatch.db"
    Store.open(path).close()
    per_writer = 9  # 18 near-copies: fewer than NEIGHBOURS + 1, so no cap applies
    assert 2 * per_writer <= NEIGHBOURS + 1
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(w), str(per_writer)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in (1, 2)
    ]
    for writer in writers:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    for writer in writers:  # both opened: release them together
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0 and out.strip() == "ok", err
    with Store.open(path) as store:
        assert store.duplicate_progress("p") == DuplicateProgress(4 * per_writer, 4 * per_writer)
        rows = store.conn.execute("SELECT slug, embedding FROM entries WHERE store = 'p'")
        slugs, blobs = zip(*rows, strict=True)
        vectors = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(slugs), DIM)
        expected = brute_force(list(slugs), vectors, FLOOR)
        assert set(stored_pairs(store, "p")) == expected
        summary = store.duplicate_summary("p", 0.85)
        assert (summary.memories, summary.complete) == (2 * per_writer, True)


def test_count_follows_threshold_verdicts_forget_and_archive(tmp_path: Path) -> None:
    """Scores are stored above the floor: the threshold in force is applied when read;
    a verdict hides its pair; forget and archive drop a memory's pairs at once."""
    rng = np.random.default_rng(1)
    base = unit(rng.normal(size=DIM))
    with Store.open(tmp_path / "thatch.db") as store:
        store.remember("p", "a", "# a", base, "m")
        store.remember("p", "b", "# b", unit(base + 0.2 * unit(rng.normal(size=DIM))), "m")
        store.remember("p", "c", "# c", unit(base + 0.5 * unit(rng.normal(size=DIM))), "m")
        store.remember("p", "far", "# far", unit(rng.normal(size=DIM)), "m")
        scores = {
            (p.slug_a, p.slug_b): p.score for p in store.find_duplicates("p", threshold=FLOOR)
        }
        ab, ac, bc = scores[("a", "b")], scores[("a", "c")], scores[("b", "c")]
        assert ab > max(ac, bc) and min(ac, bc) > 0.85 and ("a", "far") not in scores
        assert store.duplicate_summary("p", ab + 1e-6).memories == 0
        assert store.duplicate_summary("p", ab).memories == 2
        assert store.duplicate_summary("p", min(ac, bc)).memories == 3
        store.mark_checked("p", "a", "b", "unrelated")
        assert store.duplicate_summary("p", ab).memories == 0
        assert store.duplicate_summary("p", min(ac, bc)).memories == 3  # a–c, b–c remain
        store.remember("p", "c", "# c", None, None, overwrite=True, archived=True)
        assert store.duplicate_summary("p", 0.85).memories == 0
        store.forget("p", "b")
        assert stored_pairs(store, "p") == {}


def test_existing_database_is_migrated_without_comparing_then_checked_in_chunks(
    tmp_path: Path,
) -> None:
    """A populated file from before m010 gets the tables and triggers only (nothing read,
    nothing compared in the migration); the count says "counting" until the chunked
    backfill has compared every memory, then equals the brute force."""
    path = tmp_path / "thatch.db"
    rng = np.random.default_rng(2)
    base = unit(rng.normal(size=DIM))
    vectors = np.vstack([near_copies(base, 12, 3), rng.normal(size=(50, DIM)).astype(np.float32)])
    slugs = [f"m{i:03d}" for i in range(len(vectors))]
    with Store.open(path) as store, dbmod.atomic(store.conn):
        for slug, vector in zip(slugs, vectors, strict=True):
            store.remember("p", slug, "# x", vector, "m")
    # The file as thatch before m010 left it.
    conn = dbmod.connect(path)
    with dbmod.atomic(conn):
        for name in ("thatch_dup_entries_insert", "thatch_dup_entries_delete",
                     "thatch_dup_entries_update"):  # fmt: skip
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(f"DROP TABLE {DUP_PAIRS_TABLE}")
        conn.execute(f"DROP TABLE {DUP_SCANNED_TABLE}")
        conn.execute(f"DELETE FROM {MIGRATIONS_TABLE} WHERE name = 'm010_duplicate_candidates'")
    conn.close()
    with Store.open(path) as store:
        assert store.conn.execute(f"SELECT count(*) FROM {DUP_SCANNED_TABLE}").fetchone() == (0,)
        summary = store.duplicate_summary("p", 0.85)
        assert (summary.memories, summary.checked, summary.total) == (0, 0, 62)
        marked, after = store.check_duplicates("p", limit=25)
        assert marked == 25 and after > 0
        assert store.duplicate_progress("p") == DuplicateProgress(25, 62)
        assert store.check_duplicates("p", limit=25, after=after)[0] == 25
        assert store.duplicate_progress("p") == DuplicateProgress(50, 62)
        assert store.check_all_duplicates("p") == DuplicateProgress(62, 62)
        expected = brute_force(slugs, vectors, FLOOR)
        assert set(stored_pairs(store, "p")) == expected
        assert store.duplicate_summary("p", 0.85).memories == 12


def test_earlier_release_writes_and_deletes_are_noticed(tmp_path: Path) -> None:
    """Rows the earlier release inserts, replaces, deletes or reviews with its own SQL:
    never a stale pair or count, only unchecked memories until compared."""
    path = tmp_path / "thatch.db"
    rng = np.random.default_rng(4)
    a = unit(rng.normal(size=384))
    twin = unit(a + 0.05 * unit(rng.normal(size=384)))
    far = unit(rng.normal(size=384))
    with Store.open(path) as store:
        store.remember("acme/app", "alpha", "# alpha", a, "m")
        run_earlier_release(path, ("ensure_store", ["acme/app"]),
                            ("insert", entry_params("twin", "# twin", twin)))  # fmt: skip
        summary = store.duplicate_summary("acme/app", 0.85)
        assert (summary.memories, summary.checked, summary.total) == (0, 1, 2)
        store.check_all_duplicates("acme/app")
        assert store.duplicate_summary("acme/app", 0.85).memories == 2

        verdict = ["acme/app", "alpha", "twin", "duplicate", "2024-07-01T10:00:00.000Z"]
        run_earlier_release(path, ("mark_checked", verdict))
        assert store.duplicate_summary("acme/app", 0.85).memories == 0
        run_earlier_release(path, ("unpair", ["acme/app", "twin", "twin"]))
        assert store.duplicate_summary("acme/app", 0.85).memories == 2

        # INSERT OR REPLACE with a far vector: the pair is gone without any check.
        run_earlier_release(path, ("replace_entry", entry_params("twin", "# twin v2", far)))
        summary = store.duplicate_summary("acme/app", 0.85)
        assert (summary.memories, summary.checked, summary.total) == (0, 1, 2)
        store.check_all_duplicates("acme/app")
        assert store.duplicate_summary("acme/app", 0.85).memories == 0

        run_earlier_release(path, ("upsert", [*entry_params("twin", "# twin v3", twin), None]))
        store.check_all_duplicates("acme/app")
        assert store.duplicate_summary("acme/app", 0.85).memories == 2
        run_earlier_release(path, ("forget", ["twin", "acme/app"]))
        summary = store.duplicate_summary("acme/app", 0.85)
        assert (summary.memories, summary.checked, summary.total) == (0, 1, 1)
        assert stored_pairs(store, "acme/app") == {}


def test_pages_are_bounded_and_reach_every_cluster(tmp_path: Path) -> None:
    """45 small clusters and one of 60 near-copies: each page holds at most its clusters
    and pairs; following next_offset lists every cluster once, with every member."""
    rng = np.random.default_rng(5)
    members: list[set[str]] = []
    with Store.open(tmp_path / "thatch.db") as store:
        for c in range(45):
            base = unit(rng.normal(size=DIM))
            size = 2 + c % 3
            group = set()
            for k, vector in enumerate(near_copies(base, size, 1000 + c, scale=0.01)):
                store.remember("p", f"c{c}-{k}", "# x", vector, "m")
                group.add(f"c{c}-{k}")
            members.append(group)
        big = set()
        for k, vector in enumerate(near_copies(unit(rng.normal(size=DIM)), 60, 7, scale=0.01)):
            store.remember("p", f"big-{k}", "# x", vector, "m")
            big.add(f"big-{k}")
        members.append(big)
        seen: list[set[str]] = []
        offset: int | None = 0
        pages = 0
        while offset is not None:
            page = store.duplicate_page("p", 0.85, offset=offset, clusters=20, pairs_per_cluster=15)
            pages += 1
            assert len(page.clusters) <= 20
            for cluster in page.clusters:
                assert len(cluster.pairs) <= 15
                shown = {s for pair in cluster.pairs for s in (pair.slug_a, pair.slug_b)}
                group = next(g for g in members if shown <= g)
                assert cluster.size == len(group)
                if cluster.size == 60:
                    assert cluster.more_pairs > 0
                seen.append(group)
            assert page.total_clusters == 46
            offset = page.next_offset
        assert pages == 3
        assert sorted(map(sorted, seen)) == sorted(map(sorted, members))
        assert store.duplicate_page("p", 0.85, offset=46).clusters == []


def test_reminder_at_a_pathological_store_reports_counting_then_the_count(
    tmp_path: Path,
) -> None:
    """The real hook at 2,000 near-copies of one memory (2M pairs above the threshold):
    unchecked, it says how far counting is (and compares nothing itself); checked, it
    names the memories with candidates."""
    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project), THATCH_MODEL="mock")
    base = unit(np.random.default_rng(6).normal(size=DIM))
    copies = near_copies(base, 2000, 8, scale=0.01)
    # Inside a caller's transaction: nothing is checked at write, as in an upgraded file.
    with Store.open(env["THATCH_DB_PATH"]) as store, dbmod.atomic(store.conn):
        for i, vector in enumerate(copies):
            store.remember("proj", f"copy {i}", "# copy", vector, "mock")
    result = run_hook(["reminder"], {}, env)
    assert result.returncode == 0 and result.stderr == b""
    assert 'Store "proj": duplicates: counting (0 of 2000 checked).' in result.stdout.decode()
    with Store.open(env["THATCH_DB_PATH"]) as store:
        assert store.check_all_duplicates("proj") == DuplicateProgress(2000, 2000)
        assert len(stored_pairs(store, "proj")) <= 2000 * NEIGHBOURS
    result = run_hook(["reminder"], {}, env)
    assert result.returncode == 0 and result.stderr == b""
    text = result.stdout.decode()
    assert 'Store "proj": more than 1000 memories with duplicate candidates pending review.' in text
    assert "counting" not in text


def three_clusters(store: Store) -> None:
    """Clusters of 4, 5 and 6 near-copies (each a clique above 0.85) and 10 loners."""
    rng = np.random.default_rng(11)
    for c, size in enumerate((4, 5, 6)):
        for k, vector in enumerate(near_copies(unit(rng.normal(size=DIM)), size, c, 0.01)):
            store.remember("p", f"c{c}-{k}", "# x", vector, "m")
    for i in range(10):
        store.remember("p", f"alone-{i}", "# x", unit(rng.normal(size=DIM)), "m")


def test_the_count_of_memories_with_candidates_stops_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted exactly up to the limit, then "more than" it: the count reads at most
    NEIGHBOURS pairs per memory counted, however many pairs the store holds."""
    with Store.open(tmp_path / "thatch.db") as store:
        three_clusters(store)
        assert store.duplicate_summary("p", 0.85) == DuplicateSummary(15, 25, 25, False)
        with dbmod.atomic(store.conn):
            for up_to, counted in ((14, 15), (15, 15), (3, 4), (0, 1)):
                assert memories_with_candidates(store.conn, "p", 0.85, up_to) == counted
        monkeypatch.setattr(duplicates, "COUNTED_UP_TO", 7)
        assert store.duplicate_summary("p", 0.85) == DuplicateSummary(7, 25, 25, True)
        report = hygiene(store, "p", tmp_path, "m", list_branches=lambda _dir: [])
        assert (
            report.report
            == 'Store "p": more than 7 memories with duplicate candidates pending review.'
        )
        assert report.as_json()["duplicates"] == 7 and report.as_json()["duplicates_more"] is True


def test_a_page_groups_the_best_pairs_when_a_store_holds_more(tmp_path: Path) -> None:
    """Past ``grouped`` pairs the clusters are those of the best pairs (said on the page);
    marking them brings up the rest."""
    with Store.open(tmp_path / "thatch.db") as store:
        three_clusters(store)
        every = [(p.slug_a, p.slug_b, p.score) for p in store.find_duplicates("p", 0.85)]
        assert len(every) == 6 + 10 + 15
        with dbmod.atomic(store.conn):
            whole, count, partial = duplicates.page(store.conn, "p", 0.85, 0, grouped=31)
            assert (count, partial) == (3, False) and sorted(c[0] for c in whole) == [4, 5, 6]
            best, count, partial = duplicates.page(store.conn, "p", 0.85, 0, grouped=8)
        assert partial
        shown = [pair for _, pairs, _ in best for pair in pairs]
        assert sorted(shown, key=lambda p: -p[2]) == sorted(every, key=lambda p: -p[2])[:8]
        members = {s for _, pairs, _ in best for a, b, _ in pairs for s in (a, b)}
        assert sum(size for size, _, _ in best) == len(members) and count == len(best)
        page = dataclasses.replace(store.duplicate_page("p", 0.85), partial=True)
        note = "Clusters of the best 10000 candidate pairs only: mark them with"
        assert note in fmt.duplicate_page("p", page, 0.85).splitlines()[-1]
        # thatch dedup names what a person types, not the MCP tools.
        typed = fmt.duplicate_page("p", page, 0.85, cli=True)
        assert typed.splitlines()[-1] == (
            f"{note} thatch dedup LABEL_A LABEL_B --verdict V, then run it again for the rest."
        )
        assert "dedup_mark_checked" not in typed
        for a, b, _ in shown:
            store.mark_checked("p", a, b, "unrelated")
        with dbmod.atomic(store.conn):
            rest, _, partial = duplicates.page(store.conn, "p", 0.85, 0, grouped=31)
        assert not partial
        assert sum(len(pairs) for _, pairs, _ in rest) == len(every) - 8


@pytest.mark.parametrize("threshold", [0.2])
def test_threshold_below_the_floor_reads_as_the_floor(tmp_path: Path, threshold: float) -> None:
    """Pairs under the floor are not kept: a lower threshold counts from the floor."""
    rng = np.random.default_rng(9)
    with Store.open(tmp_path / "thatch.db") as store:
        for i in range(30):
            store.remember("p", f"m{i}", "# x", unit(rng.normal(size=DIM)), "m")
        assert (
            store.duplicate_summary("p", threshold).memories
            == store.duplicate_summary("p", FLOOR).memories
        )


def test_rows_changed_during_a_check_are_taken_as_they_are_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer (here the earlier release's SQL on another connection) changes rows
    between a check's matrix read and its write: no pair with a deleted neighbour, a
    rewritten neighbour scored from its current vector, and the memory being checked, if
    rewritten itself, left unchecked so that its new vector is compared later."""
    import thatch.frontend.store.duplicates as duplicates
    from thatch.frontend.store.vectors import encode

    path = tmp_path / "thatch.db"
    base = unit(np.random.default_rng(10).normal(size=DIM))
    copies = near_copies(base, 3, 11)
    far = unit(np.random.default_rng(12).normal(size=DIM))
    [far_mate] = near_copies(far, 1, 13)
    with Store.open(path) as other, Store.open(path) as store:
        other.remember("p", "gone", "# x", copies[0], "m")
        other.remember("p", "moved", "# x", copies[1], "m")
        other.remember("p", "far mate", "# x", far_mate, "m")
        screen = duplicates.screen

        def racing(matrix, slugs):  # type: ignore[no-untyped-def]
            found = screen(matrix, slugs)
            monkeypatch.setattr(duplicates, "screen", screen)  # once: not for the others
            with dbmod.atomic(other.conn):
                other.conn.execute("DELETE FROM entries WHERE slug = 'gone'")
                other.conn.execute(
                    "UPDATE entries SET embedding = ? WHERE slug = 'moved'",
                    (encode(unit(np.random.default_rng(14).normal(size=DIM))),),
                )
                other.conn.execute(
                    "UPDATE entries SET embedding = ? WHERE slug = 'new'", (encode(far),)
                )
            return found

        monkeypatch.setattr(duplicates, "screen", racing)
        store.remember("p", "new", "# x", copies[2], "m")
        assert stored_pairs(store, "p") == {}
        assert store.duplicate_progress("p") == DuplicateProgress(
            1, 3
        )  # far mate; moved, new unchecked
        assert store.check_all_duplicates("p") == DuplicateProgress(3, 3)
        assert set(stored_pairs(store, "p")) == {("far-mate", "new")}


def test_a_running_mcp_server_checks_an_upgraded_file_in_the_background(
    tmp_path: Path,
) -> None:
    """``thatch mcp`` compares the memories no write compared, chunk by chunk, while
    another process keeps writing to the file; the count then is complete and right."""
    import signal

    from tests.support.hookrun import thatch_command
    from tests.support.polling import poll

    project = tmp_path / "proj"
    project.mkdir()
    env = hook_env(tmp_path, THATCH_PROJECT_DIR=str(project), THATCH_MODEL="mock")
    path = Path(env["THATCH_DB_PATH"])
    rng = np.random.default_rng(20)
    base = unit(rng.normal(size=DIM))
    vectors = np.vstack([near_copies(base, 10, 21), rng.normal(size=(290, DIM))])
    with Store.open(path) as store, dbmod.atomic(store.conn):  # unchecked, as after m010
        for i, vector in enumerate(vectors.astype(np.float32)):
            store.remember("proj", f"m{i}", "# x", vector, "mock")
    server = subprocess.Popen(
        thatch_command("mcp"),
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with Store.open(path) as writer:
            [late] = near_copies(base, 1, 22)
            writer.remember("proj", "late copy", "# x", late, "mock")  # checked at its write
            assert poll(
                lambda: writer.duplicate_progress("proj") == DuplicateProgress(301, 301),
                timeout=120,
            )
            assert writer.duplicate_summary("proj", 0.85).memories == 11
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        assert server.stdin is not None
        server.stdin.close()


def test_a_checked_store_is_not_searched_for_unchecked_memories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """find_duplicates, the Duplicates page and ``thatch dedup`` check first: once every
    memory is checked, that costs the two index-only counts, never the search for
    unchecked rows (a pass over every row of the store, docs/database.md)."""
    rng = np.random.default_rng(5)
    with Store.open(tmp_path / "thatch.db") as store:
        for i in range(20):
            store.remember("p", f"m{i:02d}", "# x", unit(rng.normal(size=DIM)), "m")
        assert store.check_all_duplicates("p") == DuplicateProgress(20, 20)
        searches: list[str] = []
        real = duplicates.unchecked

        def counted(conn: object, name: str, limit: int, after: int = 0) -> object:
            searches.append(name)
            return real(conn, name, limit, after)  # type: ignore[arg-type]

        monkeypatch.setattr(duplicates, "unchecked", counted)
        assert store.check_all_duplicates("p") == DuplicateProgress(20, 20)
        assert searches == []
        # A memory written with no check (the earlier release) is still found.
        store.conn.execute(f"DELETE FROM {DUP_SCANNED_TABLE} WHERE slug = 'm03'")
        assert store.check_all_duplicates("p") == DuplicateProgress(20, 20)
        assert searches == ["p", "p"]


def unchecked_rows(store: Store) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(m031's table, what it must hold: usable memories without a checked mark)."""
    kept = set(store.conn.execute(f"SELECT store, slug FROM {DUP_UNCHECKED_TABLE}"))
    expected = set(
        store.conn.execute(
            "SELECT e.store, e.slug FROM entries e WHERE typeof(e.embedding) = 'blob' "
            "AND length(e.embedding) > 0 AND length(e.embedding) % 4 = 0 AND NOT EXISTS "
            f"(SELECT 1 FROM {DUP_SCANNED_TABLE} s WHERE s.store = e.store AND s.slug = e.slug)"
        )
    )
    return kept, expected


def test_the_unchecked_memories_are_kept_exactly_whoever_writes(tmp_path: Path) -> None:
    """m031's table of unchecked memories (what the session start asks) holds exactly the
    usable memories without a checked mark after every kind of write: checked at write,
    written in a caller's transaction, archived, re-embedded, emptied, moved, replaced
    with ``INSERT OR REPLACE`` (the earlier release's overwrite), deleted, and checked."""
    path = tmp_path / "thatch.db"
    rng = np.random.default_rng(21)
    blob = unit(rng.normal(size=DIM)).tobytes()
    with Store.open(path) as store:
        steps = [
            lambda: [
                store.remember("p", f"w{i}", "# w", unit(rng.normal(size=DIM)), "m")
                for i in range(3)
            ],
            lambda: store.conn.execute(
                "UPDATE entries SET archived = 1 WHERE store = 'p' AND slug = 'w0'"
            ),
            lambda: store.conn.execute(
                "UPDATE entries SET embedding = ? WHERE slug = 'w1'", (blob,)
            ),
            lambda: store.conn.execute("UPDATE entries SET embedding = NULL WHERE slug = 'w2'"),
            lambda: store.conn.execute("INSERT INTO stores (name) VALUES ('q')"),
            lambda: store.conn.execute("UPDATE entries SET store = 'q' WHERE slug = 'w1'"),
            lambda: store.conn.execute(
                "INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, "
                "model, created_at, updated_at) SELECT slug, store, label, 'v2', embedding, "
                "model, created_at, updated_at FROM entries WHERE slug = 'w0'"
            ),
            lambda: store.check_all_duplicates("p"),
            lambda: store.check_all_duplicates("q"),
            lambda: store.conn.execute(
                "INSERT OR REPLACE INTO entries (slug, store, label, content, embedding, "
                "model, created_at, updated_at) SELECT slug, store, label, 'v3', ?, "
                "model, created_at, updated_at FROM entries WHERE slug = 'w1'",
                (unit(rng.normal(size=DIM)).tobytes(),),
            ),
            lambda: store.conn.execute("DELETE FROM entries WHERE slug = 'w0'"),
            lambda: store.conn.execute(f"DELETE FROM {DUP_SCANNED_TABLE}"),
        ]
        with dbmod.atomic(store.conn):  # nothing checked at write: all unchecked
            for i in range(4):
                store.remember("p", f"t{i}", "# t", unit(rng.normal(size=DIM)), "m")
        kept, expected = unchecked_rows(store)
        assert kept == expected == {("p", f"t{i}") for i in range(4)}
        for step in steps:
            step()
            kept, expected = unchecked_rows(store)
            assert kept == expected
        assert kept  # the last step left every usable memory unchecked


def test_session_start_progress_reads_the_same_however_many_memories(tmp_path: Path) -> None:
    """The check's progress at a session start (``up_to``): one row says none is unchecked,
    whatever the store's size (both exact counts read every embedded memory and checked
    mark: 6-10 ms at 100k, at every session start); ``duplicate_summary`` without it
    counts them exactly."""
    rng = np.random.default_rng(22)

    def steps(n: int) -> tuple[int, DuplicateSummary, DuplicateSummary]:
        with Store.open(tmp_path / f"{n}.db") as store:
            for i in range(n):
                store.remember("p", f"m{i}", "# m", unit(rng.normal(size=DIM)), "m")
            store.check_all_duplicates("p")
            store.duplicate_summary("p", 0.85, up_to=10)  # caches warmed
            ran = [0]

            def count() -> int:
                ran[0] += 1
                return 0

            store.conn.set_progress_handler(count, 1)
            capped = store.duplicate_summary("p", 0.85, up_to=10)
            store.conn.set_progress_handler(None, 1)
            return ran[0], capped, store.duplicate_summary("p", 0.85)

    few, capped_few, exact_few = steps(20)
    many, capped_many, exact_many = steps(400)
    assert capped_few == capped_many == DuplicateSummary(0, 0, 0)
    assert (exact_few.checked, exact_few.total, exact_many.checked, exact_many.total) == (
        20, 20, 400, 400
    )  # fmt: skip
    assert few == many


def test_a_duplicates_page_reads_the_same_however_many_memories(tmp_path: Path) -> None:
    """A page of find_duplicates, ``thatch dedup`` or the UI's Duplicates page
    (``Tools.duplicate_page``: what is left to compare, then the clusters and the check's
    progress) of a store the check finished reads as much at 20 memories as at 400: the
    exact progress counted every embedded memory and checked mark, twice a page (~14 ms
    at 100k). The memories are orthogonal: no pair is stored, whose reading is the
    clusters' own."""

    def steps(n: int) -> tuple[int, DuplicatePage]:
        (tmp_path / str(n)).mkdir()
        with tool_context(tmp_path / str(n), project_store="p") as ctx:
            for i in range(n):
                ctx.store.remember("p", f"m{i}", "# m", np.eye(400, dtype=np.float32)[i], "m")
            tools = Tools(ctx)
            tools.duplicate_page("p", 0.85)  # caches warmed
            ran = [0]

            def count() -> int:
                ran[0] += 1
                return 0

            ctx.store.conn.set_progress_handler(count, 1)
            page = tools.duplicate_page("p", 0.85)
            ctx.store.conn.set_progress_handler(None, 1)
            assert ctx.store.duplicate_progress("p") == DuplicateProgress(n, n)
            return ran[0], page

    few, page_few = steps(20)
    many, page_many = steps(400)
    assert page_few == page_many == DuplicatePage([], 0, 0, 0, 0)
    assert few == many


def test_a_duplicates_page_counts_the_progress_up_to_its_cap(tmp_path: Path) -> None:
    """While the check runs, a page counts it as the session start does (``up_to``):
    exact below the cap, "more than" past it; without ``up_to``, exactly."""
    rng = np.random.default_rng(25)
    with Store.open(tmp_path / "thatch.db") as store:
        with dbmod.atomic(store.conn):  # in a transaction: none checked at write
            for i in range(6):
                store.remember("p", f"m{i}", "# m", unit(rng.normal(size=DIM)), "m")

        def progress(up_to: int | None) -> str:
            page = store.duplicate_page("p", 0.85, up_to=up_to)
            return fmt.duplicate_page("p", page, 0.85).splitlines()[-1]

        def note(words: str) -> str:
            return f"Duplicate check in progress: {words}; call again for the rest."

        assert progress(None) == progress(6) == note("0 of 6 memories compared so far")
        assert progress(5) == note("more than 5 memories not checked yet")
        store.check_duplicates("p", limit=2)
        assert progress(4) == note("4 of more than 4 memories not checked yet")
        assert store.duplicate_progress("p", up_to=4) == DuplicateProgress(0, 4, True, False)
        assert store.check_all_duplicates("p", up_to=4) == DuplicateProgress(0, 0)
        assert store.duplicate_progress("p") == DuplicateProgress(6, 6)
        assert (
            progress(4)
            == progress(None)
            == 'No duplicate candidates found in "p" above threshold 0.85.'
        )


def test_session_start_counts_only_the_unchecked_past_the_cap(
    tmp_path: Path,
) -> None:
    """While the check runs, the session start counts the unchecked memories and the
    embedded ones up to its cap: exact below it, "more than" past it."""
    project = tmp_path / "proj"
    project.mkdir()
    rng = np.random.default_rng(23)
    with Store.open(tmp_path / "thatch.db") as store:
        with dbmod.atomic(store.conn):
            for i in range(6):
                store.remember("p", f"m{i}", "# m", unit(rng.normal(size=DIM)), "m")

        def progress(up_to: int | None) -> str:
            report = hygiene(store, "p", project, "m", list_branches=lambda _: [], up_to=up_to)
            assert report.report is not None
            return report.report

        assert progress(None) == progress(6) == 'Store "p": duplicates: counting (0 of 6 checked).'
        assert (
            progress(5) == 'Store "p": duplicates: counting (more than 5 memories not checked yet).'
        )
        store.check_duplicates("p", limit=2)
        assert progress(6) == 'Store "p": duplicates: counting (2 of 6 checked).'
        assert progress(4) == (
            'Store "p": duplicates: counting (4 of more than 4 memories not checked yet).'
        )
        assert (
            progress(3) == 'Store "p": duplicates: counting (more than 3 memories not checked yet).'
        )
        store.check_all_duplicates("p")
        assert hygiene(store, "p", project, "m", list_branches=lambda _: [], up_to=3).report is None


def test_m031_fills_the_unchecked_memories_of_a_file_from_before_it(tmp_path: Path) -> None:
    """A file from before m031 (an earlier release's, then opened by a hook, which leaves
    m031 to a later open, and partly checked there): the first open that builds indexes
    fills m031's table with exactly the usable memories without a checked mark, its
    triggers having seen none of them written."""
    path = tmp_path / "earlier.db"
    earlier_release.build(path, 24, legacy=False)
    with sqlite3.connect(path) as conn:  # not usable: none, empty, not whole float32s
        conn.execute("UPDATE entries SET embedding = NULL WHERE rowid IN (1, 2)")
        conn.execute("UPDATE entries SET embedding = x'' WHERE rowid = 3")
        conn.execute("UPDATE entries SET embedding = x'000000' WHERE rowid = 4")
    conn.close()
    with Store.open(path, build_indexes=False) as hook:
        assert not hook.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = ?", (DUP_UNCHECKED_TABLE,)
        ).fetchone()
        for name in earlier_release.STORES[:2]:
            hook.check_duplicates(name, limit=3)
        (checked,) = hook.conn.execute(f"SELECT count(*) FROM {DUP_SCANNED_TABLE}").fetchone()
        assert checked == 6
    with Store.open(path) as store:
        assert store.conn.execute(
            f"SELECT 1 FROM {MIGRATIONS_TABLE} WHERE name = 'm031_duplicate_unchecked'"
        ).fetchone()
        kept, expected = unchecked_rows(store)
        assert kept == expected
        assert len(expected) == 24 - 4 - 6


def test_the_unchecked_memories_stay_exact_when_unchecked_ones_change(tmp_path: Path) -> None:
    """m031's table after writes to memories not checked yet (no checked mark for m010's
    triggers to clear, so only m031's update trigger notices): embedding cleared, set again
    and made unusable, archived and unarchived, moved and renamed, the earlier release's
    UPSERT (an update and an insert), and ``UPDATE OR REPLACE`` (onto an unchecked and a
    checked key, whose replaced rows fire no delete trigger)."""
    rng = np.random.default_rng(24)

    def blob() -> bytes:
        return unit(rng.normal(size=DIM)).tobytes()

    def upsert(slug: str, embedding: bytes | None) -> None:
        now = "2024-07-01T10:00:00.000Z"
        store.conn.execute(
            earlier_release.UPSERT,
            (slug, "p", slug, f"# {slug}", embedding, "m", None, None, 0, now, now, None),
        )

    def sql(statement: str, *params: object) -> Callable[[], object]:
        return lambda: store.conn.execute(statement, params)

    with Store.open(tmp_path / "thatch.db") as store:
        store.remember("p", "c0", "# c", unit(rng.normal(size=DIM)), "m")  # checked at write
        with dbmod.atomic(store.conn):  # nothing checked at write: all unchecked
            for i in range(8):
                store.remember("p", f"u{i}", "# u", unit(rng.normal(size=DIM)), "m")
        steps: list[Callable[[], object]] = [
            sql("UPDATE entries SET embedding = NULL WHERE slug = 'u0'"),
            sql("UPDATE entries SET embedding = ? WHERE slug = 'u0'", blob()),
            sql("UPDATE entries SET embedding = x'000000' WHERE slug = 'u0'"),
            sql("UPDATE entries SET archived = 1 WHERE slug = 'u1'"),
            sql("UPDATE entries SET archived = 0 WHERE slug = 'u1'"),
            sql("INSERT INTO stores (name) VALUES ('q')"),
            sql("UPDATE entries SET store = 'q' WHERE slug = 'u2'"),
            sql("UPDATE entries SET slug = 'u3-renamed' WHERE slug = 'u3'"),
            lambda: upsert("u4", None),
            lambda: upsert("u4", blob()),
            lambda: upsert("u8", blob()),
            sql("UPDATE OR REPLACE entries SET embedding = NULL WHERE slug = 'u5'"),
            sql("UPDATE OR REPLACE entries SET slug = 'u6' WHERE slug = 'u7'"),
            sql("UPDATE OR REPLACE entries SET slug = 'c0' WHERE slug = 'u6'"),
            sql("UPDATE OR REPLACE entries SET slug = 'u1' WHERE slug = 'u5'"),
        ]
        kept, expected = unchecked_rows(store)
        assert kept == expected == {("p", f"u{i}") for i in range(8)}
        for step in steps:
            step()
            kept, expected = unchecked_rows(store)
            assert kept == expected
        assert kept == {("p", "u4"), ("q", "u2"), ("p", "u3-renamed"), ("p", "u8"), ("p", "c0")}
