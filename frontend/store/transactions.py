"""Transactions: the one way the stores begin, commit and roll back (the database core).

``atomic`` is the only thing that begins and ends a transaction (every connection runs in
autocommit mode, ``db.connect``): ``BEGIN IMMEDIATE`` for a write, so that a busy file
fails before any work and never half-way, ``BEGIN`` for a read, a savepoint when nested.
A lock not had within the busy timeout becomes DatabaseBusyError; damage met is noted on
the connection, which then refuses every write, as it refuses every transaction once its
file is no longer at its path. ``Transactions`` is what the memory,
engine and chat stores share over one connection: its lock, its clock, and ``read`` and
``write`` (docs/architecture.md §the-database-core).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple, TypeVar

from thatch.frontend.errors import DatabaseBusyError, DatabaseDamagedError, DatabaseMovedError
from thatch.frontend.store.faults import error_words, is_busy, is_damage, is_undecodable
from thatch.frontend.timefmt import Clock, format_timestamp, utc_now

__all__ = [
    "ThatchConnection",
    "Transactions",
    "atomic",
    "lenient_text",
    "note_damage",
    "read_leniently",
    "refuse_moved",
]

T = TypeVar("T")


class SchemaLag(NamedTuple):
    """What a file lacks of the schema: its migrations not recorded, and those of the
    ``READ_IF_MADE`` tables that they would make and that the file does not have."""

    migrations: frozenset[str]
    tables: frozenset[str]


class ThatchConnection(sqlite3.Connection):
    """A connection that remembers the damage it met: once SQLite reported the file
    malformed to this process, ``atomic`` refuses every write with that error (writing
    into a damaged file spreads the damage, and the user was told to check it).

    ``opened`` is the file it opened: its path and (st_dev, st_ino). ``atomic`` refuses
    every transaction once that path leads elsewhere: a file deleted or replaced under a
    long-lived process (``thatch ui``, ``thatch mcp``) would otherwise take its writes
    into an unlinked inode, reported as saved and never seen again.

    ``schema_lag`` is what the file lacks of the schema, once read (``schema.schema_lag``).
    """

    damaged: DatabaseDamagedError | None = None
    opened: tuple[str, int, int] | None = None
    schema_lag: SchemaLag | None = None
    schema_lag_version: int | None = None  # the file's schema_version it was read at

    def note_opened(self, path: Path) -> None:
        """Remember which file ``path`` is now (an absolute path: the process may chdir)."""
        absolute = os.path.abspath(path)
        info = os.stat(absolute)
        self.opened = (absolute, info.st_dev, info.st_ino)


def refuse_moved(conn: sqlite3.Connection) -> None:
    """Raise DatabaseMovedError when the file ``conn`` opened is no longer at its path."""
    opened = getattr(conn, "opened", None)
    if opened is None:
        return
    path, device, inode = opened
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise DatabaseMovedError(path, "was deleted or moved") from None
    except OSError:
        return  # unreadable now: SQLite's own error says more than a guess would
    if (info.st_dev, info.st_ino) != (device, inode):
        raise DatabaseMovedError(path, "was replaced by another file")


def note_damage(conn: sqlite3.Connection, error: BaseException, path: Path | str | None) -> None:
    """Remember on ``conn`` that ``error`` found its file damaged (else do nothing)."""
    if not isinstance(conn, ThatchConnection) or conn.damaged is not None:
        return
    if isinstance(error, DatabaseDamagedError):
        conn.damaged = error
    elif isinstance(error, sqlite3.DatabaseError) and is_damage(error):
        conn.damaged = DatabaseDamagedError(Path(path or "(in memory)"), error_words(error))


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
    refuse_moved(conn)
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


class Transactions:
    """One connection's transactions, shared by every store over it (memories, engines, chat).

    ``lock`` serialises the threads sharing the connection (a server's workers): ``read``
    and ``write`` hold it for the whole transaction. ``clock`` stamps the rows (``now``).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Clock = utc_now,
        lock: threading.RLock | None = None,
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.lock = lock if lock is not None else threading.RLock()

    def now(self) -> str:
        return format_timestamp(self.clock())

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot, no write lock."""
        with self.lock, atomic(self.conn, immediate=False) as conn:
            yield conn

    @contextmanager
    def write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``durable=False`` skips its fsync (statistics only).

        In WAL mode ``synchronous = NORMAL`` still never corrupts the file; a power cut may
        lose the last such commits, harmless for statistics and ~1 ms off every recall.
        Rows people wrote are always committed with the connection's own (FULL) setting.
        """
        with self.lock:
            if durable:
                with atomic(self.conn) as conn:
                    yield conn
                return
            (level,) = self.conn.execute("PRAGMA synchronous").fetchone()
            self.conn.execute("PRAGMA synchronous = NORMAL")
            try:
                with atomic(self.conn) as conn:
                    yield conn
            finally:
                self.conn.execute(f"PRAGMA synchronous = {int(level)}")
