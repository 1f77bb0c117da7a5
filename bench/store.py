"""Store benchmark: recall over a real stdio MCP session vs in-process search (prints tables).

    python bench/store.py [--sizes 1000,10000,100000] [--repeats 30]

Rows are N random unit vectors of the model's dimension (384), inserted straight into a
temp SQLite file in the project store ``benchproj``; queries are real developer questions
embedded by a real embedder process serving all-MiniLM-L6-v2 int8 (imported by thatch's
importer into the bench cache, see bench/embedder.py). Figures per size:
- memory_recall end to end: client-side time of ``tools/call`` over one ``thatch mcp``
  stdio session (query embedding, pending checks, search, telemetry write, formatting);
- in-process search alone: a long-lived Store, warm matrix cache;
- the parts of a recall timed in-process, to see where the end-to-end time goes;
- memory_remember (passage embedding + find_similar + the write with fsync) and
  find_duplicates at the sizes asked;
- the naive baseline in the same run: read every BLOB, decode into Python floats, cosine
  row by row in pure Python, sort, top 10 (what a straight port does).
Other processes may share the machine: compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from _common import embedder_running, median_of, memory_texts, percentile, print_table, timed
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from thatch.embedder.client import EmbedderClient
from thatch.embedder.encoder import Kind
from thatch.frontend import formatting as fmt
from thatch.frontend.slugs import slugify
from thatch.frontend.store import Store
from thatch.frontend.vectors import encode

from embedder import prepare_models

PROJECT = "benchproj"
SCOPE = [PROJECT, "global"]
STAMP = "2025-01-01T00:00:00.000Z"
WARMUP = 3
MS = 1000.0
QUESTIONS = [
    "how do I run the integration tests against the database",
    "which port does postgres listen on for the test suite",
    "how are releases built and where do the binaries go",
    "what is the code review policy for pull requests",
    "how do we deploy to staging",
    "why does the migration invalidate the redis cache",
    "alembic autogenerate misses server defaults",
    "how does the oauth token refresh work",
    "what logging library do we use and what format",
    "which node version is pinned for the bundler",
    "windows path handling problems",
    "does the user prefer tabs or spaces in go",
    "how big should a pull request be",
    "where are the test fixtures seeded from",
    "what does the make release target do",
    "how do I regenerate the grpc stubs",
    "the CI job fails on tags, why",
    "how to reset the local database",
    "which environment variables configure the embedder socket",
    "what is the retry policy when the embedding service is overloaded",
    "how do I profile a slow endpoint",
    "where do feature flags live",
    "how is the schema version stored in cache keys",
    "what linters run before commit",
    "how do I add a new CLI command",
    "what timezone are timestamps stored in",
    "how are secrets provided to the staging cluster",
    "how should errors be shown to users",
    "what is the maximum size of a memory",
    "which python version does the project target",
]


@dataclass
class SizeResult:
    size: int
    figures: dict[str, list[float]] = field(default_factory=dict)
    naive_s: float | None = None
    naive_note: str = ""

    def p(self, name: str, q: float) -> float | None:
        values = self.figures.get(name)
        return percentile(values, q) if values else None


# -- processes ---------------------------------------------------------------------------


def server_params(tmp: Path, address: str) -> StdioServerParameters:
    thatch = Path(sys.executable).with_name("thatch")
    command, args = (
        (str(thatch), ["mcp"]) if thatch.exists() else (sys.executable, ["-m", "thatch.cli", "mcp"])
    )
    home = tmp / "home"
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "THATCH_DB_PATH": str(tmp / "db" / "thatch.db"),
        "THATCH_EMBEDDER_ADDR": address,
        "THATCH_PROJECT_DIR": str(tmp / PROJECT),
    }
    return StdioServerParameters(command=command, args=args, env=env)


# -- data --------------------------------------------------------------------------------


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def fill(path: Path, vectors: np.ndarray, model: str) -> None:
    """Insert the rows directly: one transaction, one executemany (no embedding)."""
    with Store.open(path) as store:
        conn = store.conn
        conn.execute("BEGIN")
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (PROJECT,))
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (slugify(f"memory {i}"), PROJECT, f"memory {i}",
                 f"# memory {i}\n\nsynthetic memory number {i}", encode(v), model, STAMP, STAMP)
                for i, v in enumerate(vectors)
            ),
        )  # fmt: skip
        conn.execute("COMMIT")


# -- the naive port ----------------------------------------------------------------------


def naive_search(path: Path, query: Sequence[float], limit: int = 10) -> list[tuple[float, str]]:
    """Every row read and scored in pure Python, as a straight port would do it."""
    conn = sqlite3.connect(path)
    try:
        q_norm = math.sqrt(sum(x * x for x in query))
        scored = []
        rows = conn.execute(
            "SELECT slug, embedding FROM entries WHERE store IN (?, ?)", tuple(SCOPE)
        )
        for slug, blob in rows:
            vector = struct.unpack(f"<{len(blob) // 4}f", blob)
            dot = norm = 0.0
            for a, b in zip(query, vector, strict=True):
                dot += a * b
                norm += b * b
            scored.append((dot / (q_norm * math.sqrt(norm)) if norm else 0.0, slug))
        scored.sort(reverse=True)
        return scored[:limit]
    finally:
        conn.close()


# -- measurements ------------------------------------------------------------------------


def in_process(
    result: SizeResult, path: Path, queries: np.ndarray, repeats: int, dup_sizes: set[int]
) -> None:
    slow = max(3, min(repeats, 10))  # parts that reload the whole store each time
    cycle = [queries[i % len(queries)] for i in range(repeats)]
    figures = result.figures
    with Store.open(path) as store:
        store.search(SCOPE, queries[0])  # fills the matrix cache
        figures["search"] = [timed(lambda q=q: store.search(SCOPE, q)) for q in cycle]
        matches = store.search(SCOPE, queries[0])
        figures["format"] = [timed(lambda: fmt.recall_results(matches, 0)) for _ in cycle]
        figures["pending"] = [
            timed(lambda: (store.pending_memories(limit=32), store.pending_count_in(SCOPE)))
            for _ in range(slow)
        ]
        # Store.recall stamps telemetry, so each call finds its own cache invalidated.
        store.recall(SCOPE, queries[0])
        figures["recall"] = [timed(lambda q=q: store.recall(SCOPE, q)) for q in cycle[:slow]]
        if result.size in dup_sizes:
            store.search(SCOPE, queries[0])
            figures["dups"] = [median_of(3, lambda: store.find_duplicates(PROJECT))]

    def cold(query: np.ndarray) -> None:
        with Store.open(path) as fresh:
            fresh.search(SCOPE, query)

    figures["cold"] = [timed(lambda q=q: cold(q)) for q in cycle[:slow]]


def naive(result: SizeResult, path: Path, queries: np.ndarray, budget_s: float) -> None:
    query = [float(x) for x in queries[0]]
    per_row = timed(lambda: naive_search(path, query)) / result.size
    estimate = per_row * result.size
    if estimate > budget_s:
        result.naive_s, result.naive_note = estimate, "extrapolated from one run"
        return
    runs = 3 if estimate * 3 < budget_s / 4 else 1
    lists = [[float(x) for x in q] for q in queries[1 : runs + 1]]
    result.naive_s = float(np.median([timed(lambda q=q: naive_search(path, q)) for q in lists]))
    result.naive_note = f"median of {runs}"


async def over_mcp(
    result: SizeResult, params: StdioServerParameters, repeats: int, remember: bool, dups: bool
) -> None:
    async def call(name: str, arguments: dict[str, object], expect: str | None) -> float:
        start = time.perf_counter()
        answer = await client.call_tool(name, arguments)
        elapsed = time.perf_counter() - start
        text = answer.content[0].text if answer.content else ""
        if answer.is_error or (expect is not None and expect not in text):
            raise SystemExit(f"{name} failed over MCP: {text[:300]}")
        return elapsed

    async with Client(params, mode="legacy") as client:
        for i in range(WARMUP):
            await call("memory_recall", {"query": QUESTIONS[-1 - i]}, "store:")
        result.figures["mcp_recall"] = [
            await call("memory_recall", {"query": QUESTIONS[i % len(QUESTIONS)]}, "store:")
            for i in range(repeats)
        ]
        if remember:
            texts = memory_texts(repeats, seed=result.size)
            result.figures["mcp_remember"] = [
                await call(
                    "memory_remember", {"label": f"bench note {i}", "content": text}, "[saved]"
                )
                for i, text in enumerate(texts)
            ]
        if dups:
            result.figures["mcp_dups"] = [await call("find_duplicates", {}, None)]


def run_size(
    size: int, args: argparse.Namespace, model: str, queries: np.ndarray, address: str
) -> SizeResult:
    result = SizeResult(size)
    rng = np.random.default_rng(size)
    tmp = Path(tempfile.mkdtemp(prefix=f"thatch-store-{size}-"))
    try:
        (tmp / PROJECT).mkdir()
        (tmp / "db").mkdir()
        path = tmp / "db" / "thatch.db"
        started = time.perf_counter()
        fill(path, unit_vectors(rng, size, queries.shape[1]), model)
        print(f"[{size}] filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        in_process(result, path, queries, args.repeats, args.dup_sizes)
        naive(result, path, queries, args.naive_budget)
        print(f"[{size}] in-process + naive done; MCP session …", file=sys.stderr)
        asyncio.run(
            over_mcp(
                result,
                server_params(tmp, address),
                args.repeats,
                remember=size in args.remember_sizes,
                dups=size in args.dup_sizes and size in args.remember_sizes,
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


# -- report ------------------------------------------------------------------------------


def ms(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value * MS:.{digits}f}"


def bar(value: float | None, limit_s: float) -> str:
    if value is None:
        return "n/a"
    return f"{'PASS' if value <= limit_s else 'FAIL'} (≤ {limit_s * MS:g} ms)"


RECALL_BARS = {10000: 0.020, 100000: 0.060}
SEARCH_BARS = {10000: 0.005}
DUPS_BARS = {10000: 2.0}


def report(results: list[SizeResult], embed: list[float], repeats: int) -> None:
    print_table(
        f"memory_recall end to end over one stdio MCP session ({repeats} calls, "
        f"{WARMUP} warm-up)",
        ["memories", "p50 ms", "p95 ms", "bar (p50)"],
        [
            [str(r.size), ms(r.p("mcp_recall", 50), 1), ms(r.p("mcp_recall", 95), 1),
             bar(r.p("mcp_recall", 50), RECALL_BARS[r.size]) if r.size in RECALL_BARS else "—"]
            for r in results
        ],
    )  # fmt: skip
    rows = []
    for r in results:
        search = r.p("search", 50)
        speedup = "—" if not (r.naive_s and search) else f"{r.naive_s / search:,.0f}×"
        rows.append(
            [str(r.size), ms(search, 3), ms(r.p("search", 95), 3),
             bar(search, SEARCH_BARS[r.size]) if r.size in SEARCH_BARS else "—",
             f"{ms(r.naive_s, 0)} ({r.naive_note})", speedup]
        )  # fmt: skip
    print_table(
        "In-process search (long-lived Store, warm cache) vs naive pure-Python port",
        ["memories", "search p50 ms", "p95 ms", "bar (p50)", "naive ms", "speedup (p50)"],
        rows,
    )
    print_table(
        "Where a recall's time goes (in-process, p50 ms; query embed over the socket: "
        f"p50 {ms(percentile(embed, 50))}, p95 {ms(percentile(embed, 95))})",
        ["memories", "pending checks", "Store.recall", "cold search (fresh Store)",
         "warm search", "format"],
        [
            [str(r.size), ms(r.p("pending", 50)), ms(r.p("recall", 50)), ms(r.p("cold", 50)),
             ms(r.p("search", 50), 3), ms(r.p("format", 50), 3)]
            for r in results
        ],
    )  # fmt: skip
    rows = []
    for r in results:
        if "mcp_remember" in r.figures:
            rows.append(
                ["memory_remember (MCP)", str(r.size), ms(r.p("mcp_remember", 50), 1),
                 ms(r.p("mcp_remember", 95), 1), "—"]
            )  # fmt: skip
    for r in results:
        if "dups" in r.figures:
            value = r.figures["dups"][0]
            rows.append(
                ["Store.find_duplicates (median of 3)", str(r.size), ms(value, 0), "—",
                 bar(value, DUPS_BARS[r.size]) if r.size in DUPS_BARS else "—"]
            )  # fmt: skip
        if "mcp_dups" in r.figures:
            rows.append(
                ["find_duplicates (MCP, once, after remembers)", str(r.size),
                 ms(r.figures["mcp_dups"][0], 0), "—", "—"]
            )  # fmt: skip
    print_table(
        "Writes and duplicate scans (remember = passage embed + find_similar + write w/ fsync)",
        ["operation", "memories", "p50 ms", "p95 ms", "bar"],
        rows,
    )


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--remember-sizes", default="10000")
    parser.add_argument("--dup-sizes", default="1000,10000")
    parser.add_argument("--naive-budget", type=float, default=60.0, help="seconds")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thatch-bench",
    )
    args = parser.parse_args()
    args.remember_sizes = {int(n) for n in args.remember_sizes.split(",") if n}
    args.dup_sizes = {int(n) for n in args.dup_sizes.split(",") if n}
    model_dir = prepare_models(args.cache, ["minilm-int8"])["minilm-int8"]
    load_before = loadavg()
    started = time.perf_counter()
    with embedder_running(str(model_dir)) as (address, _proc):
        with EmbedderClient(address, autostart=False) as client:
            embedded = client.embed(QUESTIONS, Kind.QUERY, timeout=60)
            queries = np.array(embedded.vectors, dtype=np.float32)
            embed = [
                timed(lambda q=q: client.embed([q], Kind.QUERY, timeout=10)) for q in QUESTIONS
            ]
        results = [
            run_size(int(n), args, embedded.model_id, queries, address)
            for n in args.sizes.split(",")
        ]
    print(
        f"\nmodel {embedded.model_id} (int8), dim {queries.shape[1]}; {os.cpu_count()} CPUs; "
        f"run took {time.perf_counter() - started:.0f} s; load average before {load_before}, "
        f"after {loadavg()}"
    )
    report(results, embed, args.repeats)


if __name__ == "__main__":
    main()
