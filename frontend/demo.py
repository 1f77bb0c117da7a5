"""``thatch demo``: thatch end to end in a scratch directory (docs/cli.md §demo).

Everything the demo touches lives in one temporary directory: its own database, queue
and embedder socket, passed to every part through an explicit environment mapping, so the
user's real database, queue and embedder are never read or written. The embedder is a
child process started here and always stopped here, on failure and Ctrl-C too.

After a successful run, a copy of the demo's database (only the file) replaces the one at
``demo_db_path`` in thatch's cache, for ``thatch ui --demo`` to browse; it is never the
user's database.

The only thing kept outside the scratch directory is the model: a hub download lands in
the Hugging Face cache and the packaged offline model is imported once into thatch's model
cache, so a second demo starts at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from thatch.common.environment import demo_db_path

__all__ = [
    "OFFLINE_MODEL_ID",
    "DemoFailed",
    "DemoResult",
    "ModelChoice",
    "Output",
    "Steps",
    "keep_database",
    "run_demo",
    "thatch_invocation",
]

Output = Callable[[str], None]

DEMO_STORE = "demo"
OFFLINE_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
START_WAIT_SECONDS = 120.0
STOP_WAIT_SECONDS = 10.0
# A safety net: should this process die without stopping it, the embedder exits by itself.
EXIT_AFTER_SECONDS = 600

MEMORIES = (
    (
        "Running the test suite",
        "Run the tests with `.venv/bin/pytest -q` from the repository root; the integration "
        "tests start a real embedder on a temporary socket and need no network.",
    ),
    (
        "User prefers concise answers",
        "The user prefers short, direct answers: code first, then at most a few sentences "
        "of explanation. No emojis.",
    ),
    (
        "Production deployment",
        "Production deploys go through `make deploy`: it builds the container image and "
        "rolls it out to the Kubernetes cluster in eu-west-1. Only main may be deployed.",
    ),
)
# Prompts as a user types them, each over the model's nudge threshold (checked by
# tests/test_demo.py): the demo shows what an agent is given unasked, not only on request.
QUERIES = ("what command runs the test suite?", "how do I deploy to production?")


class DemoFailed(Exception):
    """A step failed; ``str`` names the step, ``fix`` says what to do."""

    def __init__(self, step: str, message: str, fix: str) -> None:
        self.step = step
        self.message = message.rstrip(".")
        self.fix = fix
        super().__init__(f'step "{step}" failed: {self.message}')


@dataclass(frozen=True)
class ModelChoice:
    name: str  # what --model gets: a hub id, a directory or "mock"
    model_id: str
    note: str | None = None  # one line saying where the model came from
    fallback: bool = False  # the configured model is not here: the packaged one stood in


@dataclass(frozen=True)
class DemoResult:
    directory: Path
    kept: bool
    model_id: str
    database: Path | None = None  # the copy left for ``thatch ui --demo``


class Steps:
    """Numbered step headings, and the name of the current step for error messages."""

    def __init__(self, out: Output) -> None:
        self.out = out
        self.number = 0
        self.title = "starting"

    def start(self, title: str) -> None:
        self.number += 1
        self.title = title
        self.out(f"{self.number}. {title}")

    def fail(self, message: str, fix: str) -> DemoFailed:
        return DemoFailed(f"{self.number}. {self.title}", message, fix)


# ``choose_model(requested, env, steps, log)``: ``--model``, else the configured model when
# usable now, else the packaged one; raises ``steps.fail(...)`` when none can be used.
ChooseModel = Callable[[str | None, Mapping[str, str], Steps, Output], ModelChoice]


def demo_env(base: Mapping[str, str], directory: Path, model: str | None) -> dict[str, str]:
    """``base`` with the database, queue, socket and project pointed into ``directory``."""
    env = dict(base)
    for name in ("THATCH_HOST", "CURSOR_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "THATCH_EMBEDDER_CA"):
        env.pop(name, None)
    env.update(
        THATCH_DB_PATH=str(directory / "thatch.db"),
        THATCH_QUEUE_DIR=str(directory / "queue"),
        THATCH_EMBEDDER_ADDR=f"unix://{directory / 'e.sock'}",
        THATCH_PROJECT_DIR=str(directory),
    )
    if model is not None:
        env["THATCH_MODEL"] = model
    return env


@contextlib.contextmanager
def running_embedder(
    model: str, directory: Path, env: Mapping[str, str], steps: Steps
) -> Iterator[None]:
    """A child embedder on the scratch socket, SERVING on entry, stopped on exit."""
    from thatch.embedder.client.autostart import log_reason
    from thatch.embedder.client.embedder_client import EmbedderClient

    log = directory / "embedder.log"
    command = [
        sys.executable,
        "-m",
        "thatch.embedder",
        "serve",
        "--listen",
        env["THATCH_EMBEDDER_ADDR"],
        "--model",
        model,
        "--exit-after",
        str(EXIT_AFTER_SECONDS),
        "--log-file",
        str(log),
    ]
    with open(directory / "embedder.stderr", "wb") as stderr:
        # Own session: Ctrl-C reaches the demo only, which then stops the embedder itself.
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=dict(env),
            cwd=directory,
            start_new_session=True,
        )
    try:
        with EmbedderClient(env=env, autostart=False) as client:
            deadline = time.monotonic() + START_WAIT_SECONDS
            while client.health(timeout=0.5) != "SERVING":
                if proc.poll() is not None:
                    reason = log_reason(log, 0) or f"it exited with status {proc.returncode}"
                    raise steps.fail(
                        f"the embedder did not start: {reason}",
                        "see how the model resolves: thatch model info; "
                        "or try the mock model: thatch demo --model mock",
                    )
                if time.monotonic() >= deadline:
                    raise steps.fail(
                        f"the embedder was not serving after {START_WAIT_SECONDS:g} s",
                        "rerun with --keep and read embedder.log in the kept directory",
                    )
                time.sleep(0.1)
        yield
    finally:
        stop_process(proc)


def int8_fallback_line(log: Path) -> str | None:
    """The embedder's one warning that it serves fp32 because int8 is wrong on this CPU."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if " WARNING " in line and "disagrees with fp32 on this CPU" in line:
            return line.split(" WARNING ", 1)[1]
    return None


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, wait; SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- the demo -----------------------------------------------------------------------------


