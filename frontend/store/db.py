"""Opening the database: the only module that opens the file (the database core's door).

One owner (docs/architecture.md §the-database-core, docs/database.md §who-opens-the-file):
every ``sqlite3.connect`` and every other open of the database file or its -wal/-shm is
here. A long-lived process opens it once and never a second time outside SQLite: closing
any descriptor of a file drops every POSIX lock the process holds on it, so SQLite would
go on writing without its locks and another process could checkpoint and remove the WAL
under it (the file is then corrupt). The probes that must open the file (``write_fault``)
run in a child process, whose descriptors and locks are its own. tests/test_db_owner.py
keeps it so.

Every connection runs in autocommit mode (``isolation_level=None``) so that ``atomic``
(``transactions``) is the one thing that begins and ends transactions. WAL and the busy
timeout are set right after connecting, outside any transaction (journal_mode cannot
change inside one).

The rest of the core lives beside it: ``transactions`` (``atomic``, the stores' shared
``Transactions``), ``faults`` (SQLite's errors named, writes probed), ``changelog`` (what
changed in ``entries``, for caches), ``schema`` and ``migrations/``. Code outside the store
package reaches the core through this module: the names it re-exports in ``__all__``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path

from thatch.frontend.errors import DatabaseBusyError, DatabaseOpenError
from thatch.frontend.store.faults import (
    WriteFault,
    directory_writable,
    is_busy,
    is_read_only,
    is_unreadable,
    is_write_refused,
    open_error,
    store_error,
    write_fault,
)
from thatch.frontend.store.transactions import (
    ThatchConnection,
    atomic,
    note_damage,
    read_leniently,
    refuse_moved,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "HOOK_BUSY_TIMEOUT_MS",
    "ThatchConnection",
    "atomic",
    "backup",
    "configure",
    "connect",
    "connect_read_only",
    "foreign_tables",
    "header_is_wal",
    "is_busy",
    "is_read_only",
    "is_write_refused",
    "lock_fault",
    "note_damage",
    "open_error",
    "read_leniently",
    "refuse_moved",
    "store_error",
    "write_fault",
]

BUSY_TIMEOUT_MS = 5000
FOREIGN_REASON = "not a thatch database"
# A hook's own writes (chat heartbeats, branch sync) wait at most this for another writer:
# each is done again by the next hook, and the host's turn waits on the hook. At the full
# BUSY_TIMEOUT_MS a reminder with two such writes took 10.5 s behind a long transaction.
HOOK_BUSY_TIMEOUT_MS = 1000

_SQLITE_HEADER = b"SQLite format 3\x00"


def _sqlite_connect(target: str | Path, *, uri: bool = False) -> ThatchConnection:
    conn = sqlite3.connect(
        target,
        uri=uri,
        isolation_level=None,
        check_same_thread=False,
        factory=ThatchConnection,
    )
    assert isinstance(conn, ThatchConnection)
    return conn


def connect(path: Path | str) -> sqlite3.Connection:
    """A configured connection to ``path``; the parent directory is created 0700 if missing."""
    path = Path(path)
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise DatabaseOpenError(path, error.strerror or str(error)) from None
    if path.is_dir():
        raise DatabaseOpenError(path, "is a directory")
    try:
        conn = _configured(_sqlite_connect(path))
    except sqlite3.Error as error:
        if not is_unreadable(error) or not _readable_only_immutable(path):
            raise open_error(error, path) from None
    else:
        _note_opened(conn, path)
        return conn
    # A WAL database in a directory this process may not write (a read-only file system,
    # a directory of another user) cannot get its -shm file, so SQLite refuses even to
    # read it: SQLITE_CANTOPEN, or SQLITE_READONLY_DIRECTORY when the file itself is
    # writable. No -wal file means no writer has it open (one would have made it), so
    # reading it as immutable is exact; writes then fail as read-only, as they must.
    from urllib.parse import quote

    uri = f"file:{quote(os.fspath(path))}?mode=ro&immutable=1"
    try:
        conn = _configured(_sqlite_connect(uri, uri=True))
    except sqlite3.Error as error:
        raise open_error(error, path) from None
    _note_opened(conn, path)
    return conn


def _note_opened(conn: ThatchConnection, path: Path) -> None:
    # ":memory:" and "" have no file to watch; a file that can't be stat'ed is not watched.
    if os.fspath(path) not in ("", ":memory:"):
        with contextlib.suppress(OSError):
            conn.note_opened(path)


def _configured(conn: ThatchConnection) -> ThatchConnection:
    """``conn`` configured, and shown to read: the first read of a WAL file is where SQLite
    finds it cannot make the -shm (the WAL switch takes that refusal for a read-only file)."""
    try:
        configure(conn)
        conn.execute("PRAGMA schema_version").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _readable_only_immutable(path: Path) -> bool:
    try:
        return (
            path.is_file()
            and path.stat().st_size > 0
            and not Path(f"{path}-wal").exists()
            and not directory_writable(path.parent)
        )
    except OSError:
        return False


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection for a look that changes nothing (``thatch doctor``).

    When no -wal file exists (no process has the file open) it is read ``immutable``, so
    SQLite leaves no -wal/-shm files behind. Never migrated, never switched to WAL.
    """
    from urllib.parse import quote

    uri = f"file:{quote(os.fspath(path))}?mode=ro"
    if not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    conn = _sqlite_connect(uri, uri=True)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def header_is_wal(path: Path) -> bool:
    """WAL mode as the file's header records it (format versions, bytes 18 and 19, are 2).

    Reads the file outside SQLite: only for a process that holds no connection to it
    (``thatch doctor`` reads it before connecting). An immutable read-only connection
    reports ``delete`` for a WAL file, so the header is the one place that says.
    """
    with path.open("rb") as handle:
        header = handle.read(20)
    return header[:16] == _SQLITE_HEADER and header[18] == 2 and header[19] == 2


