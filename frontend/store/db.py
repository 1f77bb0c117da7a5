"""Connections and transactions: the only module that opens the database file.

One owner (docs/database.md §who-opens-the-file): every ``sqlite3.connect`` and every
other open of the database file or its -wal/-shm is here. A process holding a connection
must never open the file a second time outside SQLite: closing any descriptor of a file
drops every POSIX lock the process holds on it, so SQLite would go on writing without
its locks and another process could checkpoint and remove the WAL under it (the file is
then corrupt). The probes that must open the file (``write_fault``) run in a child
process, whose descriptors and locks are its own. tests/test_db_owner.py keeps it so.

Every connection runs in autocommit mode (``isolation_level=None``) so that ``atomic`` is
the one thing that begins and ends transactions. WAL and the busy timeout are set right
after connecting, outside any transaction (journal_mode cannot change inside one).

Failures are named here too: ``store_error`` turns a raw ``sqlite3.Error`` into the
StoreError that says what is wrong with the file (read-only, full, damaged), probing the
file system with ``write_fault`` rather than repeating SQLite's generic words.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from thatch.frontend.errors import (
    DatabaseBusyError,
    DatabaseDamagedError,
    DatabaseOpenError,
    DatabaseWriteError,
    StoreError,
)

__all__ = [
    "ThatchConnection",
    "atomic",
    "backup",
    "configure",
    "connect",
    "connect_read_only",
    "header_is_wal",
    "is_busy",
    "is_write_refused",
    "lock_fault",
    "note_damage",
    "read_leniently",
    "store_error",
    "write_fault",
]

T = TypeVar("T")
WriteFault = Literal[
    "read-only", "permission", "immutable", "directory", "virtual", "full", "other"
]

BUSY_TIMEOUT_MS = 5000
# Below this much free space a commit (WAL frames, then a checkpoint) is likely to fail.
FREE_SPACE_MIN_BYTES = 4 * 1024 * 1024

_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_DAMAGED_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_UNREADABLE_CODES = {sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY}
_WRITE_CODES = {
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_PERM,
}
_UNDECODABLE = "Could not decode to UTF-8"
_SQLITE_HEADER = b"SQLite format 3\x00"
# Run by ``write_fault`` in a child process: opens each path for writing (changing
# nothing) and prints the first refusal as JSON [path, errno, strerror].
_OPEN_PROBE = """
import json, os, sys
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_RDWR))
    except FileNotFoundError:
        continue
    except OSError as error:
        print(json.dumps([path, error.errno, error.strerror or str(error)]))
        break