def make_scratch_dir() -> Path:
    """Short and under /tmp: the socket path must stay under 107 bytes."""
    parent = "/tmp" if os.path.isdir("/tmp") else None
    return Path(tempfile.mkdtemp(prefix="thatch-demo-", dir=parent))


def run_demo(
    *,
    model: str | None,
    keep: bool,
    env: Mapping[str, str],
    out: Output,
    log: Output,
    choose_model: ChooseModel,
) -> DemoResult:
    """Run every step, printing with ``out`` (progress details to ``log``); ``choose_model``
    is the model side (``cli/demo_model.py``: resolution, download, import).

    Raises DemoFailed naming the failed step; the embedder is stopped and the scratch
    directory removed (unless ``keep``) whatever happens.
    """
    steps = Steps(out)
    directory = make_scratch_dir()
    try:
        out(f"Scratch directory: {directory}")
        steps.start("Choosing a model")
        choice = choose_model(model, env, steps, log)
        if choice.note:
            out(choice.note)
        scratch_env = demo_env(env, directory, choice.name)
        steps.start(f"Starting an embedder (model {choice.model_id})")
        with running_embedder(choice.name, directory, scratch_env, steps):
            out(f"   serving at {scratch_env['THATCH_EMBEDDER_ADDR']}")
            fallback = int8_fallback_line(directory / "embedder.log")
            if fallback:
                out(f"   {fallback}")
            exercise_tools(scratch_env, steps, out)
            steps.start("Stopping the embedder")
        out("   embedder stopped")
        database = keep_database(directory / "thatch.db", demo_db_path(env))
        thatch = thatch_invocation(env)
        out(f"\nThe demo's memories are kept in {database}")
        out(f"Look at these memories in a browser: {thatch} ui --demo")
        out(f"(or with the CLI: THATCH_DB_PATH={database} {thatch} list {DEMO_STORE})")
        if thatch != "thatch":
            out(
                f"thatch is not on your PATH: run it as {thatch} (or activate its "
                "environment); to install it for everyday use, see the README's "
                '"Everyday install"'
            )
        if choice.fallback:
            out(
                "Your agents' default model is not on this machine either. To give them "
                f"the demo's model: {thatch} model use {OFFLINE_MODEL_ID}"
            )
    finally:
        if keep:
            out(f"Kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
            out(f"Removed {directory}")
    return DemoResult(directory, keep, choice.model_id, database)


def thatch_invocation(env: Mapping[str, str]) -> str:
    """How to run this thatch from the user's shell: ``thatch`` when PATH finds this very
    program, else its absolute path (it must work from any project directory)."""
    from thatch.common.shell_words import shell_quote

    here = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if here is None or here.name != "thatch" or not here.exists():
        here = Path(sys.executable).parent / "thatch"
    if not here.exists():
        return f"{shell_quote(sys.executable)} -m thatch.cli"
    found = shutil.which("thatch", path=env.get("PATH", os.defpath))
    if found is not None and Path(found).resolve() == here.resolve():
        return "thatch"
    return shell_quote(str(here.absolute()))


def keep_database(source: Path, target: Path) -> Path:
    """A consistent copy of ``source`` (SQLite's backup, WAL included) replacing ``target``.

    The copy is written beside ``target`` and renamed over it; the old file's ``-wal`` and
    ``-shm`` go first, since SQLite would replay a stale WAL onto the new file.
    """
    from thatch.frontend.store import db

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".new")
    partial.unlink(missing_ok=True)
    db.backup(source, partial)
    for suffix in ("-wal", "-shm"):
        target.with_name(target.name + suffix).unlink(missing_ok=True)
    os.replace(partial, target)
    return target


