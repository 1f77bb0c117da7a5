"""Session-start cost of duplicate counting at scale (prints figures; not a test).

    .venv/bin/python bench/duplicates.py [--runs 3] [--sizes 100,10k,100k]

Builds three stores with synthetic normalized vectors written through the Store (no
model needed): 100 random memories; 10,000 of which 2,000 are near-copies of one memory
(one cluster, ~2M pairs above any threshold); 100,000 random memories. For each it runs,
as real processes: ``thatch hygiene --json`` once (today's duplicate counting; with
duplicate candidates kept at write time this also completes the backfill of a store
written without them), then the ``thatch reminder`` hook ``--runs`` times, reporting wall
time (median) and the hook's peak RSS (max), with the duplicate part of its report.
Each process may map at most 4 GiB (``MEMORY_CAP``): past it, it fails as it would on a
smaller machine, and the figure says so.
The ratio to the 100-memory reminder is the figure to watch (issue 21 §2: within 2×).

To measure another checkout (the code before a change), put its package first:
``PYTHONPATH=/tmp/before .venv/bin/python bench/duplicates.py`` where /tmp/before/thatch
is that checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
STORE = "bench-project"  # the store of a project directory of that name outside git


def thatch_script() -> list[str]:
    return [sys.executable, "-m", "thatch.cli"]


def seed(db_path: Path, count: int, near_copies: int, model: str) -> float:
    """``count`` memories, the last ``near_copies`` of them near-copies of one; seconds."""
    from thatch.frontend.store import db as dbmod
    from thatch.frontend.store.memory_store import Store

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    if near_copies:
        base = vectors[0]
        noise = rng.standard_normal((near_copies, DIM)).astype(np.float32) * 0.01
        vectors[count - near_copies :] = base + noise * np.linalg.norm(base)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    start = time.perf_counter()
    with Store.open(db_path) as store:
        # Batches in one transaction each: seeding speed, not what is measured.
        for first in range(0, count, 2000):
            with dbmod.atomic(store.conn):
                for i in range(first, min(first + 2000, count)):
                    label = f"bench memory {i}"
                    store.remember(STORE, label, f"# {label}\n\nfiller {i}", vectors[i], model)
    return time.perf_counter() - start


# Each measured process may map at most this much: the code before the change needs
# gigabytes at 10k near-copies, and other work shares the machine.
MEMORY_CAP = 4 << 30


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_rss(argv: list[str], env: dict[str, str], stdin: bytes) -> tuple[float, int, int, bytes]:
    """(wall seconds, peak RSS in MB, exit status, stdout) of one process, reaped here so
    the RSS is this child's alone."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out_file:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=out_file,
            stderr=subprocess.DEVNULL,
            env=env,
            preexec_fn=_cap_memory,
        )
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out_file.seek(0)
        out = out_file.read()
    return wall, usage.ru_maxrss // 1024, proc.returncode, out


def duplicates_phrase(text: str) -> str:
    """The duplicate part of the reminder's hygiene report, if any."""
    for line in text.splitlines():
        if line.startswith("[thatch hygiene]"):
            parts = [p.strip() for p in line.split(";")]
            found = [p.rstrip(".") for p in parts if "duplicate" in p]
            return "; ".join(found) or "(no duplicate part)"
    return "(no hygiene report)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="100,10k,100k")
    parser.add_argument(
        "--unchecked",
        action="store_true",
        help="also run the reminder once before `thatch hygiene` (stored candidates only)",
    )
    args = parser.parse_args()
    sizes = {"100": (100, 0), "10k": (10_000, 2_000), "100k": (100_000, 0)}
    chosen = [s for s in args.sizes.split(",") if s in sizes]
    root = Path(tempfile.mkdtemp(prefix="thd-", dir="/tmp"))
    project = root / "bench-project"
    project.mkdir()
    env = {
        **os.environ,
        "THATCH_QUEUE_DIR": str(root / "queue"),
        "THATCH_PROJECT_DIR": str(project),
        # TCP: no autostart, so no embedder runs and the model id resolves locally.
        "THATCH_EMBEDDER_ADDR": "127.0.0.1:9",
        "THATCH_MODEL": "mock",
        "XDG_RUNTIME_DIR": str(root),
        "HF_HUB_OFFLINE": "1",
    }
    thatch = thatch_script()
    import thatch as package

    print(f"package {list(package.__path__)}; load {Path('/proc/loadavg').read_text().strip()}")
    baseline: float | None = None
    try:
        for name in chosen:
            count, near = sizes[name]
            db_path = root / f"{name}.db"
            took = seed(db_path, count, near, "mock")
            env_db = {**env, "THATCH_DB_PATH": str(db_path)}
            if args.unchecked:
                wall, rss, code, out = run_rss([*thatch, "reminder"], env_db, b"{}")
                print(
                    f"{name:>5}: reminder before any check: {wall * 1000:8.1f} ms, {rss} MB, "
                    f"exit {code} [{duplicates_phrase(out.decode(errors='replace'))}]"
                )
            wall, rss, code, out = run_rss([*thatch, "hygiene", "--json"], env_db, b"")
            dup = json.loads(out).get("duplicates") if code == 0 else f"(exit {code})"
            print(
                f"{name:>5}: seeded {count} ({near} near-copies) in {took:6.1f} s; "
                f"first `thatch hygiene`: {wall:6.2f} s, {rss} MB, duplicates={dup}"
            )
            walls, peaks = [], []
            text = ""
            for _ in range(args.runs):
                wall, rss, code, out = run_rss([*thatch, "reminder"], env_db, b"{}")
                if code != 0:
                    print(f"       reminder exited {code}")
                walls.append(wall)
                peaks.append(rss)
                text = out.decode(errors="replace")
            median = statistics.median(walls)
            if baseline is None:
                baseline = median
            print(
                f"{name:>5}: reminder median {median * 1000:8.1f} ms  "
                f"(×{median / baseline:5.2f} of the first size)  peak RSS {max(peaks)} MB  "
                f"[{duplicates_phrase(text)}]"
            )
            print(f"       load {Path('/proc/loadavg').read_text().strip()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
