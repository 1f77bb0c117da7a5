"""Processes that use a database while another process upgrades it (tests and bench/migrate.py).

    python -m tests.support.upgrade_peers writer PATH SEED ROWS
    python -m tests.support.upgrade_peers reader PATH ROWS
    python -m tests.support.upgrade_peers upgrader PATH ROWS_PER_STEP

Both read commands from stdin, one a line, and answer on stdout:
- ``ops N``: do N operations, then answer ``done`` (lock-step use);
- ``run``: do operations until the next line arrives (free-running use), then read it;
- ``stop``: print one JSON summary line and exit.

The writer is the earlier release: a plain sqlite3 connection with its pragmas and busy
timeout, running its exact INSERT, upsert and DELETE statements on ``acme/app``. Its
summary: operations, the slowest one (ms), every error, and what each key it touched must
hold afterwards (``expected``: slug → content, or None when deleted). The reader is this
thatch (``build_indexes=False``, as a hook opens) searching by vector and text; its summary
counts searches, answers with at least one match, answers ranked by the lexical index
(``lexical``, also after each ``done``), and errors. The upgrader is described at ``upgrade``.
"""

from __future__ import annotations

import json
import os
import random
import select
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from tests.support import earlier_release as er


class Writer:
    def __init__(self, path: Path, seed: int, rows: int) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        for pragma in er.PRAGMAS:
            self.conn.execute(pragma)
        self.rng = random.Random(seed)
        self.rows = rows
        self.blob = er.fixed_blob(2)
        self.done = 0
        self.slowest_ms = 0.0
        self.errors: list[str] = []
        self.expected: dict[str, str | None] = {}

    def _params(self, slug: str, content: str) -> list[object]:
        now = "2024-07-01T10:00:00.000Z"
        return [slug, "acme/app", slug, content, self.blob, "m", None, None, 0, now, now]

    def one(self) -> None:
        i = self.done
        kind = i % 4
        # Existing memories of acme/app are every 4th (see earlier_release.build).
        old = er.slug_of(4 * self.rng.randrange(max(1, self.rows // 4)) + 1)
        if kind == 0:  # a new key before every existing one, then one after
            slug = f"a-new-{i}"
            statement, params = er.INSERT, self._params(slug, f"new {i} fresh_{i}")
        elif kind == 1:
            slug = f"z-new-{i}"
            statement, params = er.INSERT, self._params(slug, f"new {i} fresh_{i}")
        elif kind == 2:
            slug = old
            params = [*self._params(slug, f"edited {i} edit_{i}"), None]
            statement = er.UPSERT
        else:
            slug = old
            statement, params = er.FORGET, [slug, "acme/app"]
        start = time.perf_counter()
        try:
            self.conn.execute(statement, params)
        except sqlite3.Error as error:
            self.errors.append(f"{slug}: {error}")
        else:
            self.expected[slug] = None if statement == er.FORGET else str(params[3])
        self.slowest_ms = max(self.slowest_ms, (time.perf_counter() - start) * 1000)
        self.done += 1

    def summary(self) -> dict[str, object]:
        return {
            "ops": self.done,
            "slowest_ms": round(self.slowest_ms, 1),
            "errors": self.errors,
            "expected": self.expected,
        }


class Reader:
    def __init__(self, path: Path, rows: int) -> None:
        import numpy as np

        from thatch.frontend.store.memory_store import Store

        self.store = Store.open(path, build_indexes=False)
        self.vector = np.frombuffer(er.fixed_blob(1), dtype="<f4")
        self.rows = rows
        self.done = 0
        self.answered = 0
        self.lexical = 0
        self.errors: list[str] = []

    def one(self) -> None:
        # Every memory has the same vector: by meaning alone the tie goes to the first
        # (store, slug), an acme/app one; memory k of 'global' (k = 0 mod 4, which the
        # writer never touches) comes first only when the lexical index lifts it.
        k = 4 * (self.done % max(1, self.rows // 4))
        try:
            found = self.store.search(
                ["acme/app", "global"], self.vector, text=f"mark_{k} retry budget", limit=5
            )
        except Exception as error:  # every failure is reported, none ends the loop
            self.errors.append(f"{type(error).__name__}: {error}")
        else:
            self.answered += bool(found)
            self.lexical += bool(found) and found[0].memory.slug == er.slug_of(k)
        self.done += 1

    def summary(self) -> dict[str, object]:
        self.store.close()
        return {
            "ops": self.done,
            "answered": self.answered,
            "lexical": self.lexical,
            "errors": self.errors,
        }


class Commands:
    """stdin's lines, read unbuffered so that ``waiting`` sees a line as soon as it is sent."""

    def __init__(self) -> None:
        self.buffer = b""

    def waiting(self) -> bool:
        return b"\n" in self.buffer or bool(select.select([0], [], [], 0)[0])

    def next(self) -> list[str]:
        while b"\n" not in self.buffer:
            data = os.read(0, 4096)
            if not data:
                return ["stop"]
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode().split()


def upgrade(path: Path, rows: int) -> None:
    """Open ``path`` as ``thatch mcp`` does, the backfill doing ``rows`` rows a transaction
    and, between transactions (the lock free), printing ``paused`` and waiting for a line."""
    from thatch.frontend.store import backfill
    from thatch.frontend.store.memory_store import Store

    commands = Commands()
    run = backfill.run

    def handshake(seconds: float) -> None:
        print("paused", flush=True)
        commands.next()

    def stepwise(conn: sqlite3.Connection, steps: Any, **_: object) -> set[str]:
        return run(conn, steps, rows=rows, work_s=0.0, sleep=handshake)

    backfill.run = stepwise  # type: ignore[assignment]
    with Store.open(path):
        print("opened", flush=True)


def main() -> None:
    role, path = sys.argv[1], Path(sys.argv[2])
    if role == "upgrader":
        upgrade(path, int(sys.argv[3]))
        return
    peer: Writer | Reader
    peer = (
        Writer(path, int(sys.argv[3]), int(sys.argv[4]))
        if role == "writer"
        else Reader(path, int(sys.argv[3]))
    )
    print("ready", flush=True)
    commands = Commands()
    while True:
        command = commands.next()
        if command[0] == "ops":
            for _ in range(int(command[1])):
                peer.one()
            print(f"done {getattr(peer, 'lexical', 0)}", flush=True)
        elif command[0] == "run":
            while not commands.waiting():
                peer.one()
        elif command[0] == "stop":
            print(json.dumps(peer.summary()), flush=True)
            return


if __name__ == "__main__":
    main()
