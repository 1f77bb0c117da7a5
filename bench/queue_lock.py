"""The queue lock under contention: hooks waiting in flock(2) against hooks that poll.

    python bench/queue_lock.py [--workers 16] [--appends 40] [--hold-ms 5] [--repeats 3]

Each worker is a process that, like a tool hook appending to one session's queue, takes
that queue's lock (``locked``, as ``append_calls`` does) and holds it ``--hold-ms`` (a
hook's read and write of the queue on a loaded machine), again and again. Workers start
together; every append's wait for the lock is recorded, and a wait past the hooks' 2 s
gives up as a hook does (its record is dropped). Two ways to wait, the same run: in the
kernel (what hooks do since the change) and polling with sleeps of up to 50 ms (before:
forced here by arming a long alarm in the worker, which makes ``locked`` poll). Prints the
wait p50 / p99 / max, the give-ups, and the machine load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from _common import percentile, print_table
from thatch.frontend.queue.files import QueueError, locked, queue_paths


def worker(directory: str, appends: int, hold: float, poll: bool, start: float) -> str:
    """One hook-like process: ``appends`` turns at the lock, each wait timed (JSON list of
    ms, -1 for a give-up)."""
    if poll:
        signal.setitimer(signal.ITIMER_REAL, 3600)  # an alarm in use: locked() polls
    while time.time() < start:
        time.sleep(0.001)  # line the workers up: contention from the first append
    *_, lock = queue_paths(Path(directory), "s")
    waits = []
    for _ in range(appends):
        begun = time.perf_counter()
        try:
            with locked(lock):
                waits.append((time.perf_counter() - begun) * 1000)
                time.sleep(hold)  # the hook's work under the lock
        except QueueError:
            waits.append(-1.0)
    return json.dumps(waits)


def run(workers: int, appends: int, hold: float, poll: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.time() + 1.0
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            outputs = pool.starmap(
                worker, [(tmp, appends, hold, poll, start) for _ in range(workers)]
            )
    return [wait for output in outputs for wait in json.loads(output)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--appends", type=int, default=40)
    parser.add_argument("--hold-ms", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for label, poll in (("polling (before)", True), ("flock(2) wait (now)", False)):
        p50s, p99s, maxes, gave_up = [], [], [], 0
        for _ in range(args.repeats):
            waits = run(args.workers, args.appends, args.hold_ms / 1000, poll)
            done = [w for w in waits if w >= 0]
            gave_up += len(waits) - len(done)
            p50s.append(percentile(done, 50))
            p99s.append(percentile(done, 99))
            maxes.append(max(done))
        total = args.repeats * args.workers * args.appends
        rows.append([
            label,
            f"{statistics.median(p50s):.1f}",
            f"{statistics.median(p99s):.1f}",
            f"{statistics.median(maxes):.0f}",
            f"{gave_up} of {total}",
        ])  # fmt: skip
    print_table(
        f"Queue lock, {args.workers} processes x {args.appends} appends, lock held "
        f"+{args.hold_ms:g} ms (median of {args.repeats} runs)",
        ["waiting", "wait p50 ms", "p99 ms", "max ms", "gave up (2 s)"],
        rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}; cpus: {os.cpu_count()}")


if __name__ == "__main__":
    main()