"""
PROBE_TIMEOUT = 30.0


class ThatchConnection(sqlite3.Connection):
    """A connection that remembers the damage it met: once SQLite reported the file
    malformed to this process, ``atomic`` refuses every write with that error (writing
    into a damaged file spreads the damage, and the user was told to check it)."""

    damaged: DatabaseDamagedError | None = None


def note_damage(conn: sqlite3.Connection, error: BaseException, path: Path | str | None) -> None:
    """Remember on ``conn`` that ``error`` found its file damaged (else do nothing)."""
    if not isinstance(conn, ThatchConnection) or conn.damaged is not None:
        return
    if isinstance(error, DatabaseDamagedError):
        conn.damaged = error
    elif isinstance(error, sqlite3.DatabaseError) and is_damage(error):
        conn.damaged = DatabaseDamagedError(Path(path or "(in memory)"), _words(error))


def is_damage(error: BaseException) -> bool:
    """SQLite found the file malformed (not merely undecodable text)."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    return _code(error) in _DAMAGED_CODES or "malformed" in str(error)


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
        return _configured(_sqlite_connect(path))
    except sqlite3.Error as error:
        if _code(error) not in _UNREADABLE_CODES or not _readable_only_immutable(path):
            raise open_error(error, path) from None
    # A WAL database in a directory this process may not write (a read-only file system,
    # a directory of another user) cannot get its -shm file, so SQLite refuses even to
    # read it: SQLITE_CANTOPEN, or SQLITE_READONLY_DIRECTORY when the file itself is
    # writable. No -wal file means no writer has it open (one would have made it), so
    # reading it as immutable is exact; writes then fail as read-only, as they must.
    from urllib.parse import quote

    uri = f"file:{quote(os.fspath(path))}?mode=ro&immutable=1"
    try:
        return _configured(_sqlite_connect(uri, uri=True))
    except sqlite3.Error as error:
        raise open_error(error, path) from None


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
            and not _directory_writable(path.parent)
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
        _switch_to_wal(conn)
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise DatabaseBusyError() from None
        raise


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
            if _code(error) == sqlite3.SQLITE_READONLY:
                return
            if not is_busy(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


def _code(error: BaseException) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_read_only(error: BaseException) -> bool:
    return _code(error) == sqlite3.SQLITE_READONLY


def is_undecodable(error: BaseException) -> bool:
    """A TEXT value that is not UTF-8 (written as a BLOB cast, or by a broken client)."""
    return isinstance(error, sqlite3.OperationalError) and str(error).startswith(_UNDECODABLE)


def lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def read_leniently(conn: sqlite3.Connection, operation: Callable[[], T]) -> T:
    """``operation()``; when a stored text is not UTF-8, again with replacement characters.

    The connection keeps the lenient decoder from then on. It is not the default because
    a Python text factory makes every text column of a matrix load about 1.5x slower, and
    only damaged rows need it. Callers pass operations that fail before they write.
    Damage met on the way is noted on the connection (``note_damage``): later writes on it
    are refused.
    """
    try:
        return operation()
    except (sqlite3.DatabaseError, DatabaseDamagedError) as error:
        if is_damage(error) or isinstance(error, DatabaseDamagedError):
            note_damage(conn, error, _main_file(conn))
            raise
        if not is_undecodable(error) or conn.text_factory is lenient_text:
            raise
    conn.text_factory = lenient_text
    return read_leniently(conn, operation)  # the lenient decoder is kept: no third try


def is_write_refused(error: BaseException) -> bool:
    """The file system refused a write (read-only, full, I/O), the lock was not had, or
    the connection refuses writes to a file found damaged."""
    if isinstance(error, DatabaseBusyError | DatabaseWriteError | DatabaseDamagedError):
        return True
    return isinstance(error, sqlite3.OperationalError) and (
        is_busy(error) or _code(error) in _WRITE_CODES
    )


def store_error(error: sqlite3.Error, path: Path | str | None) -> StoreError:
    """The StoreError naming what is wrong with the database file behind ``error``."""
    where = Path(path) if path else Path("(in memory)")
    if _code(error) in _WRITE_CODES:
        fault = write_fault(where) if path else None
        if fault is None:
            return DatabaseWriteError(where, _words(error))
        return DatabaseWriteError(where, fault[1], fault[0])
    found = open_error(error, where)
    if isinstance(found, DatabaseOpenError):  # not an opening problem: say it plainly
        return StoreError(f"database {where}: {_words(error)}")
    return found


def open_error(error: sqlite3.Error, path: Path | str) -> StoreError:
    """The StoreError for a failure while opening (or initialising) ``path``."""
    path = Path(path)
    code = _code(error)
    if is_busy(error):
        return DatabaseBusyError()
    if code == sqlite3.SQLITE_NOTADB:  # maybe never was one: say so, and how to tell
        import shlex

        quoted = shlex.quote(os.fspath(path))
        check = f'if it held memories, run sqlite3 {quoted} "PRAGMA integrity_check"'
        return DatabaseOpenError(path, f"{_words(error)} ({check})")
    if code in _DAMAGED_CODES or "malformed" in str(error) or is_undecodable(error):
        return DatabaseDamagedError(path, _words(error))
    if code in _WRITE_CODES or code == sqlite3.SQLITE_CANTOPEN:
        fault = write_fault(path)
        if fault is not None:
            return DatabaseOpenError(path, fault[1], fault[0])
    return DatabaseOpenError(path, _words(error))


def _words(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def write_fault(path: Path) -> tuple[WriteFault, str] | None:
    """The kind and description of what stops writes to ``path``, or None.

    Opens the file and its -wal/-shm for writing (which changes nothing), so it reports
    what a write would meet: a read-only mount, permissions or an immutable attribute, an
    unwritable directory (SQLite creates <name>-wal and <name>-shm beside the file), a
    full disk. The opens run in a child process: this one may hold a connection to the
    file, and closing a descriptor here would drop its locks (module docstring).
    """
    directory = path.parent
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return "read-only", f"the file system holding {directory} is mounted read-only"
    except OSError:
        pass
    refused = _open_refusal([path, Path(f"{path}-wal"), Path(f"{path}-shm")])
    if refused is not None:
        return _refusal(*refused)
    if not _directory_writable(directory) and not Path(f"{path}-wal").exists():
        return "directory", (
            f"its directory {directory} is not writable "
            f"(SQLite creates {path.name}-wal and {path.name}-shm there)"
        )
    if _pseudo_file_system(directory):
        return "virtual", (
            f"{directory} is on a virtual file system (such as /proc or /sys) "
            "that cannot hold a database"
        )
    free = free_bytes(directory)
    if free is not None and free < FREE_SPACE_MIN_BYTES:
        return "full", f"the disk holding {directory} is full ({free // 1024} KiB free)"
    return None


def _open_refusal(paths: list[Path]) -> tuple[Path, OSError] | None:
    """The first of ``paths`` that a child process may not open for writing, with why."""
    import json
    import subprocess
    import sys

    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _OPEN_PROBE, *map(os.fspath, paths)],
            capture_output=True,
            text=True,
            errors="surrogateescape",
            timeout=PROBE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0 or not done.stdout.strip():
            return None
        where, number, words = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None  # the probe itself failed: report what the other checks find
    return Path(where), OSError(int(number), str(words))


def _refusal(path: Path, error: OSError) -> tuple[WriteFault, str]:
    if error.errno == errno.EROFS:
        return "read-only", f"the file system holding {path.parent} is mounted read-only"
    if error.errno == errno.EACCES:
        return "permission", f"permission denied: {path} is not writable by this user"
    if error.errno == errno.EPERM:
        return "immutable", f"{path} does not permit writes (is it immutable? see lsattr {path})"
    return "other", f"{path}: {error.strerror or error}"


def _directory_writable(directory: Path) -> bool:
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)


