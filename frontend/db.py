"""Connections and transactions: the only place that talks to sqlite3 about either.

Every connection runs in autocommit mode (``isolation_level=None``) so that ``atomic`` is
the one thing that begins and ends transactions. WAL and the busy timeout are set right
after connecting, outside any transaction (journal_mode cannot change inside one).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from thatch.frontend.db_path import DB_FILE_NAME, default_db_path
from thatch.frontend.errors import DatabaseBusyError, DatabaseOpenError

__all__ = ["DB_FILE_NAME", "atomic", "configure", "connect", "default_db_path", "is_busy"]

BUSY_TIMEOUT_MS = 5000

_BUSY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


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
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as error:
        raise DatabaseOpenError(path, str(error)) from None
    try:
        configure(conn)
    except DatabaseBusyError:
        conn.close()
        raise
    except sqlite3.Error as error:
        conn.close()
        raise DatabaseOpenError(path, str(error)) from None
    return conn


def configure(conn: sqlite3.Connection) -> None:
    """busy_timeout first (so the WAL switch itself waits for locks), then WAL, then FKs."""
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL").fetchone()
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.OperationalError as error:
        if is_busy(error):
            raise DatabaseBusyError() from None
        raise


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
    not obtained within the busy timeout becomes DatabaseBusyError.
    """
    if conn.in_transaction:
        name = f"thatch_{uuid.uuid4().hex}"
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
        raise
