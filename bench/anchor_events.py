"""Git events at session start (docs/database.md §code-anchors): what consuming the hooks'
events costs, beside the store-wide re-check the hygiene pass runs anyway.

    python bench/anchor_events.py [--memories 1000] [--changed 100] [--repeats 7]

A repository of ``--memories`` files, one memory anchored on a function of each; branch
``feat`` edits ``--changed`` of those functions. Each repeat checks out feat and main
alternately with the hooks installed (real git, real hook processes), then times
``consume_git_events`` (one ``git diff``, the changed files' anchors marked, re-checked
and stored) against ``drifted`` (the hygiene pass's re-check of every anchor of the
store, stat first) on the same checkout. Medians; the machine's load is printed beside.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from thatch.frontend.anchors.capture import capture_anchors  # noqa: E402
from thatch.frontend.anchors.check import AnchorCheck  # noqa: E402
from thatch.frontend.anchors.events import consume_git_events  # noqa: E402
from thatch.frontend.anchors.recheck import drifted  # noqa: E402
from thatch.frontend.setup.git_hooks import install_git_hooks  # noqa: E402
from thatch.frontend.store.memory_store import Store  # noqa: E402

SOURCE = "def f{i}(x):\n    y = x + {i}\n    return y\n\n\ndef other{i}():\n    return {i}\n"


def git(repo: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "acme"
        (repo / "src").mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        for i in range(args.memories):
            (repo / "src" / f"m{i}.py").write_text(SOURCE.format(i=i))
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "init")
        git(repo, "checkout", "-q", "-b", "feat")
        for i in range(args.changed):
            path = repo / "src" / f"m{i}.py"
            path.write_text(path.read_text().replace("x + ", "x - "))
        git(repo, "commit", "-q", "-am", "edit")
        git(repo, "checkout", "-q", "main")
        env = {**os.environ, "XDG_CACHE_HOME": str(base / "cache")}
        env["THATCH_DB_PATH"] = str(base / "thatch.db")
        with Store.open(base / "thatch.db") as store:
            for i in range(args.memories):
                anchors = capture_anchors([f"src/m{i}.py:f{i}"], repo, env)
                store.remember("acme", f"m{i}", f"# m{i}\n\nbody", None, None, anchors=anchors)
            install_git_hooks(repo, env)
            consume_git_events(store, repo, env, AnchorCheck())  # the offset: at the end
            consumed: list[float] = []
            rechecked: list[float] = []
            counts: list[int] = []
            for repeat in range(args.repeats):
                git(repo, "checkout", "-q", "feat" if repeat % 2 == 0 else "main")
                start = time.perf_counter()
                count = consume_git_events(store, repo, env, AnchorCheck())
                consumed.append(time.perf_counter() - start)
                counts.append(count)
                start = time.perf_counter()
                drifted(store, "acme", AnchorCheck())
                rechecked.append(time.perf_counter() - start)
    load = Path("/proc/loadavg").read_text().split()[:3]
    ms_consume = statistics.median(consumed) * 1000
    ms_drifted = statistics.median(rechecked) * 1000
    print(f"{args.memories} anchored memories, {args.changed} functions changed per checkout")
    print(
        f"consume_git_events: median {ms_consume:.1f} ms ({args.repeats} checkouts), "
        f"anchors re-checked within its budget: {min(counts)}-{max(counts)}"
    )
    print(f"hygiene re-check of the store (drifted): median {ms_drifted:.1f} ms")
    print(f"ratio: {ms_consume / ms_drifted:.2f}; load {' '.join(load)}")


if __name__ == "__main__":
    main()
