"""The shared vector snapshot can only cost time (issue 21 §3).

Real ``thatch search`` and ``thatch mcp`` processes, a real MiniLM embedder process and a
real SQLite file of 1,500+ memories (above the snapshot threshold): the snapshot a first
process leaves is then shortened, garbled, replaced by a FIFO, handed to another user or
crafted, and every later process must still recall exactly what a process without any
snapshot recalls, survive, and never wait on the file.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import THATCH_VARS
from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.leases import leases, truncating
from thatch.frontend.store.slugs import slugify
from thatch.frontend.store.snapshot_dir import CAP_BYTES, STALE_SECONDS
from thatch.frontend.store.vector_snapshot import (
    ALIGN,
    PREFIX,
    DatabaseIdentity,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

THATCH = str(Path(sys.executable).with_name("thatch"))
PROJECT = "acme-app"
FILLER = 1500
STAMP = "2025-01-01T00:00:00.000Z"
DEADLINE = 180.0  # seconds: only a hang ever gets near it
OTHER_UID = 4242
TARGETS = {
    "Deploy to staging": (
        "Run make deploy-staging from the release branch; it pushes the image and restarts "
        "the staging pods.",
        "how do we deploy to staging",
    ),
    "Postgres test port": (
        "The Postgres instance for the integration test suite listens on port 5433.",
        "which port does postgres use for the tests",
    ),
    "Regenerate gRPC stubs": (
        "Run make proto to regenerate the gRPC stubs from the proto directory.",
        "how do I regenerate the grpc stubs",
    ),
}
QUERIES = [query for _, query in TARGETS.values()]


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Iterator[EmbedderProcess]:
    socket_dir = Path(tempfile.mkdtemp(prefix="ths-", dir="/tmp"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "THATCH_EMBEDDER_EXIT_SECONDS": "0"}
    try:
        with embedder_process(str(minilm_dir), socket_dir=socket_dir, env=env) as proc:
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


def environment(root: Path, db: Path, address: str, cache: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in THATCH_VARS}
    env.update(
        HOME=str(root / "home"),
        XDG_CONFIG_HOME=str(root / "home" / ".config"),
        XDG_CACHE_HOME=str(cache),
        HF_HUB_OFFLINE="1",
        THATCH_DB_PATH=str(db),
        THATCH_EMBEDDER_ADDR=address,
        THATCH_PROJECT_DIR=str(root / PROJECT),
    )
    return env


def run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [THATCH, *args], env=env, capture_output=True, text=True, timeout=DEADLINE
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def search(env: dict[str, str], query: str) -> list[tuple[str, float]]:
    found = json.loads(run(env, "search", "--json", query))
    return [(row["label"], row["score"]) for row in found]


@pytest.fixture(scope="module")
def template(minilm: EmbedderProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the targets (saved by ``thatch remember``, embedded by MiniLM) and
    1,500 random unit vectors of the same model inserted by SQL."""
    root = tmp_path_factory.mktemp("template")
    (root / PROJECT).mkdir()
    db = root / "thatch.db"
    env = environment(root, db, minilm.address, root / "blocked" / "cache")
    for label, (content, _) in TARGETS.items():
        run(env, "remember", label, content)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        model, blob = conn.execute("SELECT model, embedding FROM entries LIMIT 1").fetchone()
        rng = np.random.default_rng(7)
        vectors = rng.normal(size=(FILLER, len(blob) // 4)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (f"filler-{i}", PROJECT, f"filler {i}", f"# filler {i}\n\nnoise {i}",
                 vector.astype("<f4").tobytes(), model, STAMP, STAMP)
                for i, vector in enumerate(vectors)
            ],
        )  # fmt: skip
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db


class Place:
    """One test's copy of the template, its cache directory and the env of its processes."""

    def __init__(self, root: Path, template: Path, address: str) -> None:
        (root / PROJECT).mkdir()
        self.db = root / "db" / "thatch.db"
        self.db.parent.mkdir()
        source, target = sqlite3.connect(template), sqlite3.connect(self.db)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        self.env = environment(root, self.db, address, root / "cache")
        # No usable cache directory (a file is in the way): what plain SQLite answers.
        (root / "no-cache").write_text("not a directory")
        self.plain_env = environment(root, self.db, address, root / "no-cache")
        self.snaps = root / "cache" / "thatch" / "vectors"
        identity = DatabaseIdentity.of(self.db)
        assert identity is not None
        self.identity = identity
        self.snapshot = snapshot_path(self.snaps, identity, PROJECT)

    def expected(self) -> list[list[tuple[str, float]]]:
        answers = [search(self.plain_env, query) for query in QUERIES]
        assert [found[0][0] for found in answers] == list(TARGETS)
        assert not self.snaps.exists()
        return answers

    def answers(self) -> list[list[tuple[str, float]]]:
        return [search(self.env, query) for query in QUERIES]

    def verified(self) -> bool:
        """The file at the snapshot path is ours, regular, read-only and passes its checks."""
        info = os.lstat(self.snapshot)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        found = read_snapshot(self.snapshot, self.identity, PROJECT)
        return found is not None and stat.S_IMODE(info.st_mode) == 0o400