def _pseudo_file_system(directory: Path) -> bool:
    """/proc, /sys and the like report no blocks at all: not a full disk, no disk."""
    try:
        return os.statvfs(directory).f_blocks == 0
    except OSError:
        return False


def free_bytes(directory: Path) -> int | None:
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def is_busy(error: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED ("database is locked")."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) in _BUSY_CODES:
        return True
    message = str(error)
    return "database is locked" in message or "database is busy" in message


@contextmanager
def atomic(conn: sqlite3.Connection, immediate: bool = True) -> Iterator[sqlite3.Connection]:
    """One transaction: ``BEGIN [IMMEDIATE]`` outermost, ``SAVEPOINT`` when nested.

    Rolls back on any BaseException (KeyboardInterrupt included) and re-raises; a lock
    not obtained within the busy timeout becomes DatabaseBusyError. A write on a
    connection that met damage is refused with that DatabaseDamagedError (``note_damage``).
    """
    damaged = getattr(conn, "damaged", None)
    if immediate and damaged is not None:
        raise damaged
    if conn.in_transaction:
        name = f"thatch_{os.urandom(16).hex()}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
            conn.execute(f"RELEASE SAVEPOINT {name}")
            raise
        conn.execute(f"RELEASE SAVEPOINT {name}")
        return
    try:
        conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise DatabaseBusyError() from None
        raise
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as error:
        if conn.in_transaction:
            conn.rollback()
        if is_busy(error):
            raise DatabaseBusyError() from None
        if is_damage(error):
            note_damage(conn, error, _main_file(conn))
        raise


def _main_file(conn: sqlite3.Connection) -> str | None:
    try:
        for row in conn.execute("PRAGMA database_list"):
            if row[1] == "main":
                return str(row[2]) or None
    except sqlite3.Error:
        return None
    return None