def lock_fault(path: Path) -> tuple[WriteFault, str] | None:
    """Take the write lock as a write would, and give it back: nothing is written.

    Busy is fine (another session is writing right now); anything else is a fault the
    file-system probe did not see (a lock-less network mount, a file SQLite refuses).
    A second SQLite connection is safe beside a first in the same process: SQLite keeps
    one descriptor set per file and defers closing it while a lock is held.
    """
    from urllib.parse import quote

    try:
        conn = _sqlite_connect(f"file:{quote(os.fspath(path))}?mode=rw", uri=True)
    except sqlite3.Error as error:
        return "other", str(error)
    try:
        conn.execute("PRAGMA busy_timeout = 200")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
    except sqlite3.Error as error:
        return None if is_busy(error) else ("other", str(error))
    finally:
        conn.close()
    return None


def backup(source: Path, target: Path) -> None:
    """A consistent copy of ``source`` (WAL included) written to a new file ``target``."""
    import contextlib

    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def configure(conn: sqlite3.Connection) -> None:
    """busy_timeout first (so the WAL switch itself waits for locks), then WAL, then FKs.

    Only a database not yet in WAL mode is switched (a write): opening a current one writes
    nothing, so a read-only file still opens for reading.
    """
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _refuse_foreign(conn)
        _switch_to_wal(conn)
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise DatabaseBusyError() from None
        raise


_THATCH_TABLES = frozenset(
    {"entries", "stores", "dedup_pairs", "predictions", "behaviors", "repo_paths"}
)
_THATCH_PREFIXES = ("_thatch_", "thatch_", "chat_", "team_", "prediction_", "behavior_")


def foreign_tables(conn: sqlite3.Connection) -> str | None:
    """The tables of another program's database, shown ("users, orders and 3 more"), or
    None when the file is thatch's or empty."""
    tables = sorted(
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    )
    # Names only thatch gives its tables, in every release (the earlier TypeScript one's
    # included): one of them present makes the file thatch's, however old or partial.
    if not tables or any(
        name in _THATCH_TABLES or name.startswith(_THATCH_PREFIXES) for name in tables
    ):
        return None
    return ", ".join(tables[:3]) + (f" and {len(tables) - 3} more" if len(tables) > 3 else "")


def _refuse_foreign(conn: sqlite3.Connection) -> None:
    """A file with tables, none of them thatch's, is another program's database (a
    mistyped THATCH_DB_PATH): the WAL switch and the migrations would write into it."""
    shown = foreign_tables(conn)
    if shown is None:
        return
    path = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
    raise DatabaseOpenError(path, f"{FOREIGN_REASON} (its tables: {shown}); nothing was written")


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """WAL mode, switched only when not yet in it; a busy switch is retried.

    Several processes opening a new file at once all try the switch, and SQLite answers
    a loser SQLITE_BUSY at once (without the busy handler) when waiting could deadlock:
    retry within the busy timeout, until this or another process has switched it.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() == "wal":
                return
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as error:
            if is_read_only(error):
                return
            if not is_busy(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.01)
