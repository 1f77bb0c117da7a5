"""Duplicate candidates on pathological stores: the hygiene report's count (every session
start) and a page of clusters (find_duplicates, thatch dedup, the UI) must not grow with
the number of stored pairs.

    python bench/duplicates_near_copies.py [--sizes 1000,4000,16000] [--repeats 5]

Each store holds n near-copies of one memory (the worst case: every memory is a
candidate of 20 others, 20 n pairs), written as an upgraded file is (no check at write)
and then checked once, as `thatch hygiene` does. Medians in ms and the ratio to the
smallest store, measured in the same run. Before the count stopped past 1,000 memories
and a page grouped only the best 10,000 pairs, both read every pair: at 100k near-copies
(2M pairs) the count took 3 s and a page 9 s. bench/duplicates.py measures the reminder
hook as a whole. To measure another checkout, put its package first (``PYTHONPATH``), as
there.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import median_of, print_table  # noqa: E402
from thatch.frontend.store import db  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402

DIM = 384
THRESHOLD = 0.85


def near_copies_store(path: Path, n: int) -> tuple[Store, float]:
    """A store of n near-copies, checked; and the seconds the check took."""
    rng = np.random.default_rng(n)
    base = rng.normal(size=DIM)
    copies = base + rng.normal(size=(n, DIM)) * 0.02 * np.linalg.norm(base) / np.sqrt(DIM)
    copies = (copies / np.linalg.norm(copies, axis=1, keepdims=True)).astype(np.float32)
    store = Store.open(path)
    with db.atomic(store.conn):  # inside a caller's transaction nothing is checked at write
        for i, vector in enumerate(copies):
            store.remember("p", f"copy {i}", f"# copy {i}\n\nthe same fact again", vector, "m")
    started = time.perf_counter()
    store.check_all_duplicates("p")
    return store, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,16000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = []
    first: tuple[float, float] | None = None
    with tempfile.TemporaryDirectory() as scratch:
        for n in sizes:
            store, checked = near_copies_store(Path(scratch) / f"{n}.db", n)
            try:
                (pairs,) = store.conn.execute(
                    "SELECT count(*) FROM _thatch_dup_pairs WHERE store = 'p'"
                ).fetchone()
                count = median_of(args.repeats, lambda s=store: s.duplicate_summary("p", THRESHOLD))
                page = median_of(args.repeats, lambda s=store: s.duplicate_page("p", THRESHOLD))
            finally:
                store.close()
            first = first or (count, page)
            rows.append(
                [
                    f"{n:,}",
                    f"{pairs:,}",
                    f"{checked:.1f}",
                    f"{count * 1000:.1f}",
                    f"{count / first[0]:.2f}",
                    f"{page * 1000:.1f}",
                    f"{page / first[1]:.2f}",
                ]
            )
    print_table(
        "near-copies of one memory: duplicate count and page, median ms",
        ["memories", "pairs", "check s", "count ms", "ratio", "page ms", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
