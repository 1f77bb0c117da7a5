"""Store benchmark: the issue-9 §3 figures, each beside its same-run baseline (prints tables).

    python bench/store.py [--model minilm-int8|minilm-fp32|mock] [--repeats 30]
                          [--big 100000] [--sessions 8] [--session-ops 100]
                          [--only alternation|lexical|snapshot|parts|dense]

Rows are random unit vectors of the model's dimension inserted straight into a temp SQLite
file in the project store ``benchproj``; every tool call goes over a real stdio ``thatch mcp``
session and every query is embedded by a real embedder process serving ``--model``. Figures:
- recall with a write between every recall (one session writing before every measured
  call) at 10k, against store_list's round trip + one query embed, both measured in the
  same loop right after a write as the recall is;
- memory_remember in that alternation at 10k against the same at 1k;
- the same session's recalls with no write between (what the writes add; reported only);
- a fresh ``thatch search`` process at 10k against the same at 100 memories;
- recall p50 at ``--big`` (warm, no writes between), and the first recall of a new process;
- RSS of one ``thatch mcp`` after a recall at ``--big`` over its RSS after a recall on an
  empty store, and the total of ``--sessions`` such processes;
- ``--sessions`` sessions at once, each alternating ``--session-ops`` remembers and recalls
  on a store that starts empty (p50/p99 of each).
``--only alternation`` measures just the first two (the 1k and 10k alternations, store_list
and the query embed): a quick check of the write-then-recall path.
``--only lexical`` measures what the lexical query adds to a recall (issue 15 §4), in this
process and without the embedder: ``Store.search`` with and without the query text,
interleaved, at 1k, 10k and ``--big`` memories whose texts follow a Zipf distribution over
pseudo-words and snake_case/dotted identifiers, queries a bench question plus corpus words
and one identifier (random query vectors: the dense half costs the same either way).
``--only snapshot`` measures what checking a mapped snapshot costs (issue 21 §3), without the
embedder: at ``--big`` memories, new processes each open the store and run one search, in
turn with the snapshot checked (as shipped), with its checksums skipped (the unchecked map
of before, for comparison) and with no snapshot at all (the SQLite load it saves).
``--only parts`` measures recall per ranking part (issue 24), without the embedder: at 10k and
``--big`` memories whose texts also hold CamelCase names, ``Store.search`` dense only, with
the lexical query before column ``camel`` (m017) and with it (as shipped), and with the
rows chunk vectors would add (bench/recall_quality.py measured chunked ranking; it did not
win, so this is its cost estimate); and what column ``camel`` costs a write (the time to
insert the memories through the triggers, with and without m017) and m017's rebuild.
``--only dense`` measures what a second scan per recall would cost (issue 24's dense levers,
bench/recall_dense.py; not shipped), without the embedder: at 10k and ``--big`` memories as
``parts`` fills them, ``Store.search`` with text (shipped) against the same, the best
match's vector read back and a dense search again with the moved query (Rocchio feedback;
a label vector per memory would scan as many rows again).
Other processes may share the machine: compare figures with their same-run baselines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from _common import add_cache_option, embedder_running, memory_texts, percentile, print_table, timed
from embedder import prepare_models
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.store import schema
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.slugs import slugify
from thatch.frontend.store.vectors import encode

PROJECT = "benchproj"
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
]


# -- places and processes ----------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """One temp home: a database file, a project dir, the env a frontend runs with."""

    root: Path
    address: str

    @property
    def db(self) -> Path:
        return self.root / "db" / "thatch.db"

    def env(self) -> dict[str, str]:
        home = self.root / "home"
        return {
            **os.environ,
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_STATE_HOME": str(home / "state"),
            "THATCH_DB_PATH": str(self.db),
            "THATCH_EMBEDDER_ADDR": self.address,
            "THATCH_PROJECT_DIR": str(self.root / PROJECT),
        }

    def command(self, *args: str) -> list[str]:
        thatch = Path(sys.executable).with_name("thatch")
        if thatch.exists():
            return [str(thatch), *args]
        return [sys.executable, "-m", "thatch.cli", *args]

    def server(self) -> StdioServerParameters:
        command = self.command("mcp")
        return StdioServerParameters(command=command[0], args=command[1:], env=self.env())


@contextmanager
def place(address: str, rows: int, dim: int, model: str) -> Iterator[Place]:
    root = Path(tempfile.mkdtemp(prefix=f"thatch-store-{rows}-"))
    try:
        (root / PROJECT).mkdir()
        (root / "db").mkdir()
        here = Place(root, address)
        started = time.perf_counter()
        fill(here.db, rows, dim, model)
        print(f"[{rows}] filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        yield here
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fill(path: Path, rows: int, dim: int, model: str) -> None:
    """Random unit vectors inserted directly: one transaction, chunked executemany."""
    rng = np.random.default_rng(rows)
    with Store.open(path) as store:
        conn = store.conn
        conn.execute("BEGIN")
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (PROJECT,))
        for start in range(0, rows, 10_000):
            vectors = rng.normal(size=(min(10_000, rows - start), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            conn.executemany(
                "INSERT INTO entries (slug, store, label, content, embedding, model, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    (slugify(f"memory {i}"), PROJECT, f"memory {i}",
                     f"# memory {i}\n\nsynthetic memory number {i}", encode(v), model, STAMP,
                     STAMP)
                    for i, v in enumerate(vectors, start)
                ),
            )  # fmt: skip
        conn.execute("COMMIT")


def children() -> set[int]:
    """Pids of this process's children that run ``thatch mcp``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"mcp" in cmdline:
            found.add(int(entry.name))
    return found


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for {pid}")


