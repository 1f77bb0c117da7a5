"""The secret scan on long words (frontend/secret_scan.py): every save, every push and the
hub scan a memory's text, so its cost must grow with the text, not with its square.

    python bench/secret_scan.py [--repeats 5]

Pathological inputs (one long word of name characters; a keyword repeated) beside prose of
the same length, the baseline measured in the same run; medians in ms and their ratio.
Before the scan anchored its pattern at the keyword, 16,000 characters of "y" took 2.7 s
here (the hub: 40 s under load), prose a few ms.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import median_of, print_table  # noqa: E402
from thatch.frontend.secret_scan import scan  # noqa: E402

SHAPES = {
    "one long word": lambda n: "y" * n,
    "dotted name": lambda n: ("a.b-c_d" * n)[:n],
    "keyword run": lambda n: ("token" * n)[:n],
    "keyword, no value": lambda n: ("password " * n)[:n],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for size in (4_000, 16_000, 64_000):
        prose = ("the deploy runs make release from the main branch " * size)[:size]
        base = median_of(args.repeats, lambda text=prose: scan(text)) * 1000
        for name, make in SHAPES.items():
            text = make(size)
            took = median_of(args.repeats, lambda text=text: scan(text)) * 1000
            rows.append([f"{size:,}", name, f"{took:.2f}", f"{base:.2f}", f"{took / base:.2f}"])
    print_table(
        "secret scan, median ms",
        ["characters", "input", "ms", "prose ms", "ratio"],
        rows,
    )


if __name__ == "__main__":
    main()
