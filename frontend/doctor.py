"""``thatch doctor``'s checks as a library (docs/cli.md §doctor): look, never touch.

Every check only reads. The database is read read-only and never migrated; when no
``-wal`` file exists (no process has it open) it is read ``immutable`` so that SQLite
does not leave ``-wal``/``-shm`` files behind. Reading is not what the other commands
need, though: the database check also tests writing as they do (the file, its -wal/-shm
files and its directory opened for writing, free space, the write lock taken with
``BEGIN IMMEDIATE`` and released with ``ROLLBACK``), none of which changes the file, and
names the fault it meets. The embedder is asked for health and info on a client that
cannot auto-start; models are described without network access.

The database checks open the file beside SQLite (its header) and with connections of
their own, so they run only in a process that holds no connection to it: ``thatch
doctor`` itself. A long-lived process (the ui's Status page) calls ``checks_in_child``.

Decisions the spec leaves open:
- a database file that does not exist yet is ``warn`` (thatch creates it on first use)
  when its directory can be created, ``FAIL`` when it cannot;
- an outdated schema or a non-WAL journal is ``warn``: the next thatch command that opens
  the database migrates it and switches it to WAL;
- a 0-byte file is ``FAIL``: thatch never leaves one (it writes the schema on first
  open), so something truncated or replaced the database;
- each fault has its own fix: the spec's ``check permissions …`` is kept for permission
  problems; a read-only mount, an immutable file, a full disk and damage say what to do;
- ``setup:<host>`` runs for hosts with thatch artifacts, the host named by the
  environment (``THATCH_HOST``, ``CURSOR_PROJECT_DIR``, ``CLAUDE_PROJECT_DIR``), and hosts
  whose configuration directory exists (the host is installed for this user).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from thatch.common.shell_words import shell_quote
from thatch.frontend.errors import fault_fix, foreign_fix, not_a_database_fix
from thatch.frontend.untrusted import has_control, inline

__all__ = [
    "NOT_WIRED",
    "NOT_WIRED_FIX",
    "RESTART_FIX",
    "Check",
    "Served",
    "check_database",
    "checks_in_child",
    "damage_found",
    "exit_code",
    "hosts_to_check",
    "run_checks",
]

Status = Literal["ok", "warn", "FAIL"]
DB_FIX = "check permissions of {dir} or set THATCH_DB_PATH"
QUEUE_FIX = "check permissions of {dir} or set THATCH_QUEUE_DIR"
RESTART_FIX = "thatch embedder stop && thatch embedder start"
HEALTH_TIMEOUT = 1.0
INFO_TIMEOUT = 2.0
CHILD_TIMEOUT = 120.0
DAMAGED_AT = " is damaged: "
INTEGRITY_NOT_READ = "whole file not read for damage (--skip-integrity)"


@dataclass(frozen=True)
class Check:
    status: Status
    name: str
    detail: str
    fix: str | None = None

    def lines(self) -> list[str]:
        """``<status>  <check>  <detail>`` and, when not ok, ``      fix: <action>``."""
        out = [f"{self.status}  {self.name}  {_one_line(self.detail)}"]
        if self.status != "ok" and self.fix:
            out.append(f"      fix: {_one_line(self.fix)}")
        return out

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "check": self.name, "detail": self.detail, "fix": self.fix}


@dataclass(frozen=True)
class Served:
    """What the running embedder told us (None fields: it did not answer)."""

    address: str
    model_id: str | None = None
    remote: bool = False


def _one_line(text: str) -> str:
    """A check's words as one line. The checks show their data with ``inline``; an error's
    message may still hold data its raiser did not escape (a value of the environment, a
    name in a model's files), and must not start a line of doctor's of its own. Text
    with no control in it (``has_control``: a non-ASCII space is none) is left as it is,
    so nothing shown already is escaped twice."""
    return inline(text) if has_control(text) else text


def _shown(path: Path | str) -> str:
    """A path in a doctor line: a directory an agent named (a newline, an escape sequence,
    a bidi control in it) is data, and cannot forge a line of doctor's."""
    return inline(os.fspath(path))


# -- database ---------------------------------------------------------------------------


def _creatable(directory: Path) -> bool:
    """True if ``directory`` exists writable, or its nearest existing ancestor is."""
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def check_database(
    path: Path, *, integrity: bool = True
) -> tuple[Check, sqlite3.Connection | None]:
    """The database check and, when it could be read, an open read-only connection.
    ``integrity=False`` leaves out ``PRAGMA quick_check``, which reads the whole file."""
    from thatch.frontend.store.db import connect_read_only, foreign_tables, header_is_wal
    from thatch.frontend.store.schema import MIGRATIONS, applied_migrations

    fix = DB_FIX.format(dir=_shown(path.parent))
    shown = _shown(path)
    if not path.exists():
        if _creatable(path.parent):
            return Check(
                "warn",
                "database",
                f"{shown} does not exist yet (thatch creates it on first use)",
                "to create it: thatch stores; or set THATCH_DB_PATH if it lives elsewhere",
            ), None
        return Check("FAIL", "database", f"{shown} does not exist and cannot be created", fix), None
    if not path.is_file():
        return Check("FAIL", "database", f"{shown} is not a file", fix), None
    try:
        if path.stat().st_size == 0:
            return Check(
                "FAIL",
                "database",
                f"{shown} is an empty file (0 bytes): it holds no memories and no schema",
                f"restore {shown} from a backup if it held memories; "
                "otherwise delete it and thatch creates a new one",
            ), None
        wal = header_is_wal(path)
        conn = connect_read_only(path)
    except (OSError, sqlite3.Error) as error:
        # Reading a WAL database needs its -shm file: a full disk or read-only mount can
        # stop even that, and is then the fault to name.
        return _write_check(path) or Check(
            "FAIL", "database", f"cannot open {shown}: {error}", fix
        ), None
    try:
        problems = (
            [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            if integrity
            else ["ok"]
        )
        if problems != ["ok"]:
            conn.close()
            return _damaged(path, problems[0]), None
        foreign = foreign_tables(conn)
        if foreign is not None:
            conn.close()
            return Check(
                "FAIL",
                "database",
                f"{shown} is not a thatch database (its tables: {foreign})",
                foreign_fix(),
            ), None
        missing = [name for name, _ in MIGRATIONS if name not in applied_migrations(conn)]
        memories, stores = _counts(conn) if not missing else (0, 0)
    except sqlite3.Error as error:
        conn.close()
        if isinstance(error, sqlite3.DatabaseError) and "malformed" in str(error):
            return _damaged(path, str(error)), None
        if "file is not a database" in str(error):
            return Check(
                "FAIL",
                "database",
                f"{shown} is not a database: {error}",
                inline(not_a_database_fix(path)),
            ), None
        return _write_check(path) or Check(
            "FAIL", "database", f"cannot read {shown}: {error}", fix
        ), None
    unwritable = _write_check(path, lock=Path(f"{path}-wal").exists() or not wal)
    if unwritable is not None:
        return unwritable, conn
    if missing:
        return Check(
            "warn",
            "database",
            f"{shown} has an older schema ({len(missing)} migrations pending)",
            "migrate it by running one command: thatch stores",
        ), conn
    detail = f"{shown} ({_plural(memories, 'memory', 'memories')} in {_plural(stores, 'store')})"
    if not integrity:
        detail += f"; {INTEGRITY_NOT_READ}"
    if not wal:
        return Check(
            "warn", "database", f"{detail}, not in WAL mode", "run thatch stores once"
        ), conn
    return Check("ok", "database", detail), conn


def _damaged(path: Path, problem: str) -> Check:
    quoted = inline(shell_quote(os.fspath(path)))
    return Check(
        "FAIL",
        "database",
        f"{_shown(path)}{DAMAGED_AT}{' '.join(problem.split())}",
        f'run sqlite3 {quoted} "PRAGMA integrity_check"; then restore a backup, or move '
        "the file aside (thatch starts a new one)",
    )


def _write_check(path: Path, *, lock: bool = False) -> Check | None:
    """FAIL naming what stops the other commands from writing, or None when they can.

    ``lock`` also takes the write lock (and gives it back), only when that creates no
    file: with no -wal (nobody has it open) a WAL database would get -wal/-shm files made
    and removed, and nobody holds the lock anyway.
    """
    from thatch.frontend.store.db import lock_fault, write_fault

    found = write_fault(path)
    if found is None and lock:
        found = lock_fault(path)
    if found is None:
        return None
    kind, detail = found
    fix = inline(fault_fix(kind, path) or "") or DB_FIX.format(dir=_shown(path.parent))
    return Check("FAIL", "database", f"{_shown(path)} cannot be written: {detail}", fix)


def _counts(conn: sqlite3.Connection) -> tuple[int, int]:
    memories = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    stores = conn.execute(
        "SELECT count(*) FROM (SELECT name FROM stores UNION SELECT store FROM entries)"
    ).fetchone()[0]
    return int(memories), int(stores)


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else (plural or word + 's')}"


# -- queue ------------------------------------------------------------------------------


def check_queue(directory: Path) -> Check:
    shown = _shown(directory)
    fix = QUEUE_FIX.format(dir=shown)
    if directory.exists():
        if not directory.is_dir():
            return Check("FAIL", "queue", f"{shown} is not a directory", fix)
        if not os.access(directory, os.W_OK | os.X_OK):
            return Check("FAIL", "queue", f"{shown} is not writable", fix)
        return Check("ok", "queue", f"{shown} is writable")
    if _creatable(directory):
        return Check("ok", "queue", f"{shown} (created on first use)")
    return Check("FAIL", "queue", f"{shown} does not exist and cannot be created", fix)


# -- embedder and model -----------------------------------------------------------------


def check_embedder(env: Mapping[str, str]) -> tuple[Check, Served | None]:
    """Health at the configured address; never starts anything."""
    from thatch.common.environment import embedder_log_file
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import EmbedderUntrusted, ThatchEmbedderError
    from thatch.embedder.client.settings import configured_address

    try:
        address = configured_address(env)
    except ThatchEmbedderError as error:
        fix = "set THATCH_EMBEDDER_ADDR to unix:///path, host:port or dns:///host:port"
        return Check("FAIL", "embedder", str(error), fix), None
    # THATCH_EMBEDDER_ADDR is data: a unix path may hold a line break, a host an escape.
    shown = inline(str(address))
    remote = not address.is_unix
    fix = "check THATCH_EMBEDDER_ADDR" if remote else "thatch embedder start"
    try:
        client = EmbedderClient(env=env, autostart=False, repair=False)
    except ThatchEmbedderError as error:
        return Check("FAIL", "embedder", str(error), fix), None
    try:
        try:
            client.check_trusted()  # the check every tool makes before sending anything
        except EmbedderUntrusted as error:
            return Check("FAIL", "embedder", error.cause, error.fix), None
        health = client.health(timeout=HEALTH_TIMEOUT)
        unknown = Served(str(address), None, remote)
        if health == "UNREACHABLE":
            return Check("FAIL", "embedder", f"nothing is answering at {shown}", fix), unknown
        if health == "NOT_SERVING":
            where = "the remote embedder" if remote else f"the log {_shown(embedder_log_file(env))}"
            return Check(
                "FAIL",
                "embedder",
                f"an embedder at {shown} is not serving (still loading, or its model failed)",
                f"wait a moment and rerun thatch doctor; if it persists, see {where}",
            ), unknown
        try:
            info = client.info(timeout=INFO_TIMEOUT)
        except ThatchEmbedderError:
            return Check("ok", "embedder", f"serving at {shown}"), unknown
    finally:
        client.close()
    pid = f", pid {info.pid}" if info.pid else ""
    # The id is the embedder's word, and a remote embedder's is anyone's.
    detail = f"serving at {shown} (model {inline(info.model_id)}{pid})"
    return Check("ok", "embedder", detail), Served(str(address), info.model_id, remote)


# -- memories ---------------------------------------------------------------------------


def check_memories(conn: sqlite3.Connection | None, db_exists: bool, model: str | None) -> Check:
    from thatch.frontend.store.rows import MISSING, USABLE

    if conn is None:
        if not db_exists:
            return Check("ok", "memories", "no memories yet")
        return Check("warn", "memories", "not checked: the database cannot be read", "see database")
    try:
        pending = conn.execute(f"SELECT count(*) FROM entries WHERE {MISSING}").fetchone()[0]
        other = 0
        if model is not None:
            other = conn.execute(
                f"SELECT count(*) FROM entries WHERE {USABLE} AND model IS NOT ?", (model,)
            ).fetchone()[0]
        total = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    except sqlite3.Error as error:  # an outdated schema may lack columns
        return Check(
            "warn", "memories", f"not checked: {error}", "migrate the database: thatch stores"
        )
    if other:
        detail = (
            f"{_plural(other, 'memory', 'memories')} embedded with another model than "
            f"{inline(model or '')}"
        )
        if pending:
            detail += f", {pending} pending"
        return Check("warn", "memories", detail, "thatch reembed")
    if pending:
        detail = f"{_plural(pending, 'memory', 'memories')} not indexed yet (pending)"
        return Check("warn", "memories", detail, "thatch reembed --missing")
    suffix = f", all embedded with {inline(model)}" if model and total else ""
    from thatch.frontend.store.lexical import fts5_available

    if not fts5_available(conn):  # docs/database.md §lexical-index
        suffix += "; recall ranks by meaning alone (this Python's SQLite has no FTS5)"
    return Check("ok", "memories", f"{_plural(total, 'memory', 'memories')}{suffix}")


# -- thresholds -------------------------------------------------------------------------


def check_thresholds(env: Mapping[str, str], model: str | None) -> Check:
    """The similarity thresholds in force for the active model, and where each came from
    (docs/tools.md §thresholds)."""
    from thatch.embedder.client.settings import configured_model
    from thatch.frontend.thresholds import NAMES, VARIABLES, defaults_for, in_force

    if not model:
        from thatch.embedder.client.errors import ThatchEmbedderError

        try:
            model = configured_model(env)
        except ThatchEmbedderError:  # the model check says why; thresholds still print
            model = "an unresolved model"
    forced = in_force(env, model)
    values = ", ".join(
        f"{name.replace('_', ' ')} {getattr(forced.values, name):g}" for name in NAMES
    )
    shown = inline(model)  # a model directory's name is its id: data
    where = [
        f"defaults for {shown}"
        if defaults_for(model)
        else f"built-in defaults: {shown} is not calibrated"
    ]
    where += [
        f"{name.replace('_', ' ')} from {forced.source(name)}"
        for name in NAMES
        if forced.source(name) == VARIABLES[name]
    ]
    detail = f"{values} ({'; '.join(where)})"
    if forced.problems:
        return Check("warn", "thresholds", "; ".join([*forced.problems, detail]), "fix or unset it")
    return Check("ok", "thresholds", detail)


# -- setup ------------------------------------------------------------------------------


NOT_WIRED = "thatch is not wired into any host (Claude Code, Cursor, opencode)"
NOT_WIRED_FIX = (
    "thatch setup --claude (or --cursor, --opencode) in a project; add --global for every "
    "project; thatch demo first to see it work"
)


def wired_anywhere(project_dir: Path, env: Mapping[str, str]) -> bool:
    from thatch.common.environment import HOSTS
    from thatch.frontend.setup.check import has_own_entry

    return any(
        has_own_entry(host, scope, project_dir, env)
        for host in HOSTS
        for scope in ("local", "global")
    )


def hosts_to_check(project_dir: Path, env: Mapping[str, str]) -> list[str]:
    from thatch.common.environment import HOSTS, host_from_env
    from thatch.frontend.setup.check import has_own_entry
    from thatch.frontend.setup.hosts import (
        claude_config_dir,
        cursor_config_dir,
        opencode_config_dir,
    )

    config_dirs = {
        "claude": claude_config_dir(env),
        "cursor": cursor_config_dir(env),
        "opencode": opencode_config_dir(env),
    }
    named = host_from_env(env)
    chosen = []
    for host in HOSTS:
        # Only the host's own entries count: a project's AGENTS.md is shared by Cursor and
        # opencode, so its block says nothing about which of them was set up.
        artifacts = any(has_own_entry(host, s, project_dir, env) for s in ("local", "global"))
        if artifacts or host == named or config_dirs[host].is_dir():
            chosen.append(host)
    return chosen


def check_setup(
    host: str, project_dir: Path, env: Mapping[str, str], *, bin_path: str, version: str
) -> Check:
    from thatch.frontend.setup.check import doctor_status

    try:
        status, detail, fix = doctor_status(
            host, project_dir, env, bin_path=bin_path, version=version
        )
    except (OSError, ValueError) as error:
        return Check("warn", f"setup:{host}", f"could not check: {error}", f"thatch setup --{host}")
    return Check(status, f"setup:{host}", detail, fix)


# -- all of them ------------------------------------------------------------------------


# ``check_model(env, served)``: the model check and the active model's id
# (``cli/doctor_model.py``: it describes the model with the embedder's own resolution).
ModelCheck = Callable[[Mapping[str, str], Served | None], tuple[Check, str | None]]


def run_checks(
    env: Mapping[str, str],
    *,
    project_dir: Path,
    bin_path: str,
    version: str,
    check_model: ModelCheck,
    integrity: bool = True,
) -> list[Check]:
    """Every check of docs/cli.md §doctor, in the spec's order; ``integrity=False``
    (``--skip-integrity``) does not read the whole database file."""
    from thatch.common.environment import default_db_path, queue_dir

    db_path = default_db_path(env)
    database, conn = check_database(db_path, integrity=integrity)
    try:
        embedder, served = check_embedder(env)
        model, active = check_model(env, served)
        checks = [database, check_queue(queue_dir(env)), embedder, model]
        checks.append(check_thresholds(env, active))
        checks.append(check_memories(conn, db_path.exists(), active))
    finally:
        if conn is not None:
            conn.close()
    if not wired_anywhere(project_dir, env):
        checks.append(Check("warn", "setup", NOT_WIRED, NOT_WIRED_FIX))
    for host in hosts_to_check(project_dir, env):
        checks.append(check_setup(host, project_dir, env, bin_path=bin_path, version=version))
    return checks


def checks_in_child(
    env: Mapping[str, str], *, project_dir: Path, integrity: bool = True
) -> list[Check]:
    """``run_checks`` in a ``thatch doctor --json`` child process, for a long-lived process.

    The database check reads the file's header and opens connections of its own; in a
    process that holds the database open, the close of such a descriptor drops the locks
    of its own connection (docs/database.md §who-opens-the-file). A child's descriptors
    and locks are its own. A child that gives no answer is one FAIL row saying why.
    """
    import json
    import subprocess
    import sys

    script = Path(sys.executable).parent / "thatch"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "thatch.cli"]
    try:
        done = subprocess.run(
            [*command, "doctor", "--json", *([] if integrity else ["--skip-integrity"])],
            env=dict(env),
            cwd=project_dir if project_dir.is_dir() else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
        found = json.loads(done.stdout)
        return [
            Check(item["status"], item["check"], item["detail"], item.get("fix")) for item in found
        ]
    except (OSError, ValueError, TypeError, KeyError, subprocess.SubprocessError) as error:
        why = " ".join(str(error).split()) or type(error).__name__
        return [
            Check("FAIL", "doctor", f"thatch doctor did not answer: {why}", "run thatch doctor")
        ]


def damage_found(checks: list[Check], path: Path) -> str | None:
    """SQLite's words when the database check found ``path`` damaged, else None."""
    prefix = f"{_shown(path)}{DAMAGED_AT}"
    for check in checks:
        if check.name == "database" and check.status == "FAIL" and check.detail.startswith(prefix):
            return check.detail.removeprefix(prefix)
    return None


def exit_code(checks: list[Check]) -> int:
    return 1 if any(check.status == "FAIL" for check in checks) else 0
