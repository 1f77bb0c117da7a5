"""Helpers shared by the benchmarks: timing statistics and synthetic memory texts."""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

VOCABULARY = """
the build uses make and the release target writes binaries under build release while
integration tests need postgres on port 5433 with the test database seeded from fixtures
user prefers tabs in go code and small pull requests under four hundred lines reviewed
by two people deploys run from github actions on tags the staging cluster mirrors
production redis keys carry the schema version so a migration invalidates the cache
alembic autogenerate misses server defaults so write them by hand the auth flow uses
oauth pkce and tokens refresh in the middleware logging goes through structlog as json
node is pinned in nvmrc and newer versions break the bundler windows paths need pathlib
"""


def memory_texts(n: int, *, seed: int = 7, min_words: int = 12, max_words: int = 160) -> list[str]:
    """``n`` memory-like passages ("# label\\n\\ncontent") of varied length."""
    rng = random.Random(seed)
    words = VOCABULARY.split()
    texts = []
    for i in range(n):
        label = " ".join(rng.choices(words, k=rng.randint(2, 6)))
        body = " ".join(rng.choices(words, k=rng.randint(min_words, max_words)))
        texts.append(f"# {label} {i}\n\n{body}.")
    return texts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed(func: Callable[[], object]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def median_of(repeats: int, func: Callable[[], object]) -> float:
    return statistics.median(timed(func) for _ in range(repeats))


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    print(f"\n## {title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |")


@contextmanager
def embedder_running(
    model: str, extra_args: Sequence[str] = (), *, python: str = sys.executable
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real embedder process on a temp unix socket, SERVING; yields (address, process).

    ``python`` runs it: another checkout's interpreter serves that checkout's embedder.
    Always stopped (SIGTERM, then SIGKILL) and its directory removed.
    """
    from thatch.embedder.client.embedder_client import EmbedderClient

    sock_dir = Path(tempfile.mkdtemp(prefix="thb-", dir="/tmp"))
    address = f"unix://{sock_dir / 'e.sock'}"
    proc = subprocess.Popen(
        [python, "-m", "thatch.embedder", "serve", "--listen", address,
         "--model", model, "--log-file", str(sock_dir / "log"), *extra_args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with EmbedderClient(address, autostart=False) as client:
            deadline = time.monotonic() + 120
            while client.health(timeout=1.0) != "SERVING":
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"embedder did not start; see {sock_dir / 'log'}")
                time.sleep(0.1)
        yield address, proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(sock_dir, ignore_errors=True)


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--cache``: where the benches keep models, packages and vectors between runs."""
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thatch-bench",
        help="where models, packages and vectors are kept between runs",
    )
