"""What is wrong with the database file: SQLite's errors named, and writes probed.

Part of the database core (docs/architecture.md §the-database-core): ``store_error`` and
``open_error`` turn a raw ``sqlite3.Error`` into the StoreError that says what is wrong
with the file (busy, read-only, full, damaged), probing the file system with
``write_fault`` rather than repeating SQLite's generic words. Nothing here opens the
database file in this process: ``write_fault``'s opens run in a child process, whose
descriptors and locks are its own (``db``'s docstring says why that matters).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Literal

from thatch.frontend.errors import (
    DatabaseBusyError,
    DatabaseDamagedError,
    DatabaseOpenError,
    DatabaseWriteError,
    StoreError,
)

__all__ = [
    "FREE_SPACE_MIN_BYTES",
    "PROBE_TIMEOUT",
    "WriteFault",
    "directory_writable",
    "error_words",
    "free_bytes",
    "is_busy",
    "is_damage",
    "is_read_only",
    "is_undecodable",
    "is_unreadable",
    "is_write_refused",
    "open_error",
    "store_error",
    "write_fault",
]

WriteFault = Literal[
    "read-only", "permission", "immutable", "directory", "virtual", "full", "other"
]

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


def is_damage(error: BaseException) -> bool:
    """SQLite found the file malformed (not merely undecodable text)."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    return _code(error) in _DAMAGED_CODES or "malformed" in str(error)


def _code(error: BaseException) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def is_read_only(error: BaseException) -> bool:
    return _code(error) == sqlite3.SQLITE_READONLY


def is_unreadable(error: BaseException) -> bool:
    """SQLite could not open the file, or only for reading (CANTOPEN, READONLY)."""
    return _code(error) in _UNREADABLE_CODES


def is_undecodable(error: BaseException) -> bool:
    """A TEXT value that is not UTF-8 (written as a BLOB cast, or by a broken client)."""
    return isinstance(error, sqlite3.OperationalError) and str(error).startswith(_UNDECODABLE)


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
            return DatabaseWriteError(where, error_words(error))
        return DatabaseWriteError(where, fault[1], fault[0])
    if path and _schema_lag(error):
        # A read-only file no thatch could upgrade lacks a later migration's table or
        # column: what failed is the upgrade's write, not the statement's text. Only for a
        # file refused as a whole: a full disk or an unwritable directory is as likely to
        # meet a table lost from a migrated file, whose error must stay SQLite's.
        fault = write_fault(where)
        if fault is not None and fault[0] in _UPGRADE_STOPPERS:
            return DatabaseWriteError(where, fault[1], fault[0])
    found = open_error(error, where)
    if isinstance(found, DatabaseOpenError):  # not an opening problem: say it plainly
        return StoreError(f"database {where}: {error_words(error)}")
    return found


_UPGRADE_STOPPERS: frozenset[WriteFault] = frozenset({"read-only", "permission", "immutable"})


def _schema_lag(error: sqlite3.Error) -> bool:
    words = str(error)
    return words.startswith(("no such table: ", "no such column: "))


def open_error(error: sqlite3.Error, path: Path | str) -> StoreError:
    """The StoreError for a failure while opening (or initialising) ``path``."""
    path = Path(path)
    code = _code(error)
    if is_busy(error):
        return DatabaseBusyError()
    if code == sqlite3.SQLITE_NOTADB:  # maybe never was one: say so, and how to tell
        from thatch.common.shell_words import shell_quote

        quoted = shell_quote(os.fspath(path))
        check = f'if it held memories, run sqlite3 {quoted} "PRAGMA integrity_check"'
        return DatabaseOpenError(path, f"{error_words(error)} ({check})")
    if code in _DAMAGED_CODES or "malformed" in str(error) or is_undecodable(error):
        return DatabaseDamagedError(path, error_words(error))
    if code in _WRITE_CODES or code == sqlite3.SQLITE_CANTOPEN:
        fault = write_fault(path)
        if fault is not None:
            return DatabaseOpenError(path, fault[1], fault[0])
    return DatabaseOpenError(path, error_words(error))


def error_words(error: BaseException) -> str:
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
    if not directory_writable(directory) and not Path(f"{path}-wal").exists():
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


def directory_writable(directory: Path) -> bool:
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