def pss_mb(pid: int) -> float:
    """Proportional set size: pages shared with other processes count as a share each."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no Pss for {pid}")


class Session:
    """One stdio MCP session (a ``thatch mcp`` process) and its pid."""

    def __init__(self, client: Client, pid: int) -> None:
        self.client = client
        self.pid = pid

    async def call(self, name: str, arguments: dict[str, object], expect: str = "") -> float:
        start = time.perf_counter()
        answer = await self.client.call_tool(name, arguments)
        elapsed = time.perf_counter() - start
        text = answer.content[0].text if answer.content else ""
        if answer.is_error or expect not in text:
            raise SystemExit(f"{name} failed over MCP: {text[:300]}")
        return elapsed

    async def recall(self, i: int, expect: str = "store:") -> float:
        return await self.call("memory_recall", {"query": QUESTIONS[i % len(QUESTIONS)]}, expect)

    async def remember(self, label: str, text: str) -> float:
        return await self.call("memory_remember", {"label": label, "content": text}, "[saved]")


async def open_session(stack: AsyncExitStack, where: Place) -> Session:
    before = children()
    client = await stack.enter_async_context(Client(where.server(), mode="legacy"))
    [pid] = children() - before
    return Session(client, pid)


# -- measurements ------------------------------------------------------------------------


Figures = dict[str, list[float]]


async def alternate(
    where: Place, client: EmbedderClient, size: int, repeats: int, figures: Figures
) -> None:
    """One session writing before every measured call: each round is memory_remember then,
    in turn, memory_recall, store_list or a direct query embed. The recall's baselines are
    thus measured in the same conditions as the recall itself (right after a write, whose
    passage embed leaves the embedder's caches cold for the next query), interleaved."""
    async with AsyncExitStack() as stack:
        session = await open_session(stack, where)
        for i in range(WARMUP):
            await session.recall(i)
        remember, recall, store_list, embed = [], [], [], []
        for i, text in enumerate(memory_texts(3 * repeats, seed=size)):
            remember.append(await session.remember(f"bench note {i}", text))
            if i % 3 == 0:
                recall.append(await session.recall(i))
            elif i % 3 == 1:
                store_list.append(await session.call("store_list", {}, PROJECT))
            else:
                query = QUESTIONS[i % len(QUESTIONS)]
                embed.append(timed(lambda q=query: client.embed([q], Kind.QUERY, timeout=10)))
        figures[f"remember {size}"] = remember
        figures[f"recall after write {size}"] = recall
        figures[f"store_list {size}"] = store_list
        figures[f"embed {size}"] = embed
        # The same recalls with no write between: what the writes add.
        figures[f"recall {size}"] = [await session.recall(i) for i in range(repeats)]


def fresh_searches(small: Place, large: Place, sizes: tuple[int, int], runs: int) -> Figures:
    """``thatch search`` in a new process, the two sizes interleaved so load hits both."""
    figures: Figures = {f"search cli {sizes[0]}": [], f"search cli {sizes[1]}": []}
    for i in range(runs + 1):
        for size, where in zip(sizes, (small, large), strict=True):
            command = where.command("search", QUESTIONS[i % len(QUESTIONS)])
            start = time.perf_counter()
            done = subprocess.run(command, env=where.env(), capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            if done.returncode != 0:
                raise SystemExit(f"thatch search failed: {done.stderr.strip()[:300]}")
            if i > 0:  # the first round warms the page cache and the embedder
                figures[f"search cli {size}"].append(elapsed)
    return figures


async def big_store(
    empty: Place, big: Place, size: int, repeats: int, sessions: int, figures: Figures
) -> None:
    async with AsyncExitStack() as stack:
        session = await open_session(stack, empty)
        await session.recall(0, expect="")
        figures["rss empty"] = [rss_mb(session.pid)]
        figures["pss empty"] = [pss_mb(session.pid)]
    firsts = []
    for i in range(3):
        async with AsyncExitStack() as stack:
            session = await open_session(stack, big)
            firsts.append(await session.recall(i))
            if i == 2:
                figures[f"rss {size}"] = [rss_mb(session.pid)]
                figures[f"pss {size}"] = [pss_mb(session.pid)]
                for j in range(WARMUP):
                    await session.recall(j)
                figures[f"recall warm {size}"] = [await session.recall(j) for j in range(repeats)]
    figures[f"first recall {size}"] = firsts
    figures[f"first recall {size} later"] = firsts[1:]
    async with AsyncExitStack() as stack:
        opened = [await open_session(stack, big) for _ in range(sessions)]
        await asyncio.gather(*(s.recall(k) for k, s in enumerate(opened)))
        figures[f"rss {sessions} sessions {size}"] = [sum(rss_mb(s.pid) for s in opened)]
        figures[f"pss {sessions} sessions {size}"] = [sum(pss_mb(s.pid) for s in opened)]


async def many_sessions(where: Place, sessions: int, ops: int, figures: Figures) -> None:
    """Every session alternates remember and recall, all at once, on one store."""
    remember: list[float] = []
    recall: list[float] = []

    async def run(session: Session, k: int) -> None:
        for i, text in enumerate(memory_texts(ops, seed=1000 + k)):
            remember.append(await session.remember(f"s{k} note {i}", text))
            recall.append(await session.recall(i + k))

    async with AsyncExitStack() as stack:
        opened = [await open_session(stack, where) for _ in range(sessions)]
        for s in opened:
            await s.recall(0, expect="")
        await asyncio.gather(*(run(s, k) for k, s in enumerate(opened)))
    figures["sessions remember"] = remember
    figures["sessions recall"] = recall


# -- report ------------------------------------------------------------------------------


def p50(figures: Figures, name: str) -> float:
    return statistics.median(figures[name])


def ms(value: float) -> str:
    return f"{value * MS:.1f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def alternation_rows(figures: Figures) -> list[list[str]]:
    floor = p50(figures, "store_list 10000") + p50(figures, "embed 10000")
    recall_w = p50(figures, "recall after write 10000")
    rem_10k, rem_1k = p50(figures, "remember 10000"), p50(figures, "remember 1000")
    quiet = p50(figures, "recall 10000")
    return [
        ["recall p50, a write between recalls, 10k", ms(recall_w),
         f"store_list {ms(p50(figures, 'store_list 10000'))} + embed "
         f"{ms(p50(figures, 'embed 10000'))} = {ms(floor)}",
         f"+{ms(recall_w - floor)}", f"≤ +5 ms: {verdict(recall_w - floor <= 0.005)}"],
        ["remember p50 (in that alternation), 10k", ms(rem_10k), f"1k: {ms(rem_1k)}",
         f"+{ms(rem_10k - rem_1k)}", f"≤ +10 ms: {verdict(rem_10k - rem_1k <= 0.010)}"],
        ["recall p50, no write between (same session), 10k", ms(quiet),
         f"after a write: {ms(recall_w)}", f"the write adds {ms(recall_w - quiet)}", "report"],
    ]  # fmt: skip


TARGETS_TITLE = "Issue 9 §3 targets (ms, medians; baselines from this run)"
TARGETS_HEADER = ["figure", "value", "baseline", "delta", "target"]


def report(figures: Figures, args: argparse.Namespace) -> None:
    if args.only == "alternation":
        print_table(TARGETS_TITLE, TARGETS_HEADER, alternation_rows(figures))
        return
    big, n = args.big, args.sessions
    cli_10k, cli_100 = p50(figures, "search cli 10000"), p50(figures, "search cli 100")
    warm, first = p50(figures, f"recall warm {big}"), p50(figures, f"first recall {big}")
    rss_empty, rss_big = figures["rss empty"][0], figures[f"rss {big}"][0]
    rss_all = figures[f"rss {n} sessions {big}"][0]
    pss_empty, pss_big = figures["pss empty"][0], figures[f"pss {big}"][0]
    pss_all = figures[f"pss {n} sessions {big}"][0]
    firsts = figures[f"first recall {big}"]
    rows = [
        *alternation_rows(figures),
        ["fresh `thatch search` p50, 10k", ms(cli_10k), f"100: {ms(cli_100)}",
         f"+{ms(cli_10k - cli_100)}", f"≤ +25 ms: {verdict(cli_10k - cli_100 <= 0.025)}"],
        [f"recall p50 over MCP, {big:,} (warm)", ms(warm), "—", "—",
         f"≤ 30 ms: {verdict(warm <= 0.030)}"],
        [f"first recall of a new process, {big:,} (median of 3)", ms(first), "—", "—",
         f"≤ 300 ms: {verdict(first <= 0.300)}"],
        [f"first recall of a new process, {big:,}: each of the 3", ", ".join(map(ms, firsts)),
         "—", "—", "the first one may build the shared snapshot"],
    ]  # fmt: skip
    print_table(TARGETS_TITLE, TARGETS_HEADER, rows)
    print_table(
        f"Memory: RSS of `thatch mcp` after one recall (MB); vectors at {big:,}: "
        f"{big * args.dim * 4 / 2**20:.0f} MB",
        ["process", "RSS MB", "over empty-store RSS", "PSS MB", "over empty-store PSS", "target"],
        [
            ["one, empty store", f"{rss_empty:.0f}", "—", f"{pss_empty:.0f}", "—", "—"],
            [f"one, {big:,}", f"{rss_big:.0f}", f"+{rss_big - rss_empty:.0f}",
             f"{pss_big:.0f}", f"+{pss_big - pss_empty:.0f}",
             f"≤ +200 MB: {verdict(rss_big - rss_empty <= 200)}"],
            [f"{n} sessions, {big:,} (total)", f"{rss_all:.0f}",
             f"+{rss_all - n * rss_empty:.0f} over {n}× empty", f"{pss_all:.0f}",
             f"+{pss_all - n * pss_empty:.0f} over {n}× empty", "report"],
        ],
    )  # fmt: skip
    rem, rec = figures["sessions remember"], figures["sessions recall"]
    total = args.sessions * args.session_ops
    print_table(
        f"{n} sessions × {args.session_ops} remember + {args.session_ops} recall at once "
        f"(store starts empty, ends with {total} memories; ms)",
        ["call", "p50", "p99", "calls"],
        [
            ["memory_remember", ms(percentile(rem, 50)), ms(percentile(rem, 99)), str(len(rem))],
            ["memory_recall", ms(percentile(rec, 50)), ms(percentile(rec, 99)), str(len(rec))],
        ],
    )


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


async def measure(
    args: argparse.Namespace, address: str, client: EmbedderClient, model: str, figures: Figures
) -> None:
    for size in (1000, 10000):
        with place(address, size, args.dim, model) as where:
            await alternate(where, client, size, args.repeats, figures)
    if args.only == "alternation":
        return
    with (
        place(address, 100, args.dim, model) as small,
        place(address, 10000, args.dim, model) as large,
    ):
        figures.update(fresh_searches(small, large, (100, 10000), args.cli_runs))
    with (
        place(address, 0, args.dim, model) as empty,
        place(address, args.big, args.dim, model) as big,
    ):
        await big_store(empty, big, args.big, args.repeats, args.sessions, figures)
    with place(address, 0, args.dim, model) as shared:
        await many_sessions(shared, args.sessions, args.session_ops, figures)


def zipf_corpus(rows: int, seed: int, camel: bool = False) -> tuple[list[str], list[str]]:
    """(memory texts, query texts) over a Zipf-distributed vocabulary with identifiers
    (``camel``: a third of them CamelCase)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(3, 10, size=20_000)]
    names = [f"{a}_{b}" for a, b in zip(words[5000:8000], words[9000:12000], strict=True)]
    names += [f"{a}.{b}" for a, b in zip(words[12000:13000], words[14000:15000], strict=True)]
    if camel:
        names += [f"{a}{b.title()}" for a, b in zip(words[15000:17000], words[17000:19000],
                                                      strict=True)]  # fmt: skip
    vocabulary = np.array(words + names)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1) ** 1.07
    shuffled = rng.permutation(len(vocabulary))  # identifiers spread over all ranks
    probability = np.empty(len(vocabulary))
    probability[shuffled] = weights / weights.sum()
    lengths = rng.integers(12, 160, size=rows)
    drawn = rng.choice(len(vocabulary), size=int(lengths.sum()), p=probability)
    texts, start = [], 0
    for i, n in enumerate(lengths):
        body = " ".join(vocabulary[drawn[start : start + n]])
        texts.append(f"# memory {i}\n\n{body}.")
        start += n
    queries = [
        f"{question} {' '.join(vocabulary[rng.choice(len(vocabulary), 2, p=probability)])} "
        f"{names[int(rng.integers(len(names)))]}"
        for question in QUESTIONS
    ]
    return texts, queries


def lexical_cost(args: argparse.Namespace) -> None:
    """Recall p50 in process with and without the lexical query (issue 15 §4)."""
    rows = []
    for size in (1000, 10000, args.big):
        texts, queries = zipf_corpus(size, seed=size)
        rng = np.random.default_rng(size)
        root = Path(tempfile.mkdtemp(prefix=f"thatch-lexical-{size}-"))
        try:
            started = time.perf_counter()
            with Store.open(root / "thatch.db") as store:
                conn = store.conn
                conn.execute("BEGIN")
                conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (PROJECT,))
                for start in range(0, size, 10_000):
                    chunk = texts[start : start + 10_000]
                    vectors = rng.normal(size=(len(chunk), args.dim)).astype(np.float32)
                    pairs = enumerate(zip(chunk, vectors, strict=True), start)
                    conn.executemany(
                        "INSERT INTO entries (slug, store, label, content, embedding, model, "
                        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        ((f"memory-{i}", PROJECT, f"memory {i}", text, encode(v), "m", STAMP,
                          STAMP) for i, (text, v) in pairs)
                    )  # fmt: skip
                conn.execute("COMMIT")
                filled = time.perf_counter() - started
                probes = rng.normal(size=(len(queries), args.dim)).astype(np.float32)
                plain: list[float] = []
                lexical: list[float] = []
                for repeat in range(args.repeats // len(queries) + 2):
                    for vector, text in zip(probes, queries, strict=True):
                        a = timed(lambda v=vector: store.search([PROJECT], v, limit=10))
                        b = timed(
                            lambda v=vector, t=text: store.search([PROJECT], v, text=t, limit=10)
                        )
                        if repeat:  # the first round loads the matrix and warms the pages
                            plain.append(a)
                            lexical.append(b)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        without, with_text = statistics.median(plain), statistics.median(lexical)
        target = f"≤ +2 ms: {verdict(with_text - without <= 0.002)}" if size == 10000 else "report"
        rows.append([f"{size:,}", ms(without), ms(with_text), f"+{ms(with_text - without)}",
                     f"{percentile(lexical, 99) * MS:.1f}", f"{filled:.1f} s", target])  # fmt: skip
    print_table(
        "Recall p50 in process, without and with the lexical query (ms; issue 15 §4)",
        ["memories", "dense only", "dense + lexical", "delta", "p99 with", "fill", "target"],
        rows,
    )


# Chunk vectors per memory of the code dev set split at 400 characters (1,544 chunks for
# 800 memories, bench/recall_quality.py): the rows a chunked ranking would scan besides.
CHUNKS_PER_MEMORY = 1544 / 800


def insert_rows(store: Store, texts: list[str], first: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    conn = store.conn
    conn.execute("BEGIN")
    conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (PROJECT,))
    for start in range(0, len(texts), 10_000):
        chunk = texts[start : start + 10_000]
        vectors = rng.normal(size=(len(chunk), dim)).astype(np.float32)
        pairs = enumerate(zip(chunk, vectors, strict=True), first + start)
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ((f"memory-{i}", PROJECT, f"memory {i}", text, encode(v), "m", STAMP, STAMP)
             for i, (text, v) in pairs)
        )  # fmt: skip
    conn.execute("COMMIT")


def search_p50(
    store: Store, queries: list[str], dim: int, repeats: int
) -> tuple[float, float, float]:
    """(dense only, dense + lexical before m017's column, dense + lexical) p50 of
    ``Store.search`` in process, interleaved."""
    probes = np.random.default_rng(1).normal(size=(len(queries), dim)).astype(np.float32)
    plain: list[float] = []
    before: list[float] = []
    lexical: list[float] = []
    camel = store._lexical_camel
    for repeat in range(repeats // len(queries) + 2):
        for vector, text in zip(probes, queries, strict=True):
            a = timed(lambda v=vector: store.search([PROJECT], v, limit=10))
            store._lexical_camel = False
            b = timed(lambda v=vector, t=text: store.search([PROJECT], v, text=t, limit=10))
            store._lexical_camel = camel
            c = timed(lambda v=vector, t=text: store.search([PROJECT], v, text=t, limit=10))
            if repeat:  # the first round loads the matrix and warms the pages
                plain.append(a)
                before.append(b)
                lexical.append(c)
    return statistics.median(plain), statistics.median(before), statistics.median(lexical)


def insert_seconds(
    root: Path, texts: list[str], dim: int, seed: int, m017: bool
) -> tuple[float, int]:
    """(seconds to insert ``texts`` through the index's triggers, m017's or m009's; the
    file's size afterwards, WAL checkpointed)."""
    migrations = schema.MIGRATIONS
    if not m017:
        schema.MIGRATIONS = [m for m in migrations if m[0] != "m017_fts_identifiers"]
    path = root / f"writes-{m017}.db"
    try:
        with Store.open(path) as store:
            started = time.perf_counter()
            insert_rows(store, texts, 0, dim, seed)
            seconds = time.perf_counter() - started
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return seconds, path.stat().st_size
    finally:
        schema.MIGRATIONS = migrations


def rebuild_seconds(root: Path) -> float:
    """m017 on the m009 file ``insert_seconds`` left: its migration and its whole backfill."""
    started = time.perf_counter()
    with Store.open(root / "writes-False.db"):
        pass
    return time.perf_counter() - started


def parts_cost(args: argparse.Namespace) -> None:
    """Recall p50 in process per ranking part (issue 24): dense, + lexical before and with
    column ``camel`` (shipped), and + chunk rows (not shipped: the same store with
    CHUNKS_PER_MEMORY more vector rows per memory, an estimate of what scanning chunk
    vectors would add); insert time with and without column ``camel``, m017's rebuild."""
    rows = []
    writes = []
    for size in (10000, args.big):
        texts, queries = zipf_corpus(size, seed=size, camel=True)
        root = Path(tempfile.mkdtemp(prefix=f"thatch-parts-{size}-"))
        try:
            with Store.open(root / "thatch.db") as store:
                insert_rows(store, texts, 0, args.dim, size)
                # Reads right after a big write vary 2-5× (its WAL): measured after.
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                dense, before, fused = search_p50(store, queries, args.dim, args.repeats)
                extra = round(size * CHUNKS_PER_MEMORY)
                insert_rows(store, ["# chunk\n\nc."] * extra, size, args.dim, size + 1)
                _, _, chunked = search_p50(store, queries, args.dim, args.repeats)
            without, without_size = insert_seconds(root, texts, args.dim, size, m017=False)
            with_camel, camel_size = insert_seconds(root, texts, args.dim, size, m017=True)
            rebuild = rebuild_seconds(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rows.append([f"{size:,}", ms(dense), ms(before), ms(fused), ms(chunked),
                     f"{chunked / fused:.2f}×"])  # fmt: skip
        writes.append([f"{size:,}", f"{without:.2f} s", f"{with_camel:.2f} s",
                       f"{with_camel / without:.2f}×", f"{rebuild:.2f} s",
                       f"{without_size / 1e6:.0f} → {camel_size / 1e6:.0f} MB"])  # fmt: skip
    print_table(
        "Recall p50 in process per ranking part (ms; issue 24)",
        ["memories", "dense", "+ lexical before m017", "+ lexical with camel (shipped)",
         "+ chunk rows (not shipped)", "chunks ×"],
        rows,
    )  # fmt: skip
    print_table(
        "Inserting the memories in one transaction through the index triggers, and m017's "
        "rebuild of an m009 index (migration and backfill, one process)",
        ["memories", "m009 triggers", "m017 triggers (camel)", "ratio", "m017 rebuild", "file"],
        writes,
    )
    print(f"\nload: {loadavg()}")


def second_scan_p50(
    store: Store, queries: list[str], dim: int, repeats: int
) -> tuple[float, float]:
    """(shipped recall, recall + a second scan) p50 in process, interleaved: the second is
    ``Store.search`` with text, the best match's vector read back, the query moved toward it
    (Rocchio, α 0.1) and a dense search again: what pseudo-relevance feedback, or a second
    vector per memory (label), adds to every recall (bench/recall_dense.py; not shipped)."""
    probes = np.random.default_rng(1).normal(size=(len(queries), dim)).astype(np.float32)
    shipped: list[float] = []
    twice: list[float] = []

    def feedback(vector: np.ndarray, text: str) -> None:
        top = store.search([PROJECT], vector, text=text, limit=10)
        (blob,) = store.conn.execute(
            "SELECT embedding FROM entries WHERE store = ? AND slug = ?",
            (PROJECT, top[0].memory.slug),
        ).fetchone()
        best = np.frombuffer(blob, dtype="<f4")
        moved = vector / np.linalg.norm(vector) + 0.1 * best / np.linalg.norm(best)
        store.search([PROJECT], moved.astype(np.float32), limit=10)

    for repeat in range(repeats // len(queries) + 2):
        for vector, text in zip(probes, queries, strict=True):
            a = timed(lambda v=vector, t=text: store.search([PROJECT], v, text=t, limit=10))
            b = timed(lambda v=vector, t=text: feedback(v, t))
            if repeat:  # the first round loads the matrix and warms the pages
                shipped.append(a)
                twice.append(b)
    return statistics.median(shipped), statistics.median(twice)


def dense_cost(args: argparse.Namespace) -> None:
    """Recall p50 in process with a second scan per recall (issue 24's dense levers: Rocchio
    feedback or a label vector per memory; neither shipped), at 10k and ``--big``."""
    rows = []
    for size in (10000, args.big):
        texts, queries = zipf_corpus(size, seed=size, camel=True)
        root = Path(tempfile.mkdtemp(prefix=f"thatch-dense-{size}-"))
        try:
            with Store.open(root / "thatch.db") as store:
                insert_rows(store, texts, 0, args.dim, size)
                store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                shipped, twice = second_scan_p50(store, queries, args.dim, args.repeats)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rows.append([f"{size:,}", ms(shipped), ms(twice), f"+{ms(twice - shipped)}",
                     f"{twice / shipped:.2f}×"])  # fmt: skip
    print_table(
        "Recall p50 in process, shipped and with a second scan (ms; issue 24, not shipped)",
        ["memories", "shipped (dense + lexical)", "+ feedback scan", "delta", "ratio"],
        rows,
    )
    print(f"\nload: {loadavg()}")


# One new process: open the store, time mapping the snapshot and the first search.
FIRST_SEARCH = """
import json, sys, time
import numpy as np
from pathlib import Path
import thatch.frontend.store.matrix_cache as cache
import thatch.frontend.store.vector_snapshot as snapshot
from thatch.frontend.store import schema
from thatch.frontend.store.memory_store import Store

db, snaps, mode, store_name = sys.argv[1:5]
figures = {}
if mode == "unchecked":
    class Equal(list):
        def __ne__(self, other): return False
    snapshot._checksums = lambda pieces: Equal()
read = snapshot.read_snapshot
def timed_read(*args):
    start = time.perf_counter()
    found = read(*args)
    figures["map"] = time.perf_counter() - start
    return found
cache.read_snapshot = timed_read
query = np.random.default_rng(int(sys.argv[5])).normal(size=int(sys.argv[6])).astype(np.float32)
with Store.open(db, snapshot_dir=None if mode == "none" else Path(snaps)) as store:
    start = time.perf_counter()
    store.search([store_name], query)
    figures["first"] = time.perf_counter() - start
print(json.dumps(figures))
"""


def snapshot_cost(args: argparse.Namespace) -> None:
    """First search of a new process at --big: snapshot checked, unchecked, absent."""
    root = Path(tempfile.mkdtemp(prefix="thatch-snapshot-"))
    try:
        db, snaps = root / "thatch.db", root / "vectors"
        fill(db, args.big, args.dim, "m")
        modes = ("checked", "unchecked", "none")
        figures: Figures = {f"{mode} {part}": [] for mode in modes for part in ("map", "first")}

        def first(mode: str, seed: int) -> dict[str, float]:
            done = subprocess.run(
                [sys.executable, "-c", FIRST_SEARCH, str(db), str(snaps), mode, PROJECT,
                 str(seed), str(args.dim)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            found: dict[str, float] = json.loads(done.stdout)
            return found

        first("checked", 0)  # loads and writes the snapshot
        for repeat in range(args.repeats + 1):
            for mode in modes:
                found = first(mode, repeat)
                if repeat:  # the first round warms the page cache
                    for part, value in found.items():
                        figures[f"{mode} {part}"].append(value)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    checked = statistics.median(figures["checked first"])
    unchecked = statistics.median(figures["unchecked first"])
    rows = [
        ["snapshot checked (as shipped)", ms(statistics.median(figures["checked map"])),
         ms(checked), f"{checked / unchecked:.2f}", f"≤ 300 ms: {verdict(checked <= 0.3)}"],
        ["checksums skipped (before)", ms(statistics.median(figures["unchecked map"])),
         ms(unchecked), "1.00", "baseline"],
        ["no snapshot (SQLite load)", "—", ms(statistics.median(figures["none first"])),
         f"{statistics.median(figures['none first']) / unchecked:.2f}", "report"],
    ]  # fmt: skip
    print_table(
        f"First search of a new process at {args.big:,} memories, medians of {args.repeats} "
        "(ms; issue 21 §3)",
        ["snapshot", "map + check", "first search", "ratio", "target"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-int8", help="minilm-int8, minilm-fp32, mock")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--cli-runs", type=int, default=7)
    parser.add_argument("--big", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--session-ops", type=int, default=100)
    parser.add_argument(
        "--only",
        choices=["alternation", "lexical", "snapshot", "parts", "dense"],
        help="alternation: only the remember/recall alternation at 1k and 10k (the first two "
        "targets); lexical: only recall with and without the lexical query (no embedder); "
        "snapshot: only a new process's first search with the snapshot checked, unchecked "
        "and absent (no embedder); parts: recall per ranking part, issue 24 (no embedder); "
        "dense: recall with a second scan, issue 24's dense levers (no embedder)",
    )
    add_cache_option(parser)
    args = parser.parse_args()
    if args.only in ("lexical", "snapshot", "parts", "dense"):
        args.dim = 384
        print(f"{os.cpu_count()} CPUs; load average before {loadavg()}")
        modes = {"lexical": lexical_cost, "snapshot": snapshot_cost, "parts": parts_cost,
                 "dense": dense_cost}  # fmt: skip
        modes[args.only](args)
        print(f"load average after {loadavg()}")
        return
    model_path = (
        "mock"
        if args.model == "mock"
        else str(prepare_models(args.cache, [args.model])[args.model])
    )
    load_before = loadavg()
    started = time.perf_counter()
    figures: Figures = {}
    with (
        embedder_running(model_path) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        embedded = client.embed(QUESTIONS, Kind.QUERY, timeout=60)
        args.dim = len(embedded.vectors[0])
        asyncio.run(measure(args, address, client, embedded.model_id, figures))
    print(
        f"\nmodel {embedded.model_id} ({args.model}), dim {args.dim}; {os.cpu_count()} CPUs; "
        f"run took {time.perf_counter() - started:.0f} s; load average before {load_before}, "
        f"after {loadavg()}"
    )
    report(figures, args)


if __name__ == "__main__":
    main()
