"""One owner of the database file: a long-lived process never opens it a second time.

Closing any descriptor of a file drops every POSIX lock the process holds on it (SQLite's
"how to corrupt" §2.2). A ``thatch ui`` that probed the file beside its own connection
(the Status page ran the doctor in-process) lost its locks on the file and its -shm, so
the next ``thatch remember`` believed it was alone, checkpointed and removed the WAL, and
the UI went on writing into an unlinked -wal: the file failed ``PRAGMA integrity_check``.

Real processes over a real file: a ``thatch ui`` process driven over HTTP, ``thatch
remember`` processes beside it, and a structural scan that keeps every open in one module.
"""

from __future__ import annotations

import ast
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.hookrun import thatch_command
from tests.support.ui_client import run_ui_process

ROOT = Path(__file__).resolve().parent.parent
# The one module that may open the database file (and its -wal/-shm).
OWNER = "frontend/store/db.py"


@pytest.fixture
def env(tmp_path: Path, mock_embedder: EmbedderProcess) -> dict[str, str]:
    project = tmp_path / "proj"
    project.mkdir()
    values = {name: value for name, value in os.environ.items() if not name.startswith("THATCH_")}
    values.update(
        THATCH_DB_PATH=str(tmp_path / "data" / "thatch.db"),
        THATCH_PROJECT_DIR=str(project),
        THATCH_EMBEDDER_ADDR=mock_embedder.address,
        THATCH_QUEUE_DIR=str(tmp_path / "queue"),
    )
    return values