def nudge_line(best: float | None, nudge: float, label: str = "") -> str:
    """Whether the prompt hook would give the agent the top match unasked, had a user
    typed the query as a prompt: the same score against the model's nudge threshold. The
    line follows the last record, so it names the one it means."""
    if best is not None and best >= nudge:
        return (
            f'(top match "{label}": score {best:.3f} ≥ the nudge threshold {nudge}: typed '
            "as a prompt, this memory reaches the agent unasked)"
        )
    return f"(under the nudge threshold {nudge}: an agent finds this only by asking)"


def exercise_tools(env: Mapping[str, str], steps: Steps, out: Output) -> None:
    """Three memory_remember calls and two memory_recall calls through the tool layer."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.frontend.errors import StoreError
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Refused, Tools
    from thatch.frontend.tools.validation import ArgumentError

    with ToolContext.from_env(env, autostart=False, start_wait=0.0) as ctx:
        tools = Tools(ctx)
        steps.start(f'Saving three memories in store "{DEMO_STORE}" (memory_remember)')
        for label, content in MEMORIES:
            try:
                report = tools.remember(label=label, content=content, store=DEMO_STORE)
            except (Refused, ArgumentError, StoreError, ThatchEmbedderError) as error:
                fix = "rerun thatch demo; it uses a fresh directory"
                raise steps.fail(str(error), fix) from None
            if report.pending_cause is not None:
                raise steps.fail(
                    f"the memory was saved without a vector: {report.pending_cause}",
                    "rerun with --keep and read embedder.log in the kept directory",
                )
            out(report.text())
        steps.start("Recalling by meaning (memory_recall)")
        nudge = tools.configured_thresholds().recall_nudge
        for query in QUERIES:
            try:
                recall = tools.recall(query=query, stores=[DEMO_STORE], limit=3)
            except ThatchEmbedderError as error:
                raise steps.fail(str(error), "rerun with --keep and read embedder.log") from None
            out(f'\n> memory_recall {{"query": "{query}", "store": "{DEMO_STORE}"}}\n')
            out(recall.text())
            top = recall.matches[0] if recall.matches else None
            out(nudge_line(top.score if top else None, nudge, top.memory.label if top else ""))
            out("")
