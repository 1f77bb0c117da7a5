"""In-process cost of a recall right after a remember, against a recall with no write between.

    .venv/bin/python bench/recall_after_write.py [--rows 10000] [--repeats 200] [--rounds 3]
                                                [--against REF] [--model mock|minilm-int8]

The calls go through ``Tools`` as ``thatch mcp`` makes them (recall counts deferred until
after the answer, then written before the next call), on a temp SQLite file of ``--rows``
random memories in the project store, with the shared vector snapshots on. Each round
alternates memory_remember and memory_recall ``--repeats`` times, then recalls as often
with no write between; the table gives medians and SQL statements per recall (the
deferred stamp excluded). ``--against REF`` measures a git ref of this repository too, in
the same run (rounds interleaved), so a change shows as a ratio rather than as absolutes
on a shared machine. ``--model mock`` (default) embeds with a hash-seeded stand-in; a
real model adds a real embedder process, whose cost both sides then share.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "benchproj"
STAMP = "2025-01-01T00:00:00.000Z"
WARMUP = 5
FIGURES = ["remember", "recall after write", "recall", "statements after write", "statements"]


# -- the measurement (run in a child process, with one tree's thatch) -----------------------


@dataclass(frozen=True)
class _Embedded:
    vectors: npt.NDArray[np.float32]
    model_id: str


class StandIn:
    """Unit vectors seeded by each text's hash: free to compute, equal for equal texts."""

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str], kind: object, **_options: object) -> _Embedded:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).normal(size=self.dim).astype(np.float32)
            rows.append(vector / np.linalg.norm(vector))
        return _Embedded(np.stack(rows), "bench/stand-in")

    def ensure_started(self, *, wait: float) -> None:
        return None

    def close(self) -> None:
        return None


def fill(path: Path, rows: int, dim: int) -> None:
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.store.slugs import slugify
    from thatch.frontend.store.vectors import encode

    rng = np.random.default_rng(rows)
    vectors = rng.normal(size=(rows, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with Store.open(path) as store:
        store.conn.execute("BEGIN")
        store.conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (PROJECT,))
        store.conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (slugify(f"memory {i}"), PROJECT, f"memory {i}",
                 f"# memory {i}\n\nsynthetic memory number {i}", encode(v), "bench", STAMP,
                 STAMP)
                for i, v in enumerate(vectors)
            ),
        )  # fmt: skip
        store.conn.execute("COMMIT")


def measure(rows: int, repeats: int, address: str | None, dim: int) -> dict[str, float]:
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.tools.after_reply import AfterReply
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    root = Path(tempfile.mkdtemp(prefix="thatch-raw-"))
    try:
        fill(root / "thatch.db", rows, dim)
        embedder: Any = StandIn(dim)
        if address is not None:
            from thatch.embedder.client.embedder_client import EmbedderClient

            embedder = EmbedderClient(address, autostart=False)
        store = Store.open(root / "thatch.db", snapshot_dir=root / "vectors")
        ctx = ToolContext(
            store=store, embedder=embedder, project_store=PROJECT, project_dir=root, host=None,
            env={}, queue_dir=root / "queue",
        )  # fmt: skip
        after = AfterReply()
        tools = Tools(ctx, after)
        statements: list[str] = []

        def call(name: str, arguments: dict[str, object]) -> tuple[float, int]:
            statements.clear()
            store.conn.set_trace_callback(statements.append)
            start = time.perf_counter()
            result = tools.call(name, arguments)
            elapsed = time.perf_counter() - start
            store.conn.set_trace_callback(None)
            if result.is_error:
                raise SystemExit(f"{name} failed: {result.text}")
            after.release()  # the answer is out: the deferred stamp runs, off the clock
            after.wait_idle()
            return elapsed, len(statements)

        with ctx:
            for i in range(WARMUP):
                call("memory_recall", {"query": f"warm-up question {i}"})
            remember, written, quiet, counted_written, counted_quiet = [], [], [], [], []
            for i in range(repeats):
                remember.append(call("memory_remember", {"label": f"note {i}", "content": "x"})[0])
                elapsed, count = call("memory_recall", {"query": f"question {i % 16}"})
                written.append(elapsed)
                counted_written.append(count)
            for i in range(repeats):
                elapsed, count = call("memory_recall", {"query": f"question {i % 16}"})
                quiet.append(elapsed)
                counted_quiet.append(count)
            after.close()
        medians = [remember, written, quiet, counted_written, counted_quiet]
        return {name: statistics.median(v) for name, v in zip(FIGURES, medians, strict=True)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- trees and rounds (the parent) --------------------------------------------------------


@contextmanager
def tree_of(ref: str) -> Iterator[Path]:
    """``ref`` of this repository as an importable ``thatch``: a dir to put on PYTHONPATH."""
    root = Path(tempfile.mkdtemp(prefix="thatch-ref-"))
    try:
        source = root / "src"
        source.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
        mapping = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"
        ]
        for package, folder in mapping.items():
            link = root.joinpath("links", *package.split("."))
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source / folder, target_is_directory=True)
        yield root / "links"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_child(args: argparse.Namespace, address: str | None, path: Path | None) -> dict:
    env = dict(os.environ)
    if path is not None:  # ahead of the editable install's finder
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")]).rstrip(":")
    command = [sys.executable, __file__, "--child", "--rows", str(args.rows)]
    command += ["--repeats", str(args.repeats), "--dim", str(args.dim)]
    if address is not None:
        command += ["--address", address]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"measurement failed:\n{done.stderr[-2000:]}")
    figures: dict = json.loads(done.stdout)
    return figures


