"""Finding the sqlite3 connections and embedder clients a code path leaves open.

Python 3.13's sqlite3 warns (ResourceWarning) when a connection is collected unclosed,
and the suite turns warnings into errors; 3.11 closes it silently. ``OpenTracker`` keeps
every connection and client made while it is installed and names those still open, so a
leak fails a test on either version.
"""

from __future__ import annotations

import gc
import sqlite3
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from thatch.embedder.client.embedder_client import EmbedderClient


def is_open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - any use of a closed connection raises
    except sqlite3.ProgrammingError:
        return False
    return True


@dataclass
class OpenTracker:
    connections: list[sqlite3.Connection] = field(default_factory=list)
    clients: list[EmbedderClient] = field(default_factory=list)
    closed_clients: set[int] = field(default_factory=set)
    unraisable: list[str] = field(default_factory=list)

    def open_connections(self) -> list[str]:
        """The files of connections still open, after a collection (which 3.13 warns on)."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            gc.collect()
        return [str(path_of(conn)) for conn in self.connections if is_open(conn)]

    def open_clients(self) -> list[str]:
        open_ones = [c for c in self.clients if id(c) not in self.closed_clients]
        return [str(c.address.path or "?") for c in open_ones]


def path_of(conn: sqlite3.Connection) -> object:
    return next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "?")


@contextmanager
def tracking_opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenTracker]:
    """Record every ``sqlite3.connect`` and ``EmbedderClient`` made in the block, and every
    exception a finaliser raised (a ResourceWarning turned into an error lands there)."""
    tracker = OpenTracker()
    real_connect = sqlite3.connect
    real_init, real_close = EmbedderClient.__init__, EmbedderClient.close

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        tracker.connections.append(conn)
        return conn

    def init(self: EmbedderClient, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        tracker.clients.append(self)

    def close(self: EmbedderClient) -> None:
        tracker.closed_clients.add(id(self))
        real_close(self)

    def unraisable(hook_args: Any) -> None:
        tracker.unraisable.append(f"{hook_args.exc_type.__name__}: {hook_args.exc_value}")

    monkeypatch.setattr(sqlite3, "connect", connect)
    monkeypatch.setattr(EmbedderClient, "__init__", init)
    monkeypatch.setattr(EmbedderClient, "close", close)
    monkeypatch.setattr(sys, "unraisablehook", unraisable)
    yield tracker
