"""The memory store (docs/database.md §queries): memories in SQLite, searched by vectors handed in.

The store never embeds text. It stores BLOBs, compares the vectors the tool layer gives
it, and keeps one decoded matrix per store between calls (``matrix_cache``). Every write is
one short ``BEGIN IMMEDIATE`` transaction with nothing but SQLite inside it, through the
database core's ``Transactions`` (docs/architecture.md §the-database-core), which the
engine and chat stores it hands out (``engines``, ``chat``) share.
"""

from __future__ import annotations

import builtins
import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from thatch.frontend.errors import DatabaseBusyError, InvalidInputError
from thatch.frontend.store import backfill, db, lexical
from thatch.frontend.store.anchor_queries import Anchor, AnchorQueries
from thatch.frontend.store.changelog import LogPosition, log_position
from thatch.frontend.store.duplicate_queries import DuplicateQueries
from thatch.frontend.store.matrix import StoreMatrix, load_matrix
from thatch.frontend.store.matrix_cache import MatrixCache, SnapshotPlace, WrittenRow
from thatch.frontend.store.memory import (
    VERDICTS,
    DuplicatePair,
    Match,
    Memory,
    RememberOutcome,
)
from thatch.frontend.store.memory_search import SearchQueries
from thatch.frontend.store.migrations.flat_reads import LABELLED_ROWS
from thatch.frontend.store.rows import (
    COLUMNS,
    locked,
    memory_from_row,
    store_name,
)
from thatch.frontend.store.schema import init_schema, run_backfills
from thatch.frontend.store.slugs import slugify
from thatch.frontend.store.team_links import refuse_team_secrets
from thatch.frontend.store.transactions import Transactions
from thatch.frontend.store.upkeep import UpkeepQueries
from thatch.frontend.store.vector_snapshot import DatabaseIdentity
from thatch.frontend.store.vectors import encode
from thatch.frontend.timefmt import Clock, utc_now

if TYPE_CHECKING:  # imported where used: a hook opening the Store needs neither
    from thatch.frontend.store.chat_store import ChatStore
    from thatch.frontend.store.engine_store import Engine, EngineStore

__all__ = ["DuplicatePair", "Match", "Memory", "RememberOutcome", "Store"]


INSERT_ENTRY = (
    "INSERT INTO entries (slug, store, label, content, embedding, model, branch, confidence, "
    "archived, created_at, updated_at, recall_count, last_recalled_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL)"
)


class OwnWrite:
    """One write transaction's connection and the rows it wrote (see ``Store._own_write``)."""

    def __init__(self, conn: sqlite3.Connection, before: LogPosition | None) -> None:
        self.conn = conn
        self.before = before
        self.rows: list[WrittenRow] = []

    def wrote(self, slug: str, blob: bytes | None, archived: object, branch: str | None) -> None:
        """``slug`` now holds ``blob`` (None: deleted or pending), ``archived``, ``branch``."""
        self.rows.append((slug, blob, archived, branch))