@contextmanager
def embedder_for(model: str) -> Iterator[tuple[str | None, int]]:
    """The embedder address children use (None: the stand-in) and the vector dimension."""
    if model == "mock":
        yield None, 384
        return
    from _common import embedder_running
    from embedder import prepare_models
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.kind import Kind

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thatch-bench"
    with embedder_running(str(prepare_models(cache, [model])[model])) as (address, _proc):
        with EmbedderClient(address, autostart=False) as client:
            dim = len(client.embed(["dimension"], Kind.QUERY, timeout=60).vectors[0])
        yield address, dim


def report(results: dict[str, list[dict]], rows: int) -> None:
    names = list(results)
    for name in names:
        each = ", ".join(
            f"{r['recall after write'] * 1000:.2f}/{r['recall'] * 1000:.2f}" for r in results[name]
        )
        print(f"{name}: recall after write / with no write, each round (ms): {each}")
    print(f"\n## Recall after a write, in process, {rows:,} memories (ms, medians of rounds)\n")
    header = ["figure", *names]
    if len(names) == 2:
        header.append(f"{names[0]} / {names[1]}")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for figure in [*FIGURES, "write adds"]:
        values = []
        for name in names:
            rounds = results[name]
            if figure == "write adds":
                got = [r["recall after write"] - r["recall"] for r in rounds]
            else:
                got = [r[figure] for r in rounds]
            values.append(statistics.median(got))
        scale = 1 if figure.startswith("statements") else 1000
        cells = [f"{v * scale:.3f}" if scale != 1 else f"{v:.0f}" for v in values]
        if len(names) == 2:
            cells.append(f"{values[0] / values[1]:.2f}" if values[1] else "—")
        print("| " + " | ".join([figure, *cells]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", help="a git ref of this repository to measure too")
    parser.add_argument("--model", default="mock", help="mock, minilm-int8, minilm-fp32")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=384, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rows, args.repeats, args.address, args.dim)))
        return
    with embedder_for(args.model) as (address, dim):
        args.dim = dim
        with maybe_tree(args.against) as against:
            results: dict[str, list[dict]] = {"this tree": []}
            if against is not None:
                results[args.against] = []
            for _ in range(args.rounds):
                results["this tree"].append(run_child(args, address, None))
                if against is not None:
                    results[args.against].append(run_child(args, address, against))
    report(results, args.rows)


@contextmanager
def maybe_tree(ref: str | None) -> Iterator[Path | None]:
    if ref is None:
        yield None
        return
    with tree_of(ref) as path:
        yield path


if __name__ == "__main__":
    main()
