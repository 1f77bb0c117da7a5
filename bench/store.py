"""Store benchmark: search and duplicate scans over stores of growing size (prints tables).

    python bench/store.py [--sizes 1000,5000,20000] [--dim 384] [--repeats 20]

Random unit vectors, written straight into a temp SQLite file. Figures per size:
- cold search: a fresh Store per query (what one CLI invocation pays: decode every BLOB);
- warm search: one long-lived Store (the MCP server), matrix cache reused, p50 and p95;
- find_duplicates: one blocked matrix product over the store (median of 3);
- remember: one write transaction (BEGIN IMMEDIATE … COMMIT, fsync included), p50.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _common import median_of, percentile, print_table, timed
from thatch.frontend.store import Store
from thatch.frontend.vectors import encode

STAMP = "2025-01-01T00:00:00.000Z"


def fill(store: Store, vectors: np.ndarray) -> None:
    store.conn.execute("BEGIN")
    store.conn.execute("INSERT OR IGNORE INTO stores VALUES ('bench')")
    store.conn.executemany(
        "INSERT INTO entries (slug, store, label, content, embedding, model, created_at, "
        "updated_at) VALUES (?, 'bench', ?, ?, ?, 'm', ?, ?)",
        [
            (f"m{i}", f"m{i}", f"# m{i}\n\ntext", encode(v), STAMP, STAMP)
            for i, v in enumerate(vectors)
        ],
    )
    store.conn.execute("COMMIT")


def run(size: int, dim: int, repeats: int, rng: np.random.Generator) -> list[str]:
    vectors = rng.normal(size=(size, dim)).astype(np.float32)
    queries = rng.normal(size=(repeats, dim)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        with Store.open(path) as store:
            fill(store, vectors)

        def cold(query: np.ndarray) -> None:
            with Store.open(path) as fresh:
                fresh.search(["bench", "global"], query)

        cold_s = [timed(lambda q=q: cold(q)) for q in queries[: max(3, repeats // 4)]]
        with Store.open(path) as store:
            store.search(["bench"], queries[0])
            warm = [timed(lambda q=q: store.search(["bench", "global"], q)) for q in queries]
            dups = median_of(3, lambda: store.find_duplicates("bench"))
            writes = [
                timed(lambda i=i: store.remember("bench", f"new {i}", "# x", queries[i], "m"))
                for i in range(len(queries))
            ]
    ms = 1000.0
    return [
        str(size),
        f"{percentile(cold_s, 50) * ms:.1f}",
        f"{percentile(warm, 50) * ms:.2f}",
        f"{percentile(warm, 95) * ms:.2f}",
        f"{dups * ms:.0f}",
        f"{percentile(writes, 50) * ms:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,20000")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [run(int(n), args.dim, args.repeats, rng) for n in args.sizes.split(",")]
    header = [
        "memories",
        "cold search ms",
        "warm p50 ms",
        "warm p95 ms",
        "find_duplicates ms",
        "remember p50 ms",
    ]
    print_table(f"Store, {args.dim}-d vectors", header, rows)


if __name__ == "__main__":
    main()