@pytest.fixture
def place(tmp_path: Path, template: Path, minilm: EmbedderProcess) -> Place:
    return Place(tmp_path, template, minilm.address)


def data_region(path: Path) -> tuple[int, int]:
    """(offset, length) of the first group's live vectors in a snapshot file."""
    raw = path.read_bytes()
    header_len = PREFIX.unpack_from(raw)[2]
    header = json.loads(raw[PREFIX.size : PREFIX.size + header_len])
    base = -(-(PREFIX.size + header_len) // ALIGN) * ALIGN
    group = header["groups"][0]
    return base + group["unit"], group["count"] * group["dim"] * 4


def craft(place: Place, at: Path) -> None:
    """A snapshot with valid checksums in which the targets' vectors sit on filler rows."""
    found = read_snapshot(place.snapshot, place.identity, PROJECT)
    assert found is not None
    groups = []
    for group in found.groups:
        unit, norms = group.unit[: group.count].copy(), group.norms[: group.count].copy()
        for k, label in enumerate(TARGETS):
            slug = slugify(label)
            if slug in group.slugs:
                row, other = group.slugs.index(slug), group.slugs.index(f"filler-{k}")
                unit[[row, other]] = unit[[other, row]]
                norms[[row, other]] = norms[[other, row]]
        groups.append(
            (group.dim, group.count, unit, norms, group.archived[: group.count].copy(),
             group.codes[: group.count].copy(), list(group.slugs))
        )  # fmt: skip
    at.parent.mkdir(parents=True, exist_ok=True)
    assert write_snapshot(
        at, place.identity, PROJECT, found.seq, found.version, found.fingerprint,
        found.branches, groups,
    )  # fmt: skip


class McpSession:
    """A real ``thatch mcp`` on stdio, every reply awaited with a deadline (never a hang)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [THATCH, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self.selector.register(self.process.stdout, selectors.EVENT_READ)
        self.buffer = b""
        self.next_id = 0
        try:
            self.request(
                "initialize",
                {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "t", "version": "1"}},
            )  # fmt: skip
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except BaseException:
            self.kill()
            raise

    def send(self, message: dict[str, object]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, object]) -> dict[str, object]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + DEADLINE
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                reply = json.loads(line)
                if reply.get("id") == self.next_id:
                    return dict(reply)
            left = deadline - time.monotonic()
            assert left > 0 and self.selector.select(left), f"no answer to {method}"
            assert self.process.stdout is not None
            chunk = os.read(self.process.stdout.fileno(), 65536)
            assert chunk, f"thatch mcp ended (status {self.process.wait()}) during {method}"
            self.buffer += chunk

    def recall(self, query: str) -> list[str]:
        """The labels recalled, best first (each body starts with its ``# label`` line)."""
        reply = self.request("tools/call", {"name": "memory_recall", "arguments": {"query": query}})
        result = reply["result"]
        assert isinstance(result, dict) and not result.get("isError"), reply
        lines = result["content"][0]["text"].split("\n")
        return [
            lines[i + 1].removeprefix("# ") for i, line in enumerate(lines[:-1])
            if line.startswith("[store:")
        ]  # fmt: skip

    def mapped(self, path: Path) -> bool:
        maps = Path(f"/proc/{self.process.pid}/maps").read_text()
        return any(line.split(maxsplit=5)[-1].startswith(str(path)) for line in maps.splitlines())

    def close(self) -> int:
        """End of input: the server exits (after any snapshot write) with its status."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(DEADLINE)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.selector.close()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


def labels(answers: list[list[tuple[str, float]]]) -> list[list[str]]:
    return [[label for label, _ in found] for found in answers]


def test_a_snapshot_is_a_private_read_only_file_a_new_process_maps(place: Place) -> None:
    expected = place.expected()
    assert place.answers() == expected  # loads, then writes the snapshot before exiting
    assert stat.S_IMODE(place.snaps.stat().st_mode) == 0o700
    assert place.verified()
    session = McpSession(place.env)
    try:
        assert session.recall(QUERIES[0]) == labels(expected)[0]
        assert session.mapped(place.snapshot)
    finally:
        session.kill()


def test_a_snapshot_shortened_under_a_running_server_costs_a_reload(place: Place) -> None:
    """Truncated while ``thatch mcp`` has it mapped: the truncation waits for the server
    to let go of the file (its read lease), the recalls stay exact, no SIGBUS.

    (It used to end the server: its duplicate check scans the mapped matrix in the
    background, and a truncation during a scan faulted.)
    """
    answers = place.expected()
    expected = labels(answers)
    place.answers()
    session = McpSession(place.env)
    try:
        assert session.recall(QUERIES[0]) == expected[0]
        assert session.mapped(place.snapshot)
        assert ("ACTIVE", session.process.pid) in leases(place.snapshot)
        with truncating(place.snapshot, place.snapshot.stat().st_size // 2):
            for query, wanted in zip(QUERIES, expected, strict=True):
                assert session.recall(query) == wanted
        for query, wanted in zip(QUERIES, expected, strict=True):
            assert session.recall(query) == wanted
        assert session.process.poll() is None
        assert session.close() == 0
    finally:
        session.kill()
    # The server may have written a good snapshot again, or read the file into private
    # memory before the truncation (no lease while one waits) and left it: then the next
    # process replaces it.
    assert place.answers() == answers
    assert place.verified()


@pytest.mark.parametrize("garbage", ["nan", "noise"])
def test_garbage_vectors_behind_a_valid_header_are_never_ranked(place: Place, garbage: str) -> None:
    """NaN used to empty every recall; finite noise hid the best memories. Both fail the
    checksum: the process loads from SQLite and replaces the file for the next one."""
    expected = place.expected()
    place.answers()
    offset, length = data_region(place.snapshot)
    rng = np.random.default_rng(3)
    if garbage == "nan":
        junk = b"\xff" * length
    else:
        junk = rng.normal(size=length // 4).astype("<f4").tobytes()
    place.snapshot.chmod(0o600)
    with open(place.snapshot, "r+b") as target:
        target.seek(offset)
        target.write(junk)
    assert place.answers() == expected
    assert place.verified()  # replaced by a good one
    assert place.answers() == expected


def test_a_fifo_at_the_snapshot_path_never_blocks(place: Place) -> None:
    """Opening a FIFO for reading waits for a writer: a server that did so hung for good."""
    expected = labels(place.expected())
    place.answers()
    place.snapshot.unlink()
    os.mkfifo(place.snapshot)
    assert labels(place.answers()) == expected  # a CLI process (under a deadline)
    place.snapshot.unlink()
    os.mkfifo(place.snapshot)
    session = McpSession(place.env)
    try:
        for query, wanted in zip(QUERIES, expected, strict=True):
            assert session.recall(query) == wanted
        assert session.close() == 0
    finally:
        session.kill()
    assert place.verified()  # the FIFO was replaced by a snapshot


@pytest.mark.parametrize("how", ["file owned by another user", "directory owned by another user",
                                 "symlink", "group-writable file"])  # fmt: skip
def test_a_snapshot_that_is_not_plainly_ours_is_never_used(place: Place, how: str) -> None:
    """A snapshot with valid checksums whose rows were swapped: trusted as ours when it is
    an own regular file (a checksum proves only that thatch wrote it), refused otherwise."""
    if os.geteuid() != 0 and how.endswith("another user"):
        pytest.fail("chown to another user needs root (the test suite runs as root)")
    expected = place.expected()
    place.answers()
    craft(place, place.snapshot)
    assert labels(place.answers()) != labels(expected)  # the control: an own file is used
    if how == "file owned by another user":
        os.chown(place.snapshot, OTHER_UID, OTHER_UID)
    elif how == "directory owned by another user":
        os.chown(place.snaps, OTHER_UID, OTHER_UID)
    elif how == "symlink":
        elsewhere = place.snaps.parent / "elsewhere" / "crafted.vec"
        elsewhere.parent.mkdir(mode=0o700)
        place.snapshot.rename(elsewhere)
        place.snapshot.symlink_to(elsewhere)
    else:
        place.snapshot.chmod(0o620)
    before = sorted(os.listdir(place.snaps))
    assert place.answers() == expected
    if how == "directory owned by another user":
        assert sorted(os.listdir(place.snaps)) == before  # nothing written into it either
        assert read_snapshot(place.snapshot, place.identity, PROJECT) is None
    else:
        assert place.verified()  # replaced (a rename replaces a link, not its target)


def test_a_directory_others_can_write_is_made_private(place: Place) -> None:
    place.expected()
    place.snaps.mkdir(parents=True)
    place.snaps.chmod(0o777)
    place.answers()
    assert stat.S_IMODE(place.snaps.stat().st_mode) == 0o700
    assert place.verified()


def test_stale_snapshots_go_by_age_and_the_rest_fit_the_cap(place: Place) -> None:
    """Writers tidy: unused for STALE_SECONDS → removed; then the least recently used until
    the rest fit in CAP_BYTES (sparse files stand in for big snapshots)."""
    expected = place.expected()
    place.snaps.mkdir(parents=True, mode=0o700)
    now = time.time()
    big = CAP_BYTES * 2 // 5
    files = {name: place.snaps / f"{name}.vec" for name in ("old", "lru", "mid", "new")}
    for name, age in (("old", STALE_SECONDS + 3600), ("lru", 3 * 3600), ("mid", 2 * 3600),
                      ("new", 3600)):  # fmt: skip
        with open(files[name], "wb") as out:
            out.truncate(10 if name == "old" else big)
        os.utime(files[name], (now - age, now - age))
    fifo = place.snaps / "fifo.vec"
    os.mkfifo(fifo)
    assert place.answers() == expected
    assert sorted(path.name for path in place.snaps.iterdir()) == sorted(
        ["mid.vec", "new.vec", place.snapshot.name]
    )
    total = sum(path.stat().st_size for path in place.snaps.iterdir())
    assert total <= CAP_BYTES
    assert place.verified()
