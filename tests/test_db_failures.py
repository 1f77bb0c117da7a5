"""Failures read as failures: read-only, full, damaged and undecodable databases.

Real SQLite files, real ``thatch`` processes, the real (mock-model) embedder. Read-only and
full file systems are real mounts in a private namespace (tests/support/mounts.py).
"""

from __future__ import annotations

import html
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess, tcp_embedder
from tests.support.fake_embedder import bag_vector, rows
from tests.support.hookrun import run_hook, thatch_command
from tests.support.mounts import immutable, in_namespace, read_only, small_tmpfs
from tests.support.ui_client import run_ui_process
from thatch.cli.main import cli
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools

DAMAGED = 'is damaged (database disk image is malformed): run sqlite3 {db} "PRAGMA integrity_check"'

# Inside the namespace: the MCP tool layer over the same file, as `thatch mcp` runs it.
TOOLS_PROBE = """
import json
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools
out = {}
with ToolContext.from_env() as ctx:
    tools = Tools(ctx)
    for name, args in [
        ("memory_recall", {"query": "push a tag"}),
        ("memory_remember", {"label": "New", "content": "x"}),
        ("memory_forget", {"label": "Deploy"}),
    ]:
        result = tools.call(name, args)
        out[name] = [result.is_error, result.text]
print(json.dumps(out))
"""