class Store(SearchQueries, DuplicateQueries, UpkeepQueries, AnchorQueries):
    """All memory queries over one connection (see docs/database.md §queries).

    Writes, listing and the plumbing here; ranking in ``SearchQueries`` (memory_search.py),
    duplicate candidates in ``DuplicateQueries`` (duplicate_queries.py), hygiene and
    re-embedding counts in ``UpkeepQueries`` (upkeep.py), code anchors in ``AnchorQueries``
    (anchor_queries.py).
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        clock: Clock = utc_now,
        snapshot_dir: Path | None = None,
        write_snapshots: bool = True,
        build_indexes: bool = True,
        fill_now: bool = True,
    ) -> None:
        """``snapshot_dir``: where to share vector snapshots with other processes (none: off);
        ``write_snapshots=False`` only maps them (a hook must not wait for a write);
        ``build_indexes=False`` leaves migrations that index every memory, and every
        pending backfill, to a later open (a hook must not wait for those either: schema
        ``BUILDS_INDEXES``); ``fill_now=False`` leaves pending backfills to ``fill_backlog``
        (``thatch mcp`` runs it on a thread, so that its first answer does not wait)."""
        self.conn = conn
        self.tx = Transactions(conn, clock=clock)
        self._writes_snapshots = write_snapshots
        self._lock = self.tx.lock
        self._snapshot_writer: threading.Thread | None = None
        self._owns_conn = False
        db.configure(conn)
        self._tracked = True  # the change counters and log of m004/m007 exist
        try:
            init_schema(conn, self._now(), build_indexes=build_indexes, fill_now=fill_now)
        except sqlite3.OperationalError as error:
            if not db.is_read_only(error):
                raise
            # A file this process may not write, left unmigrated by the earlier release:
            # read it in its own schema, without the change log (so without caching).
            self._tracked = False
        # The lexical index exists once m009 ran (not in a file this process may not migrate,
        # nor with a SQLite that lacks FTS5): recall then ranks by vectors alone. So it does
        # while m009's or m017's backfill is still indexing the memories that predate it.
        self._lexical = lexical.index_present(conn)
        self._lexical_filling = self._lexical and bool(lexical.FILLS & backfill.pending(conn))
        # Column ``camel`` once m017 ran (a hook's open may leave it to a later one).
        self._lexical_camel = self._lexical and lexical.has_camel(conn)
        self.path = self._file_path()
        identity = DatabaseIdentity.of(self.path) if snapshot_dir and self.path else None
        self._cache = MatrixCache(
            SnapshotPlace(snapshot_dir, identity) if snapshot_dir and identity else None
        )

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        clock: Clock = utc_now,
        snapshot_dir: Path | None = None,
        write_snapshots: bool = True,
        build_indexes: bool = True,
        fill_now: bool = True,
    ) -> Store:
        """Connect to ``path`` (created if missing), initialise the schema, own the connection."""
        conn = db.connect(path)
        try:
            store = cls(
                conn,
                clock=clock,
                snapshot_dir=snapshot_dir,
                write_snapshots=write_snapshots,
                build_indexes=build_indexes,
                fill_now=fill_now,
            )
        except sqlite3.DatabaseError as error:
            conn.close()
            if db.is_busy(error):
                raise DatabaseBusyError() from None
            raise db.open_error(error, path) from None
        except BaseException:
            conn.close()
            raise
        store._owns_conn = True
        return store

    def close(self) -> None:
        """Close the connection if ``open`` made it; a passed-in connection stays the caller's."""
        if self._snapshot_writer is not None:
            self._snapshot_writer.join()  # a half-written snapshot is only a temp file, but
            self._snapshot_writer = None  # a finished one saves the next process its load
        self._cache.clear()
        if self._owns_conn:
            self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def engines(self, engine: Engine) -> EngineStore:
        """The ``engine``'s store over this connection, sharing its lock and clock."""
        from thatch.frontend.store.engine_store import EngineStore

        return EngineStore(self.conn, engine, clock=self.clock, lock=self.lock)

    def chat(self) -> ChatStore:
        """The chat store over this connection, sharing its lock and clock."""
        from thatch.frontend.store.chat_store import ChatStore

        return ChatStore(self.conn, self.clock, self.lock)

    def fill_backlog(self, stop: threading.Event) -> None:
        """Run the pending backfills (schema ``run_backfills``) beside this store's other
        users: each transaction under the store's lock, the pauses between without it.
        Returns when they are done, or soon after ``stop`` is set (for a thread)."""
        run_backfills(self.conn, guard=lambda: self._lock, sleep=stop.wait)

    # -- plumbing ------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """The lock serialising this connection's users (the engine and chat stores share it)."""
        return self.tx.lock

    @property
    def clock(self) -> Clock:
        return self.tx.clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self.tx.clock = clock

    def _now(self) -> str:
        return self.tx.now()

    def _file_path(self) -> Path | None:
        for row in self.conn.execute("PRAGMA database_list"):
            if row[1] == "main":
                return Path(row[2]) if row[2] else None
        return None

    @contextmanager
    def _own_write(self, store: str) -> Iterator[OwnWrite]:
        """``tx.write`` for changes to entries of ``store`` that this process's cache may take
        in directly once committed (``MatrixCache.apply_own``): the recall that follows a
        remember then reads no change log. Rows the block reports with ``wrote`` are put
        into the cached matrix after the commit; without a cached matrix, inside a caller's
        transaction (which may still roll back) or untracked, it is a plain ``tx.write``."""
        direct = (
            self._tracked
            and isinstance(store, str)  # forget takes names unchecked: SQLite refuses others
            and not self.conn.in_transaction
            and self._cache.holds(store)
        )
        with self.tx.write() as conn:
            own = OwnWrite(conn, log_position(conn, store) if direct else None)
            yield own
            after = log_position(conn, store) if own.rows and own.before is not None else None
        if after is not None and own.before is not None:
            self._cache.apply_own(store, own.before, after, own.rows)

    def _matrix(self, store: str) -> StoreMatrix:
        """The store's ranking matrix; call inside a read transaction (one snapshot).

        Brought up to date from the change log (schema ``m007``): recall stamps and writes
        to other stores cost nothing, a change to a few rows (from any process) re-reads
        those rows only.
        """
        if not self._tracked:
            return self._load_matrix(store)
        return self._cache.get(self.conn, store, self._load_matrix)

    def _load_matrix(self, store: str) -> StoreMatrix:
        return load_matrix(self.conn, store)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent snapshot for the cache key and the rows."""
        # Inside a caller's transaction the rows may hold uncommitted writes that could be
        # rolled back: use them, but never keep them in the cache.
        nested = self.conn.in_transaction
        if nested:
            self._cache.clear()
        try:
            with self.tx.read() as conn:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
                yield conn
            if not nested:
                self._write_snapshots_later()
        finally:
            if nested:
                self._cache.clear()

    def _write_snapshots_later(self) -> None:
        """Write queued snapshots in a thread: off the answer's path.

        Writing 100k vectors takes 0.1–0.3 s; the call that loaded them returns first, and
        only a call that needs a matrix meanwhile waits (on the cache's guard, not our lock).
        """
        if not self._writes_snapshots or not self._cache.snapshots_queued():
            return
        if self._snapshot_writer is not None and self._snapshot_writer.is_alive():
            return  # still writing: the queue waits for a later read
        self._snapshot_writer = threading.Thread(
            target=self._write_snapshots, name="thatch-snapshot-writer"
        )
        self._snapshot_writer.start()

    def _write_snapshots(self) -> None:
        # A cache never fails a call nor prints: on any error the next process just loads.
        with contextlib.suppress(Exception):
            self._cache.write_snapshots()

    # -- stores --------------------------------------------------------------------------

    @locked
    def store_names(self) -> list[str]:
        rows = self.conn.execute(
            "SELECT name FROM stores UNION SELECT DISTINCT store FROM entries ORDER BY 1"
        )
        return [row[0] for row in rows]

    @locked
    def store_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.store_names(), 0)
        for name, count in self.conn.execute("SELECT store, count(*) FROM entries GROUP BY store"):
            counts[name] = count
        return counts

    @locked
    def store_exists(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM stores WHERE name = ?) "
            "OR EXISTS (SELECT 1 FROM entries WHERE store = ?)",
            (name, name),
        ).fetchone()
        return bool(row[0])

    # -- writes --------------------------------------------------------------------------

    @locked
    def remember(
        self,
        store: str,
        label: str,
        stored_text: str,
        vector: Any | None,
        model: str | None,
        *,
        branch: str | None = None,
        confidence: int | None = None,
        overwrite: bool = False,
        archived: bool | None = None,
        anchors: Sequence[Anchor] = (),
        related: Sequence[str] = (),
    ) -> RememberOutcome:
        """Save one memory (docs/database.md §memory-operations remember); a None vector saves it
        pending (NULL embedding). ``anchors`` replace the memory's code anchors in the same
        transaction; without them, a text that changed drops the old ones (m014's triggers).
        ``related`` (slugs of the same store it depends on) replace its links likewise
        (m016); the caller checks they exist, one forgotten meanwhile is no link."""
        store = store_name(store)
        if not isinstance(label, str) or not isinstance(stored_text, str):
            raise InvalidInputError("label and stored text must be strings")
        blob = None if vector is None else encode(vector)
        model = None if blob is None else model
        slug = slugify(label)
        now = self._now()
        with self._own_write(store) as own:
            conn = own.conn
            refuse_team_secrets(conn, store, label, stored_text)
            conn.execute("INSERT OR IGNORE INTO stores (name) VALUES (?)", (store,))
            flag = int(bool(archived))
            row = (slug, store, label, stored_text, blob, model, branch, confidence, flag, now, now)
            if not overwrite:
                inserted = conn.execute(
                    f"{INSERT_ENTRY} ON CONFLICT (slug, store) DO NOTHING", row
                ).rowcount
                if inserted != 1:
                    return RememberOutcome.EXISTS
                own.wrote(slug, blob, flag, branch)
            else:
                if self._overwrite(own, row, archived, branch, confidence) is not None:
                    return RememberOutcome.ARCHIVED_GUARD
            if anchors:
                self._write_anchors(conn, store, slug, anchors)
            if related:
                self._write_links(conn, store, slug, related)
        if blob is not None:
            self._check_written(store, slug)
        return RememberOutcome.SAVED

    def _overwrite(
        self,
        own: OwnWrite,
        row: tuple[Any, ...],
        archived: bool | None,
        branch: str | None,
        confidence: int | None,
    ) -> RememberOutcome | None:
        """The overwrite half of ``remember`` inside its transaction; the guard's refusal,
        or None when written."""
        conn = own.conn
        slug, store, label, stored_text, blob, model, _, _, flag, now, _ = row
        old = conn.execute(
            "SELECT archived, branch, confidence FROM entries WHERE slug = ? AND store = ?",
            (slug, store),
        ).fetchone()
        if old is None:
            conn.execute(INSERT_ENTRY, row)
            own.wrote(slug, blob, flag, branch)
        else:
            if old[0] and archived is None:
                return RememberOutcome.ARCHIVED_GUARD
            own.wrote(
                slug,
                blob,
                old[0] if archived is None else int(archived),
                old[1] if branch is None else branch,
            )
            conn.execute(
                "UPDATE entries SET label = ?, content = ?, embedding = ?, model = ?, "
                "updated_at = ?, branch = ?, confidence = ?, archived = ? "
                "WHERE slug = ? AND store = ?",
                (
                    label,
                    stored_text,
                    blob,
                    model,
                    now,
                    old[1] if branch is None else branch,
                    old[2] if confidence is None else confidence,
                    old[0] if archived is None else int(archived),
                    slug,
                    store,
                ),
            )
        conn.execute(
            "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
            (store, slug, slug),
        )
        return None

    @locked
    def forget(self, store: str, label: str) -> Memory | None:
        """Delete the memory and its dedup verdicts; the deleted row, or None."""
        slug = slugify(label)
        with self._own_write(store) as own:
            conn = own.conn
            row = conn.execute(
                f"SELECT {COLUMNS} FROM entries WHERE slug = ? AND store = ?", (slug, store)
            ).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM entries WHERE slug = ? AND store = ?", (slug, store))
            own.wrote(slug, None, 0, None)
            conn.execute(
                "DELETE FROM dedup_pairs WHERE store = ? AND (slug_a = ? OR slug_b = ?)",
                (store, slug, slug),
            )
        return memory_from_row(row)

    @locked
    def mark_checked(self, store: str, slug_a: str, slug_b: str, status: str) -> None:
        """Record a verdict for the (sorted) slug pair; it hides the pair from duplicates."""
        store = store_name(store)
        if status not in VERDICTS:
            raise InvalidInputError(
                f"unknown verdict {status!r}; expected one of: {', '.join(VERDICTS)}"
            )
        first, second = sorted((slug_a, slug_b))
        with self.tx.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO dedup_pairs (store, slug_a, slug_b, status, checked_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (store, first, second, status, self._now()),
            )

    # -- reads ---------------------------------------------------------------------------

    @locked
    def list(self, store: str) -> list[Memory]:
        """Every memory of the store, archived included, by label (BINARY collation)."""
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE store = ? ORDER BY label, slug", (store,)
        )
        return [memory_from_row(row) for row in rows]

    @locked
    def list_first(self, store: str, limit: int) -> tuple[builtins.list[Memory], int]:
        """The first ``limit`` memories of ``list``'s order, and how many the store holds.
        The always-true condition lets SQLite walk m022's index: 6 ms at 100k memories
        (the count), where reading and sorting the whole store took 1.5 s."""
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE store = ? AND {LABELLED_ROWS} "
            "ORDER BY label, slug LIMIT ?",
            (store, max(0, int(limit))),
        )
        memories = [memory_from_row(row) for row in rows]
        if len(memories) < limit:  # the condition holds for every row: these are all
            return memories, len(memories)
        (total,) = self.conn.execute(
            "SELECT count(*) FROM entries WHERE store = ?", (store,)
        ).fetchone()
        return memories, int(total)

    @locked
    def show(self, store: str, label: str) -> Memory | None:
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE slug = ? AND store = ?", (slugify(label), store)
        ).fetchone()
        return None if row is None else memory_from_row(row)
