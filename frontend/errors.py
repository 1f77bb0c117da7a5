"""Errors of the store layer, each with a message meant for people.

    StoreError                  base: ``str(error)`` is a complete one-line message
     ├── DatabaseOpenError      "cannot open database at <path>: <reason>"
     ├── DatabaseBusyError      another process held the write lock past the busy timeout
     └── InvalidInputError      a value handed to the store cannot be stored or compared
          (also a ValueError)   (empty/2-D/non-finite vector, unknown verdict status, ...)

The CLI turns every one of them into ``click.ClickException``; the MCP tool layer into an
``isError`` result. None of them carries a traceback to the user.
"""

from __future__ import annotations

from pathlib import Path

BUSY_MESSAGE = "database is busy (another thatch process holds the write lock); try again"


class StoreError(Exception):
    """Base class of every error the store layer raises on purpose."""


class DatabaseOpenError(StoreError):
    """The database file cannot be created, opened or initialised."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"cannot open database at {path}: {reason}")


class DatabaseBusyError(StoreError):
    """The write lock was not obtained within the busy timeout."""

    def __init__(self) -> None:
        super().__init__(BUSY_MESSAGE)


class InvalidInputError(StoreError, ValueError):
    """A value handed to the store is malformed; nothing was written."""