@pytest.fixture
def env(tmp_path: Path, mock_embedder: EmbedderProcess, monkeypatch: pytest.MonkeyPatch) -> dict:
    project = tmp_path / "proj"
    project.mkdir()
    (tmp_path / "data").mkdir()
    values = {
        "THATCH_DB_PATH": str(tmp_path / "data" / "thatch.db"),
        "THATCH_PROJECT_DIR": str(project),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_QUEUE_DIR": str(tmp_path / "queue"),
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


def db_of(env: dict) -> Path:
    return Path(env["THATCH_DB_PATH"])


def cli_run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def seed(env: dict) -> None:
    """Two embedded memories (CLI) and one pending one (saved with no vector)."""
    assert cli_run("remember", "Deploy", "push a tag to deploy")[0] == 0
    assert cli_run("remember", "Tabs", "user likes tabs", "--store", "global")[0] == 0
    with Store.open(db_of(env)) as store:
        store.remember("proj", "Later", "# Later\n\nembedded later", None, None)
    assert not Path(f"{db_of(env)}-wal").exists()  # closed cleanly: nobody has it open


def telemetry(db: Path) -> list[tuple]:
    return rows(db, "SELECT slug, recall_count, last_recalled_at FROM entries ORDER BY slug")


def test_read_only_file_system_reads_answer_and_writes_fail_in_one_line(env: dict) -> None:
    """On a read-only mount: search, stores, list and MCP recall answer; remember, forget
    and reembed fail with one line naming the file and the mount; nothing changes."""
    seed(env)
    db = db_of(env)
    before = telemetry(db)
    reason = f"the file system holding {db.parent} is mounted read-only"
    commands = [
        thatch_command("search", "push", "a", "tag"),
        thatch_command("stores"),
        thatch_command("list"),
        thatch_command("remember", "New", "x"),
        thatch_command("forget", "Deploy"),
        thatch_command("reembed", "--missing"),
        [sys.executable, "-c", TOOLS_PROBE],
    ]
    search, stores, listed, remember, forget, reembed, probe = in_namespace(
        read_only(db.parent), commands, env
    )
    assert search.returncode == 0
    assert search.stderr.splitlines() == [
        # A person's search stamps nothing, so nothing needed writing.
        "(1 memory is not indexed yet and was not searched.)",  # "Later" stays pending
    ]
    assert search.stdout.splitlines()[1].endswith("[proj] Deploy")
    assert (stores.returncode, stores.stdout) == (0, "global\nproj\n")
    assert listed.returncode == 0 and "Deploy" in listed.stdout
    for failed in (remember, forget, reembed):
        assert failed.returncode == 1
        error, fix = failed.stderr.splitlines()[-2:]
        assert error == f"Error: cannot write database {db}: {reason}"
        assert fix.startswith("Fix: ")
        assert "Traceback" not in failed.stderr and len(failed.stderr.splitlines()) <= 3
    tools = json.loads(probe.stdout)
    assert tools["memory_recall"][0] is False and "Deploy" in tools["memory_recall"][1]
    assert tools["memory_remember"] == [True, f"cannot write database {db}: {reason}"]
    assert tools["memory_forget"] == [True, f"cannot write database {db}: {reason}"]
    assert telemetry(db) == before
    assert not Path(f"{db}-wal").exists()


def test_read_only_file_reads_answer_and_writes_fail_in_one_line(env: dict) -> None:
    """An immutable database file (root ignores 0444): the same, naming the file."""
    seed(env)
    db = db_of(env)
    before = telemetry(db)
    reason = f"{db} does not permit writes (is it immutable? see lsattr {db})"
    with immutable(db):
        code, out, err = cli_run("search", "push a tag")
        assert code == 0 and out.splitlines()[1].endswith("[proj] Deploy")
        assert "recall counts not updated" not in err  # a person's search writes nothing
        for args in (["remember", "New", "x"], ["forget", "Deploy"], ["reembed", "--missing"]):
            code, _out, err = cli_run(*args)
            assert code == 1, args
            assert err.splitlines()[-2:] == [
                f"Error: cannot write database {db}: {reason}",
                f"Fix: chattr -i {db}",
            ]
        with ToolContext.from_env() as ctx:
            tools = Tools(ctx)
            recalled = tools.call("memory_recall", {"query": "push a tag"})
            assert not recalled.is_error and "Deploy" in recalled.text
            saved = tools.call("memory_remember", {"label": "New", "content": "x"})
            assert (saved.is_error, saved.text) == (True, f"cannot write database {db}: {reason}")
    assert telemetry(db) == before


def as_nobody(command: list[str], env: dict) -> subprocess.CompletedProcess[str]:
    """``command`` run as the user nobody (util-linux ``setpriv``, as the namespace tests
    use ``unshare``): root writes any directory whatever its mode."""
    drop = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    return subprocess.run(
        [*drop, *command], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_unwritable_directory_reads_answer_and_writes_fail_in_one_line(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own database file in a directory they may not write (SQLite can make no
    -wal/-shm there): stores, list, show, search and MCP recall answer; remember fails in
    one line naming the directory; nothing changes."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    short_tmp.chmod(0o755)
    data = short_tmp / "data"  # root's, 0755: nobody may read it, not write it
    data.mkdir(mode=0o755)
    home = short_tmp / "home"
    home.mkdir()
    project = home / "proj"
    project.mkdir()
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    os.chown(project, nobody.pw_uid, nobody.pw_gid)
    db = data / "thatch.db"
    with tcp_embedder(short_tmp) as (_embedder, port):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("THATCH_")},
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "THATCH_DB_PATH": str(db),
            "THATCH_PROJECT_DIR": str(project),
            "THATCH_QUEUE_DIR": str(home / "queue"),
            "THATCH_EMBEDDER_ADDR": f"127.0.0.1:{port}",
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert cli_run("remember", "Deploy", "push a tag to deploy")[0] == 0
        assert cli_run("remember", "Tabs", "user likes tabs", "--store", "global")[0] == 0
        assert sorted(os.listdir(data)) == ["thatch.db"]  # closed cleanly
        os.chown(db, nobody.pw_uid, nobody.pw_gid)  # the file is the user's own
        before = db.read_bytes()
        stores, listed, shown, search, probe, remember = (
            as_nobody(command, env)
            for command in (
                thatch_command("stores"),
                thatch_command("list"),
                thatch_command("show", "Deploy"),
                thatch_command("search", "push", "a", "tag"),
                [sys.executable, "-c", TOOLS_PROBE],
                thatch_command("remember", "New", "x"),
            )
        )
    assert (stores.returncode, stores.stdout, stores.stderr) == (0, "global\nproj\n", "")
    assert listed.returncode == 0 and "Deploy" in listed.stdout, listed.stderr
    assert shown.returncode == 0 and "push a tag to deploy" in shown.stdout, shown.stderr
    assert search.returncode == 0, search.stderr
    assert search.stdout.splitlines()[1].endswith("[proj] Deploy")
    reason = (
        f"its directory {data} is not writable "
        "(SQLite creates thatch.db-wal and thatch.db-shm there)"
    )
    assert search.stderr == ""  # a person's search stamps no recall counts: nothing to write
    tools = json.loads(probe.stdout)
    assert tools["memory_recall"][0] is False and "Deploy" in tools["memory_recall"][1]
    assert tools["memory_remember"] == [True, f"cannot write database {db}: {reason}"]
    assert remember.returncode == 1
    assert remember.stderr.splitlines()[0] == f"Error: cannot write database {db}: {reason}"
    assert remember.stderr.splitlines()[1].startswith("Fix: ")
    assert db.read_bytes() == before
    assert sorted(os.listdir(data)) == ["thatch.db"]


def test_current_database_opens_without_writing(tmp_path: Path) -> None:
    """Opening a fully migrated database changes no byte of it; an immutable one opens for
    reading, even one that still needs a migration it cannot write."""
    db = tmp_path / "thatch.db"
    with Store.open(db) as store:
        store.remember("global", "A", "# A\n\nalpha", bag_vector("alpha", 8), "m")
    content, mtime = db.read_bytes(), db.stat().st_mtime_ns
    with Store.open(db) as store:
        assert store.store_names() == ["global"]
    assert (db.read_bytes(), db.stat().st_mtime_ns) == (content, mtime)
    with immutable(db), Store.open(db) as store:
        assert [m.label for m in store.list("global")] == ["A"]
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM _thatch_migrations WHERE name = 'm005_pending_index'")
    conn.commit()
    conn.close()
    # Still needing a migration it cannot write: read in the schema it has.
    with immutable(db), Store.open(db) as store:
        assert [m.label for m in store.list("global")] == ["A"]
        assert store.search(["global"], bag_vector("alpha", 8), limit=1)[0].memory.label == "A"


def damage(db: Path) -> None:
    """Overwrite the pages holding the text of three project memories in the middle of
    the 60 (the file is checkpointed and closed). Found by their bytes, not by position:
    where the middle of the file falls depends on every other table and index."""
    data = db.read_bytes()
    pages = sorted(
        {
            found // 4096
            for number in (29, 30, 31)
            for found in _all(data, f"# Mem {number}\n\n{number} {number} ".encode())
        }
    )
    assert pages, "the project memories' pages were not found"
    with db.open("r+b") as handle:
        for page in pages:
            handle.seek(page * 4096)
            handle.write(b"\xa5" * 4096)


def _all(data: bytes, needle: bytes) -> list[int]:
    found, at = [], data.find(needle)
    while at != -1:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def test_mid_file_damage_is_one_line_naming_the_file(env: dict) -> None:
    """stores/list/search/hygiene/remember/show never print a traceback: each works or
    gives the damaged-file line with the integrity_check command; so do the MCP tools."""
    db = db_of(env)
    rng = np.random.default_rng(7)
    with Store.open(db) as store:
        for i in range(60):
            vector = rng.standard_normal(16).astype(np.float32)
            store.remember("proj", f"Mem {i}", f"# Mem {i}\n\n" + f"{i} " * 900, vector, "m")
    damage(db)
    expected = f"Error: database {db} " + DAMAGED.format(db=db)
    failed = set()
    for args in (["stores"], ["list"], ["search", "m"], ["hygiene"], ["remember", "Z", "z"]):
        done = cli_run(*args)
        assert "Traceback" not in done[2], args
        if done[0] != 0:
            fix = f"Fix: restore {db} from a backup, or move it aside (thatch starts a new one)"
            assert (done[0], done[2]) == (1, f"{expected}\n{fix}\n"), args
            failed.add(args[0])
    assert {"list", "search", "hygiene"} <= failed
    hook_env = {**env, "THATCH_PROJECT_DIR": str(Path(env["THATCH_PROJECT_DIR"]))}
    for hook, payload in (("flush-tools", {"prompt": "how do I push a tag"}), ("reminder", {})):
        ran = run_hook([hook], {"session_id": "s", **payload}, hook_env)
        assert ran.returncode == 0  # hooks never fail the host's turn
        # The reminder's counts read indexes (m022), which may not reach the damaged pages.
        assert ran.stderr.decode() in (
            "",
            f"[thatch {hook}] " + expected.removeprefix("Error: ") + "\n",
        ), hook
        assert hook == "reminder" or ran.stderr
    with ToolContext.from_env() as ctx:
        listed = Tools(ctx).call("memory_list", {"store": "proj"})
    assert (listed.is_error, listed.text) == (True, expected.removeprefix("Error: "))


# Inside a child process: the MCP tool layer over a damaged file, as `thatch mcp` runs it.
DAMAGE_PROBE = """
import json
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools
out = []
with ToolContext.from_env() as ctx:
    tools = Tools(ctx)
    for name, args in [
        ("memory_remember", {"label": "Before", "content": "saved first", "store": "global"}),
        ("memory_list", {"store": "proj"}),
        ("memory_remember", {"label": "After", "content": "refused", "store": "global"}),
        ("memory_forget", {"label": "Tabs", "store": "global"}),
        ("memory_recall", {"query": "user likes tabs", "store": "global"}),
    ]:
        result = tools.call(name, args)
        out.append([result.is_error, result.text])
print(json.dumps(out))
"""


def damaged_store(env: dict) -> Path:
    """A global memory, then 60 large project memories, then mid-file damage (in the
    project's pages: the global rows still read)."""
    db = db_of(env)
    assert cli_run("remember", "Tabs", "user likes tabs", "--store", "global")[0] == 0
    rng = np.random.default_rng(7)
    with Store.open(db) as store:
        for i in range(60):
            vector = rng.standard_normal(16).astype(np.float32)
            store.remember("proj", f"Mem {i}", f"# Mem {i}\n\n" + f"{i} " * 900, vector, "m")
    damage(db)
    return db


def labels_after_the_project(db: Path) -> list[str]:
    """Labels of the rows written after the 60 project ones (read by rowid: a scan of
    the store would meet the damage)."""
    return [label for (label,) in rows(db, "SELECT label FROM entries WHERE rowid > 61")]


def test_damage_met_refuses_every_later_write_of_the_process(env: dict) -> None:
    """A `thatch mcp` process writes into a damaged file while it has not met the damage;
    once a read found it damaged, each later write (remember, forget, recall counts) is
    refused with the damaged-file line, while the rows it can still read answer."""
    db = damaged_store(env)
    expected = f"database {db} " + DAMAGED.format(db=db)
    done = subprocess.run(
        [sys.executable, "-c", DAMAGE_PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    before, listed, after, forget, recall = json.loads(done.stdout)
    assert before[0] is False, before  # SQLite had not met the damage yet
    assert listed == [True, expected]
    assert after == [True, expected]
    assert forget == [True, expected]
    assert recall[0] is False and "Tabs" in recall[1]
    assert labels_after_the_project(db) == ["Before"]
    assert rows(db, "SELECT label, recall_count FROM entries WHERE rowid = 1") == [("Tabs", 0)]


def test_ui_status_reporting_damage_refuses_later_edits(env: dict) -> None:
    """A `thatch ui` process: its Status page's doctor (run from the page's button) finds
    the file damaged; from then on an edit (of a memory it can still read) is refused with
    the damaged-file line and changes nothing. Before that run the same page reads fine."""
    db = damaged_store(env)
    with run_ui_process(env) as (client, entry):
        assert client.request("GET", entry).status == 303
        shown = client.get("/memory", store="global", label="Tabs")
        assert shown.status == 200 and "user likes tabs" in shown.body
        status = client.get("/status")
        assert status.status == 200
        ran = client.post("/status/doctor", {"csrf": status.csrf()})
        assert ran.status == 303
        found = client.get(ran.headers["location"])
        assert f"{db} is damaged: " in html.unescape(found.body)
        edited = client.post(
            "/memory/edit",
            {
                "csrf": shown.csrf(),
                "store": "global",
                "label": "Tabs",
                "content": "changed after the damage was reported",
                "confidence": "5",
            },
        )
        assert edited.status == 500
        said = html.unescape(edited.body)
        assert f"database {db} is damaged (" in said
        assert f'): run sqlite3 {db} "PRAGMA integrity_check"' in said
        assert "Nothing was changed." in said
    assert rows(db, "SELECT content FROM entries WHERE rowid = 1") == [
        ("# Tabs\n\nuser likes tabs",)
    ]


def test_undecodable_text_is_read_with_replacement_and_never_blocks_writes(env: dict) -> None:
    """A label and a content holding invalid UTF-8 (a BLOB cast into TEXT) are shown with
    U+FFFD; remember, list, recall keep working, in the tools and the CLI."""
    db = db_of(env)
    assert cli_run("remember", "Deploy", "push a tag")[0] == 0
    assert cli_run("remember", "Broken", "to be damaged")[0] == 0
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE entries SET label = CAST(X'4e6f74ff20fe' AS TEXT), "
        "content = CAST(X'2320ff0a0a78' AS TEXT) WHERE slug = 'broken'"
    )
    conn.commit()
    conn.close()
    code, out, err = cli_run("remember", "Fresh", "a new memory")
    assert (code, err) == (0, "")
    code, out, _ = cli_run("list")
    assert code == 0 and "Not\ufffd \ufffd" in out
    code, out, _ = cli_run("search", "push a tag")
    assert code == 0 and "Deploy" in out
    with ToolContext.from_env() as ctx:
        tools = Tools(ctx)
        saved = tools.call("memory_remember", {"label": "Tool write", "content": "works"})
        assert not saved.is_error, saved.text
        listed = tools.call("memory_list", {})
        assert not listed.is_error and "Not\ufffd \ufffd" in listed.text
    slugs = rows(db, "SELECT slug FROM entries WHERE store = 'proj' ORDER BY 1")
    assert slugs == [("broken",), ("deploy",), ("fresh",), ("tool-write",)]


def test_full_disk_writes_fail_in_one_line(env: dict, tmp_path: Path) -> None:
    """A full file system: remember says the disk is full, naming the file, never a
    traceback; doctor names the full disk, not permissions."""
    disk = tmp_path / "disk"
    disk.mkdir()
    db = disk / "thatch.db"
    env = {**env, "THATCH_DB_PATH": str(db)}
    seeded, _fill, big, doctor = in_namespace(
        small_tmpfs(disk),
        [
            thatch_command("remember", "Seed", "saved before the disk filled"),
            ["fill", str(disk)],
            thatch_command("remember", "Big", "y " * 20_000),
            thatch_command("doctor"),
        ],
        env,
    )
    assert seeded.returncode == 0, seeded.stderr
    assert big.returncode == 1 and "Traceback" not in big.stderr
    line, fix = big.stderr.splitlines()
    assert fix == "Fix: free space on that disk, or set THATCH_DB_PATH to a disk with room"
    assert line.startswith("Error: cannot ") and str(db) in line
    assert f"the disk holding {disk} is full" in line
    (database,) = [x for x in doctor.stdout.splitlines() if x.startswith(("ok  d", "FAIL  d"))]
    assert database.startswith(f"FAIL  database  {db} cannot be written: the disk holding")
    assert "check permissions" not in doctor.stdout.split(database)[1].splitlines()[1]


def test_another_programs_database_is_refused_and_left_as_it_was(env: dict) -> None:
    """A THATCH_DB_PATH naming another program's SQLite file (a typo away) used to get
    thatch's tables migrated into it, and WAL mode. Now every door refuses it, one line
    and a Fix, and the file's bytes are what they were."""
    import hashlib

    path = db_of(env)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    from thatch.common.environment import default_db_path

    reason = f"cannot open database at {path}: not a thatch database (its tables: users); "
    default = default_db_path({k: v for k, v in env.items() if k != "THATCH_DB_PATH"})
    fix = f"set THATCH_DB_PATH to thatch's database or to a new file (unset, it is {default})"
    for args in (["stores"], ["remember", "X", "y"], ["search", "x"]):
        code, out, err = cli_run(*args)
        assert (code, out) == (1, ""), (args, out, err)
        assert err == f"Error: {reason}nothing was written\nFix: {fix}\n"
    hook = run_hook(["reminder"], {"session_id": "s"}, env)
    assert hook.returncode == 0 and b"Traceback" not in hook.stderr
    said = hook.stderr.decode()
    # The environment's fault, said as such: not an "internal error: DatabaseOpenError".
    assert f"[thatch reminder] {reason}" in said and "internal error" not in said, said
    server = subprocess.run(
        thatch_command("mcp"), env=env, input="", capture_output=True, text=True, timeout=60
    )
    assert server.returncode != 0 and server.stdout == ""
    assert server.stderr.startswith(f"Error: {reason}")
    code, out, _ = cli_run("doctor")
    assert code == 1
    assert f"FAIL  database  {path} is not a thatch database (its tables: users)\n" in out
    assert f"      fix: {fix}\n" in out
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["thatch.db"]


def test_a_file_moved_from_under_a_long_lived_process_is_refused_not_written_into(
    env: dict,
) -> None:
    """`thatch mcp` opens the file once. Deleted or replaced under it (a reset, a restore),
    its saves used to land in the unlinked file, reported as saved and seen by nobody."""
    seed(env)
    db = db_of(env)
    with ToolContext.from_env() as ctx:
        tools = Tools(ctx)
        assert not tools.call("memory_remember", {"label": "Kept", "content": "x"}).is_error
        restored = db.with_name("restored.db")
        with Store.open(restored) as other:
            other.remember("proj", "Other", "# Other\n\nfrom the backup", None, None)
        for suffix in ("-wal", "-shm"):  # as a restore must: SQLite would replay them
            db.with_name(db.name + suffix).unlink()
        os.replace(restored, db)
        replaced = f"database {db} was replaced by another file after this process opened it"
        for name, args in [
            ("memory_remember", {"label": "Lost", "content": "would be lost"}),
            ("memory_list", {}),
            ("memory_recall", {"query": "backup"}),
        ]:
            result = tools.call(name, args)
            assert result.is_error and result.text.startswith(replaced), (name, result.text)
            assert "Fix: restart this thatch process" in result.text
        assert rows(db, "SELECT label FROM entries") == [("Other",)]

        for name in os.listdir(db.parent):
            os.unlink(db.parent / name)
        result = tools.call("memory_remember", {"label": "Lost", "content": "would be lost"})
        assert result.is_error and "was deleted or moved after this process" in result.text
        assert not db.exists()
