"""``thatch ui`` in a real browser and at 10,000 memories (prints tables, saves PNGs).

    python bench/ui_screenshots.py [--model minilm-int8|minilm-fp32|mock] [--rows 10000]
                                   [--repeats 30] [--out DIR] [--no-screenshots]

A temp database gets ``--rows`` synthetic memories in the store ``benchproj`` (random unit
vectors inserted directly, as bench/store.py does) plus a small readable store ``demo``
(a duplicate pair, an HTML payload, a behavior, chat messages). The page is served by
uvicorn in this process over a real embedder process serving ``--model``.

Figures (median of ``--repeats``, measured over HTTP like a browser's request):
- the Memories page of ``benchproj`` (first page, newest first), against a 404 page (the
  server's floor: guard, routing, one response) in the same loop;
- a search on that page (the query embedded, recall ranking over 10k), against the query
  embed alone, in the same loop.
Target: both pages under 150 ms p50.

Screenshots: headless Chromium (Debian package ``chromium``) visits each main page with
the printed URL's token (a fresh profile each time: the token becomes the cookie and the
redirect lands on the page) and saves ``<out>/<page>.png``. No test needs Chromium.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

from _common import add_cache_option, embedder_running, percentile, print_table
from embedder import prepare_models
from store import PROJECT, QUESTIONS, fill
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.chat_store import ChatStore
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools
from thatch.frontend.ui.app import build_app
from thatch.frontend.ui.security import Guard
from thatch.frontend.ui.server import bind, bound_port, make_server, serve

MS = 1000.0
WARMUP = 3
DEMO = "demo"
HOSTILE = 'Hostile <script>alert("x")</script>'
READABLE = {
    "Release process": "To ship a release, push a signed git tag v*; CI builds the wheel and "
    "uploads it. Never upload by hand.",
    "Release steps": "Releases: tag the commit (git tag -s vX.Y.Z), push the tag, CI publishes.",
    "Indentation": "The user wants four spaces, never tabs, in Python files.",
    "Python indentation": "The user wants four spaces, never tabs, in Python source files.",
    "Test database": "Integration tests need postgres on port 5433, seeded from fixtures/.",
    HOSTILE: "An agent saved markup: <img src=x "
    "onerror=alert(1)> and </pre><b>bold?</b> — shown as text.",
}


def http_get(port: int, path: str, cookie: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@contextmanager
def ui_running(env: dict[str, str]) -> Iterator[tuple[ToolContext, Guard]]:
    with ToolContext.from_env(env) as ctx:
        sock = bind("127.0.0.1", 0)
        guard = Guard.for_bind("127.0.0.1", bound_port(sock))
        stopping = threading.Event()
        server = make_server(build_app(ctx, guard, stopping), stopping)
        thread = threading.Thread(target=serve, args=(server, sock), daemon=True)
        thread.start()
        try:
            yield ctx, guard
        finally:
            server.should_exit = True
            thread.join(30)
            sock.close()


def seed_demo(ctx: ToolContext) -> None:
    tools = Tools(ctx)
    for label, content in READABLE.items():
        tools.remember(label=label, content=content, store=DEMO, branch="main")
    tools.remember(label="Old note", content="Superseded build notes.", store=DEMO, archived=True)
    tools.call(
        "engine",
        {
            "action": "behavior_codify",
            "situation": "before committing Python changes",
            "behavior": "run ruff check and the type check",
            "rationale": "CI fails on lint",
            "store": DEMO,
        },
    )
    tools.call(
        "engine",
        {
            "action": "prediction_update",
            "matcher": "after changing the schema",
            "prediction": "the migration test needs a new fixture",
            "signal": "create",
            "rationale": "happened twice",
            "store": DEMO,
        },
    )
    chat = ChatStore(ctx.store.conn, ctx.store.clock, ctx.store.lock)
    one = chat.register_server(project=DEMO, host_kind="claude", worktree="/src/app")
    two = chat.register_server(project=DEMO, host_kind="cursor", worktree="/src/app")
    chat.set_topic(one.session_id, "schema migration")
    chat.send(one.session_id, two.session_id, ["I am changing the users table; hold the deploy."])
    chat.send(two.session_id, one.session_id, ["<script>alert('chat')</script> ok, holding."])


def measure(
    repeats: int, pairs: list[tuple[str, Callable[[int], float]]]
) -> dict[str, list[float]]:
    """Each step of ``pairs`` in turn, ``WARMUP`` + ``repeats`` rounds (alternating)."""
    figures: dict[str, list[float]] = {name: [] for name, _ in pairs}
    for round_no in range(WARMUP + repeats):
        for name, step in pairs:
            seconds = step(round_no)
            if round_no >= WARMUP:
                figures[name].append(seconds)
    return figures


def timed_get(port: int, cookie: str, path: str, status: int = 200) -> float:
    started = time.perf_counter()
    got, _body = http_get(port, path, cookie)
    elapsed = time.perf_counter() - started
    assert got == status, (path, got)
    return elapsed


def screenshots(port: int, guard: Guard, out: Path) -> list[Path]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium on PATH: screenshots skipped (apt-get install chromium)")
        return []
    out.mkdir(parents=True, exist_ok=True)
    pages = {
        "stores": ("/", {}),
        "memories": ("/memories", {"store": DEMO}),
        "memories-10k": ("/memories", {"store": PROJECT}),
        "search": ("/memories", {"store": DEMO, "q": "how do I publish a new version?"}),
        "memory": ("/memory", {"store": DEMO, "label": "Release process"}),
        "memory-hostile": ("/memory", {"store": DEMO, "label": HOSTILE}),
        "forget-confirm": ("/memory/forget", {"store": DEMO, "label": "Indentation"}),
        "duplicates": ("/duplicates", {"store": DEMO}),
        "engines": ("/engines", {}),
        "chat": ("/chat", {}),
        "status": ("/status", {}),
        "refused-no-token": ("/", None),
    }
    saved = []
    for name, (path, params) in pages.items():
        query = {} if params is None else {**params, "token": guard.token}
        url = f"http://127.0.0.1:{port}{path}" + ("?" + urlencode(query) if query else "")
        target = out / f"{name}.png"
        profile = tempfile.mkdtemp(prefix="thatch-ui-chromium-")
        try:
            subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={profile}", "--window-size=1280,900",
                 f"--screenshot={target}", url],
                capture_output=True, timeout=120, check=False,
            )  # fmt: skip
        finally:
            shutil.rmtree(profile, ignore_errors=True)
        if target.exists():
            saved.append(target)
        else:
            print(f"no screenshot of {name}", file=sys.stderr)
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-int8", help="minilm-int8, minilm-fp32, mock")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("ui-screenshots"))
    parser.add_argument("--no-screenshots", action="store_true")
    add_cache_option(parser)
    args = parser.parse_args()
    model_path = (
        "mock"
        if args.model == "mock"
        else str(prepare_models(args.cache, [args.model])[args.model])
    )
    root = Path(tempfile.mkdtemp(prefix="thatch-ui-bench-"))
    try:
        with (
            embedder_running(model_path) as (address, _proc),
            EmbedderClient(address, autostart=False) as client,
        ):
            probe = client.embed(["dimension probe"], Kind.QUERY, timeout=60)
            dim = len(probe.vectors[0])
            db = root / "thatch.db"
            started = time.perf_counter()
            fill(db, args.rows, dim, probe.model_id)
            print(f"[{args.rows}] filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            (root / PROJECT).mkdir()
            env = {
                **os.environ,
                "HOME": str(root / "home"),
                "XDG_CACHE_HOME": str(root / "home" / "cache"),
                "XDG_CONFIG_HOME": str(root / "home" / "config"),
                "THATCH_DB_PATH": str(db),
                "THATCH_EMBEDDER_ADDR": address,
                "THATCH_PROJECT_DIR": str(root / PROJECT),
            }
            with ui_running(env) as (ctx, guard):
                seed_demo(ctx)
                port = guard.port
                cookie = f"{guard.cookie_name}={guard.token}"
                listing = "/memories?" + urlencode({"store": PROJECT})

                def search(round_no: int) -> float:
                    query = QUESTIONS[round_no % len(QUESTIONS)]
                    return timed_get(port, cookie, listing + "&" + urlencode({"q": query}))

                def embed_only(round_no: int) -> float:
                    query = QUESTIONS[round_no % len(QUESTIONS)] + " (embed)"
                    started = time.perf_counter()
                    client.embed([query], Kind.QUERY, timeout=60)
                    return time.perf_counter() - started

                figures = measure(
                    args.repeats,
                    [
                        (
                            "memories page (10k, page 1)",
                            lambda _r: timed_get(port, cookie, listing),
                        ),
                        ("404 page (server floor)", lambda _r: timed_get(port, cookie, "/x", 404)),
                        ("search page (10k)", search),
                        (
                            "stores page (10k; hygiene counts)",
                            lambda _r: timed_get(port, cookie, "/"),
                        ),
                        ("query embed alone", embed_only),
                    ],
                )
                rows = [
                    [
                        name,
                        f"{statistics.median(values) * MS:.1f}",
                        f"{percentile(values, 90) * MS:.1f}",
                    ]
                    for name, values in figures.items()
                ]
                print(
                    f"\nmodel {probe.model_id} ({args.model}), dim {dim}; {os.cpu_count()} CPUs; "
                    f"load average {os.getloadavg()[0]:.2f}"
                )
                print_table(
                    f"thatch ui at {args.rows} memories ({args.repeats} repeats)",
                    ["request", "p50 ms", "p90 ms"],
                    rows,
                )
                print("\ntarget: memories page and search page p50 < 150 ms")
                if not args.no_screenshots:
                    for path in screenshots(port, guard, args.out):
                        print(f"saved {path}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
