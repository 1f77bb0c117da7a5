"""Errors of the store layer, each with a message meant for people.

    StoreError                  base: ``str(error)`` is a complete one-line message
     ├── DatabaseOpenError      "cannot open database at <path>: <reason>"
     ├── DatabaseBusyError      another process held the write lock past the busy timeout
     ├── DatabaseWriteError     "cannot write database <path>: <reason>" (read-only, full)
     ├── DatabaseDamagedError   "database <path> is damaged (<sqlite's words>): run …"
     ├── DatabaseMovedError     the file this process opened is no longer at its path
     └── InvalidInputError      a value handed to the store cannot be stored or compared
          (also a ValueError)   (empty/2-D/non-finite vector, unknown verdict status, ...)

The CLI turns every one of them into ``click.ClickException``; the MCP tool layer into an
``isError`` result. None of them carries a traceback to the user. ``db.store_error`` maps
a raw ``sqlite3.Error`` onto the right one.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BUSY_MESSAGE",
    "DatabaseBusyError",
    "DatabaseDamagedError",
    "DatabaseMovedError",
    "DatabaseOpenError",
    "DatabaseWriteError",
    "InvalidInputError",
    "StoreError",
    "fault_fix",
    "foreign_fix",
    "not_a_database_fix",
]

BUSY_MESSAGE = "database is busy (another thatch process holds the write lock); try again"


class StoreError(Exception):
    """Base class of every error the store layer raises on purpose.

    ``fix`` is the action that resolves it, for the CLI's ``Fix:`` line (None: no action
    of the user's helps, e.g. a malformed value the caller must correct).
    """

    fix: str | None = None


class _FileError(StoreError):
    """An error about the database file at ``path``, for ``reason``."""

    def __init__(self, path: Path | str, reason: str, kind: str | None = None) -> None:
        self.path = Path(path)
        self.reason = reason
        self.kind = kind  # db.write_fault's kind of refusal, when it found one
        super().__init__(self.describe(str(path), reason))

    @staticmethod
    def describe(path: str, reason: str) -> str:
        raise NotImplementedError


def fault_fix(kind: str | None, path: Path) -> str | None:
    """The one action for a kind of refusal ``db.write_fault`` names (None: no single
    action, the caller says what to check). The doctor's database check uses it too."""
    from thatch.common.shell_words import shell_quote

    return {
        "full": "free space on that disk, or set THATCH_DB_PATH to a disk with room",
        "read-only": "remount it read-write, or set THATCH_DB_PATH to a writable place",
        "virtual": (
            "set THATCH_DB_PATH to a file on a disk (unset, it is ~/.config/thatch/thatch.db)"
        ),
        "immutable": f"chattr -i {shell_quote(str(path))}",
    }.get(kind or "")


def _file_fix(error: _FileError) -> str:
    return fault_fix(error.kind, error.path) or (
        f"make {error.path} and its directory usable by this user, "
        "or set THATCH_DB_PATH to a file in a directory you can write"
    )


class DatabaseOpenError(_FileError):
    """The database file cannot be created, opened or initialised."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"cannot open database at {path}: {reason}"

    @property
    def fix(self) -> str:  # type: ignore[override]  # computed from the kind
        if self.reason == "is a directory":
            return f"set THATCH_DB_PATH to a file, e.g. {self.path / 'thatch.db'}"
        if self.reason.startswith("not a thatch database"):
            return foreign_fix()
        if self.reason.startswith("file is not a database"):  # SQLite's: not permissions
            return not_a_database_fix(self.path)
        return _file_fix(self)


def foreign_fix() -> str:
    """The fix for a THATCH_DB_PATH naming another program's SQLite file."""
    import os

    from thatch.common.environment import default_db_path

    default = default_db_path({k: v for k, v in os.environ.items() if k != "THATCH_DB_PATH"})
    return f"set THATCH_DB_PATH to thatch's database or to a new file (unset, it is {default})"


def not_a_database_fix(path: Path) -> str:
    """The fix for a file SQLite says is no database at all."""
    return f"move {path} aside (or restore it from a backup); thatch makes a new one"


class DatabaseBusyError(StoreError):
    """The write lock was not obtained within the busy timeout."""

    fix = "wait for the other thatch command to finish, then run this one again"

    def __init__(self) -> None:
        super().__init__(BUSY_MESSAGE)


class DatabaseWriteError(_FileError):
    """A write was refused by the file system (read-only, permissions, disk full)."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"cannot write database {path}: {reason}"

    @property
    def fix(self) -> str:  # type: ignore[override]  # computed from the kind
        return _file_fix(self)


class DatabaseDamagedError(_FileError):
    """SQLite found the file malformed; nothing thatch does can repair it."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        from thatch.common.shell_words import shell_quote

        check = f'sqlite3 {shell_quote(path)} "PRAGMA integrity_check"'
        return f"database {path} is damaged ({reason}): run {check}"

    @property
    def fix(self) -> str:  # type: ignore[override]  # computed from the path
        return f"restore {self.path} from a backup, or move it aside (thatch starts a new one)"


class DatabaseMovedError(_FileError):
    """The file this long-lived process opened was deleted, moved or replaced since:
    what it wrote would land in a file nobody else reads, and what it read is stale."""

    @staticmethod
    def describe(path: str, reason: str) -> str:
        return f"database {path} {reason} after this process opened it"

    fix = (
        "restart this thatch process (thatch ui, or the agent session whose thatch mcp "
        "this is) so that it opens what is at that path now"
    )


class InvalidInputError(StoreError, ValueError):
    """A value handed to the store is malformed; nothing was written."""