def remember(env: dict[str, str], label: str, content: str) -> None:
    done = subprocess.run(
        thatch_command("remember", label, content),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def integrity(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def contents(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(db)
    try:
        return dict(conn.execute("SELECT label, content FROM entries WHERE store = 'proj'"))
    finally:
        conn.close()


def test_status_page_then_another_writer_leaves_the_file_whole(env: dict[str, str]) -> None:
    """The issue's sequence: open the UI, run the Status page's doctor, let ``thatch
    remember`` write, edit and search in the UI, stop it: the file passes integrity_check
    and every write from both processes is there."""
    db = Path(env["THATCH_DB_PATH"])
    remember(env, "Seed", "written before the ui starts")
    seen: list[bool] = []
    with run_ui_process(env) as (client, entry):
        assert client.request("GET", entry).status == 303
        status = client.get("/status")
        assert status.status == 200 and "Doctor" in status.body
        ran = client.post("/status/doctor", {"csrf": status.csrf()})  # the doctor's checks
        assert ran.status == 303, ran.body[-500:]
        for round_ in range(3):
            remember(env, f"Other {round_}", f"written by thatch remember, round {round_}")
            shown = client.get("/memory", store="proj", label="Seed")
            assert shown.status == 200, shown.body[-500:]
            edited = client.post(
                "/memory/edit",
                {
                    "csrf": shown.csrf(),
                    "store": "proj",
                    "label": "Seed",
                    "content": f"edited in the ui, round {round_}",
                    "confidence": "5",
                },
            )
            assert edited.status == 303, edited.body[-500:]
            found = client.get("/memories", store="proj", q="written by thatch remember")
            seen.append(found.status == 200 and f"Other {round_}" in found.body)
            assert client.post("/status/doctor", {"csrf": status.csrf()}).status == 303
    assert integrity(db) == ["ok"]
    assert seen == [True, True, True]  # the ui sees what the other process wrote
    assert contents(db) == {
        "Seed": "# Seed\n\nedited in the ui, round 2",
        **{f"Other {i}": f"# Other {i}\n\nwritten by thatch remember, round {i}" for i in range(3)},
    }


# A process holding the database open, as thatch mcp or thatch ui does: it writes, then
# runs ``step`` (argv[2]), says so, waits for a line on stdin, writes again and closes.
HOLDER = """
import sys
from pathlib import Path
from thatch.frontend.store import db
from thatch.frontend.store.memory_store import Store

path, step = Path(sys.argv[1]), sys.argv[2]
store = Store.open(path)
store.remember("p", "Holder before", "# Holder before", None, None)
if step == "write_fault":
    db.write_fault(path)
elif step == "store_error":
    import sqlite3
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    db.store_error(full, path)
print("ready", flush=True)
sys.stdin.readline()
store.remember("p", "Holder after", "# Holder after", None, None)
store.close()
print("done", flush=True)
"""

OTHER = """
import sys
from thatch.frontend.store.memory_store import Store
with Store.open(sys.argv[1]) as store:
    store.remember("p", "Other", "# Other", None, None)
"""


@pytest.mark.parametrize("step", ["nothing", "write_fault", "store_error"])
def test_naming_a_write_fault_keeps_the_holders_locks(tmp_path: Path, step: str) -> None:
    """A process holding the file open names a write fault (``write_fault``, or
    ``store_error`` for a full disk, as the ui and the MCP tools do on a failed write):
    it keeps its locks. Seen from outside: another process that opens, writes and closes
    does not take the file for its own (it would checkpoint and remove the -wal the
    holder still uses); then the holder writes, and the file is whole with every row."""
    db = tmp_path / "thatch.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), step],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "ready\n", holder.stderr
        other = subprocess.run(
            [sys.executable, "-c", OTHER, str(db)], capture_output=True, text=True, timeout=120
        )
        assert other.returncode == 0, other.stderr
        wal_kept = Path(f"{db}-wal").exists()
        out, err = holder.communicate("go\n", timeout=120)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    assert (holder.returncode, out) == (0, "done\n"), err
    assert wal_kept  # the holder's locks told the other process it was not alone
    assert integrity(db) == ["ok"]
    conn = sqlite3.connect(db)
    try:
        labels = sorted(row[0] for row in conn.execute("SELECT label FROM entries"))
    finally:
        conn.close()
    assert labels == ["Holder after", "Holder before", "Other"]


# -- structure ---------------------------------------------------------------------------

PACKAGES = ("common", "cli", "embedder", "frontend", "teamsync")
# Every module that can run in a process holding the database open (the embedder never
# does: test_the_embedder_never_touches_the_database) opens no file by name but the
# owner and the modules named here, each with the files it opens (never the database).
HOLDERS = ("common", "cli", "frontend", "teamsync")
NOT_THE_DATABASE = {
    "frontend/store/vector_snapshot.py": "the shared vector snapshot files",
    "frontend/store/snapshot_dir.py": "the shared vector snapshot files and their directory",
    "frontend/ui/app.py": "the page's static script",
    "frontend/mcp/stdio.py": "/dev/null, for stdin",
    "frontend/queue/files.py": "the extraction queue's files and its lock",
    "cli/chat_cmds.py": "/dev/null, for stdout",
    "cli/main.py": "/dev/null, for stdout that can no longer be written",
    "cli/team_cmds.py": "the token file `thatch team join --token-file` names",
    "teamsync/tokens.py": "the member tokens' 0600 files",
    "teamsync/process.py": "the sync process's lock file and its log",
    "common/environment.py": "thatch's config file",
    "common/pip_line.py": "thatch's install record (PEP 610 direct_url.json)",
    "frontend/setup/check.py": "host configuration files",
    "frontend/setup/declined.py": "host configuration files",
    "frontend/setup/jsonfiles.py": "host configuration files",
    "frontend/setup/git_exclude.py": "the git clone's info/exclude file",
    "frontend/mcp/answer_sheet.py": "the quick start's recorded answers (mcp-answers.json)",
    "frontend/project.py": "a git checkout's .git file and HEAD (the current branch)",
    "frontend/setup/run.py": "host configuration files",
    "frontend/setup/skills.py": "the packaged skill files",
    "frontend/demo.py": "the demo's embedder log (its database is copied by db.backup)",
    "frontend/hooks/chat_anchor.py": "the chat line the session-start reminder told (chat-told/)",
    "frontend/hooks/scan_service.py": "the recall scan socket's lock file (<socket>.lock)",
    "frontend/setup/opencode_plugin.py": "the packaged plugin source (opencode_plugin.js)",
    # Project files named as anchors; thatch's own database and its sidecars are refused
    # at save and never opened at recall (anchors/check.py database_files).
    "frontend/git_refs.py": "a checkout's .git file and the common dir's commondir",
    "frontend/branch_sync.py": "the refs' fingerprint cache file",
    "frontend/setup/git_hooks.py": "the git hooks thatch setup --git-hooks writes",
    "frontend/anchors/capture.py": "the project's code an anchor names",
    "frontend/anchors/check.py": "the project's code an anchor names",
    "frontend/anchors/events.py": "the git hooks' events file and the consumer's offset file",
    "frontend/project_memo.py": "git's config files and the project-store memo file",
    # Opens for the modules above (anchors, git files, host settings), each of which names
    # the file: regular files only, so a FIFO or device there never blocks.
    "frontend/regular_files.py": "the files the modules above name, as regular files only",
}
# Long-lived processes: they may run the doctor's checks only in a child.
LONG_LIVED: tuple[str, ...] = ("frontend/ui", "frontend/mcp", "frontend/tools", "embedder")
LONG_LIVED += ("cli/ui_cmd.py", "cli/mcp_cmd.py", "cli/embedder_cmds.py")
OPENS_BY_NAME = {"open", "read_bytes", "read_text", "write_bytes", "write_text"}


def sources(*places: str) -> list[tuple[str, ast.AST]]:
    found: list[tuple[str, ast.AST]] = []
    for place in places:
        target = ROOT / place
        for path in sorted([target] if target.is_file() else target.rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            found.append((relative, ast.parse(path.read_text(encoding="utf-8"))))
    return found


def opens(tree: ast.AST) -> list[tuple[int, str]]:
    """Every call that connects to SQLite or opens a file by name, as (line, what).

    ``Store.open``/``cls.open`` (which go through the owner) and ``webbrowser.open`` are
    not opens of a file.
    """
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in {"open", "connect"}:
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute):
            owner = func.value.id if isinstance(func.value, ast.Name) else ""
            if func.attr == "connect" and owner == "sqlite3":
                found.append((node.lineno, "sqlite3.connect"))
            elif func.attr == "open" and owner in {"Store", "cls", "webbrowser"}:
                continue
            elif func.attr in OPENS_BY_NAME:
                found.append((node.lineno, f"{owner}.{func.attr}"))
    return found


def test_only_the_owner_connects_to_sqlite() -> None:
    """``sqlite3.connect`` is called in frontend/store/db.py alone: every connection (the
    doctor's read-only one and the demo's backup included) is made there."""
    offenders = [
        f"{module}:{line}"
        for module, tree in sources(*PACKAGES)
        for line, what in opens(tree)
        if what == "sqlite3.connect" and module != OWNER
    ]
    assert offenders == []


def test_no_frontend_module_opens_a_file_outside_the_owner() -> None:
    """No module of thatch's frontends (store, ui, MCP server and tools, hooks, CLI, doctor)
    opens a file by name (the database, its -wal/-shm or anything else) but the owner
    and the modules of NOT_THE_DATABASE."""
    offenders = [
        f"{module}:{line}: {what}"
        for module, tree in sources(*HOLDERS)
        if module != OWNER and module not in NOT_THE_DATABASE
        for line, what in opens(tree)
    ]
    assert offenders == []


def test_long_lived_processes_run_the_doctor_only_in_a_child() -> None:
    """The ui (and the MCP server, the embedder) take from frontend/doctor.py nothing but
    ``checks_in_child`` (and ``damage_found`` to read its answer): the checks themselves
    open the database file."""
    offenders = []
    for module, tree in sources(*LONG_LIVED):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "thatch.frontend.doctor":
                names = {alias.name for alias in node.names}
                if names - {"checks_in_child", "damage_found", "Check"}:
                    offenders.append(f"{module}:{node.lineno}: {sorted(names)}")
            elif isinstance(node, ast.Import) and any(
                alias.name == "thatch.frontend.doctor" for alias in node.names
            ):
                offenders.append(f"{module}:{node.lineno}: import thatch.frontend.doctor")
    assert offenders == []


def test_the_embedder_never_touches_the_database() -> None:
    """The embedder process holds no connection: it imports neither sqlite3 nor the store."""
    offenders = []
    for module, tree in sources("embedder"):
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{module}:{getattr(node, 'lineno', '?')}: {name}"
                for name in names
                if name == "sqlite3" or name.startswith("thatch.frontend")
            ]
    assert offenders == []
