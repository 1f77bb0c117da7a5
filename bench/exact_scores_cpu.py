"""``exact_scores`` on other CPU classes: the same scores, bit for bit, and the same order.

    python bench/exact_scores_cpu.py --write native.npy
    qemu-x86_64 -cpu Haswell "$(readlink -f .venv/bin/python)" - --write haswell.npy <<EOF
    import runpy, site, sys
    site.addsitedir("$SITE"); sys.path.insert(0, "bench")
    runpy.run_path("bench/exact_scores_cpu.py", run_name="__main__")
    EOF
    python bench/exact_scores_cpu.py --compare native.npy haswell.npy

(``SITE`` as in ``int8_formats.py``; ``-cpu Nehalem`` for SSE4.2 only.) Recall orders its
candidates by these float64 scores, and the hub ranks them on the server's CPU while a
replica ranks them on the laptop's, so a last-bit difference between CPU classes could
order two near-ties differently. The vectors are seeded: unit MiniLM-sized rows, near
copies of one row (the pathological store), zero rows, and 7 batch sizes (einsum's SIMD
groups sums by the row length only, never by the batch: this shows it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from thatch.frontend.store.scoring import exact_scores

DIM = 384


def rows(seed: int) -> tuple[list[bytes], np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((600, DIM)).astype(np.float32)
    near = base[0] + rng.standard_normal((200, DIM)).astype(np.float32) * 1e-4
    zeros = np.zeros((3, DIM), dtype=np.float32)
    matrix = np.concatenate([base, near, zeros])
    query = (base[0] + rng.standard_normal(DIM).astype(np.float32) * 0.1).astype(np.float32)
    return [row.tobytes() for row in matrix], query


def scores() -> np.ndarray:
    """Every row's score in batches of 1, 3, 4, 5, 16, 50 and all: one column per size."""
    blobs, query = rows(24)
    columns = []
    for size in (1, 3, 4, 5, 16, 50, len(blobs)):
        parts = [exact_scores(blobs[i : i + size], query) for i in range(0, len(blobs), size)]
        columns.append(np.concatenate(parts))
    return np.stack(columns, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="score here and save the matrix")
    group.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"))
    args = parser.parse_args()
    if args.write:
        found = scores()
        np.save(args.write, found)
        same = bool((found == found[:, :1]).all())
        print(f"{found.shape[0]} rows x {found.shape[1]} batch sizes; "
              f"one score per row whatever the batch: {same}")  # fmt: skip
        sys.exit(0 if same else 1)
    a, b = (np.load(path) for path in args.compare)
    equal = int((a == b).all(axis=1).sum())
    order = bool((np.argsort(-a[:, 0], kind="stable") == np.argsort(-b[:, 0], kind="stable")).all())
    print(f"rows scored bit for bit the same: {equal} of {a.shape[0]}; "
          f"largest difference {float(np.abs(a - b).max()):.3g}; same order: {order}")  # fmt: skip
    sys.exit(0 if equal == a.shape[0] else 1)


if __name__ == "__main__":
    main()
