"""The team sync process (``thatch team sync``): one per machine and database, a loop of
push, pull and wait (docs/team.md §data-flow).

Only this process talks to hubs: hooks and MCP servers read and write the local SQLite,
the outbox triggers queue what they write. An exclusive ``flock`` on a lock file beside
the embedder's socket keeps it to one; SIGTERM (or SIGINT) ends the wait and the loop
after the pass in progress. A hub that is down or refuses is noted on its link and
retried with a doubling wait (up to ``MAX_BACKOFF``), so the process outlives outages.
Between clean passes the process looks at the outbox every ``WAKE_CHECK`` seconds and
starts the next pass as soon as a local write has queued a row (``OutboxWatch``): a save
waits for its push a fraction of a second, not the rest of the interval (the interval
still sets how often other machines' writes are pulled).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType

from thatch.common.environment import default_db_path, socket_dir, thatch_cache_dir
from thatch.common.stop_signals import wait_for_stop
from thatch.frontend.store.db import atomic
from thatch.hub.client import (
    HubClient,
    HubRefused,
    parse_hub_address,
    plaintext_to,
    token_fix,
)
from thatch.teamsync import outbox
from thatch.teamsync.chat import ChatHub
from thatch.teamsync.engine import HubLink, LinkOutcome, SyncEngine
from thatch.teamsync.links import Link
from thatch.teamsync.tokens import TokenMissing, read_token, rejoin_fix

__all__ = [
    "DEFAULT_INTERVAL",
    "MAX_BACKOFF",
    "WAKE_CHECK",
    "AlreadyRunning",
    "HubClients",
    "OutboxWatch",
    "hold_lock",
    "is_running",
    "lock_path",
    "log_path",
    "run_loop",
    "spawn",
    "stop_on_signals",
]

DEFAULT_INTERVAL = 3.0  # seconds between passes
MAX_BACKOFF = 60.0
WAKE_CHECK = 0.25  # seconds between looks at the outbox while a clean pass's wait runs


class AlreadyRunning(Exception):
    def __init__(self, path: Path) -> None:
        super().__init__(f"a team sync process already runs for this database (lock {path})")


def lock_path(env: Mapping[str, str], db_path: Path | None = None) -> Path:
    """The lock of the sync process for ``db_path`` (default: the configured database)."""
    db = (db_path or default_db_path(env)).resolve()
    key = hashlib.sha256(os.fsencode(db)).hexdigest()[:16]
    return socket_dir(env) / f"team-sync-{key}.lock"


def log_path(env: Mapping[str, str]) -> Path:
    """Where an auto-started sync process writes what it did (stderr)."""
    return thatch_cache_dir(env) / "team-sync.log"


@contextlib.contextmanager
def hold_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(path) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def is_running(path: Path) -> bool:
    """Whether a sync process holds ``path`` (probed, nothing kept)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class HubClients:
    """One ``HubClient`` per (hub, team, token), the token read from its file at each use:
    a token replaced by ``thatch team join`` is used from the next pass on."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self._clients: dict[tuple[str, str], tuple[str, HubClient]] = {}

    def __call__(self, link: Link) -> HubLink:
        return self.client(link)

    def chat(self, link: Link) -> ChatHub:
        """The same client, for the chat round of the link's team."""
        return self.client(link)

    def client(self, link: Link) -> HubClient:
        try:
            token = read_token(self.env, link.hub_url, link.team)
        except TokenMissing as error:
            rejoin = rejoin_fix(link.hub_url, link.store)
            raise HubRefused(str(error), rejoin, "auth") from None
        key = (link.hub_url, link.team)
        held = self._clients.get(key)
        if held is not None and held[0] == token:
            return held[1]
        if held is not None:
            held[1].close()
        try:
            address = parse_hub_address(link.hub_url)
        except ValueError as error:  # a link an earlier release recorded: this link's error
            raise HubRefused(str(error), "join the store again with host:port", "request") from None
        plaintext = plaintext_to(address, self.env)
        # A refused token's fix names this link's team, member and join (any store of
        # the team does: a join replaces the token of its hub and team).
        refused = token_fix(link.team, link.member, then=rejoin_fix(link.hub_url, link.store))
        client = HubClient(
            link.hub_url, token, env=self.env, plaintext=plaintext, token_refused=refused
        )
        self._clients[key] = (token, client)
        return client

    def close(self) -> None:
        for _, client in self._clients.values():
            client.close()
        self._clients.clear()


class OutboxWatch:
    """Whether a local write queued an outbox row since the pass began: ``before_pass``
    notes the newest row id (AUTOINCREMENT: a new row's id is above every earlier one,
    pushed and deleted or not), a call compares."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.mark = 0

    def _newest(self) -> int:
        with atomic(self.conn, immediate=False):
            return outbox.newest_id(self.conn)

    def before_pass(self) -> None:
        self.mark = self._newest()

    def __call__(self) -> bool:
        return self._newest() > self.mark


def run_loop(
    engine: SyncEngine,
    *,
    interval: float,
    stop: threading.Event,
    report: Callable[[LinkOutcome], None],
    before_pass: Callable[[], None] = lambda: None,
    after_pass: Callable[[list[LinkOutcome]], None] = lambda _: None,
    once: bool = False,
    max_wait: float = MAX_BACKOFF,
    wake: Callable[[], bool] = lambda: False,
) -> int:
    """Pass after pass until ``stop`` is set (or no store is linked any more); the number
    of passes run. A pass with a failing link waits twice as long as the one before, up
    to ``max_wait``, whatever ``wake`` says; a clean pass waits ``interval`` again, or
    until ``wake()`` (asked every ``WAKE_CHECK`` seconds) is true."""
    wait = interval
    passes = 0
    while not stop.is_set():
        before_pass()
        outcomes = engine.sync_all()
        passes += 1
        for outcome in outcomes:
            report(outcome)
        after_pass(outcomes)
        if once or not outcomes:
            return passes
        failing = any(outcome.error for outcome in outcomes)
        wait = min(max(wait * 2, interval), max(max_wait, interval)) if failing else interval
        if failing:
            wait_for_stop(stop, wait)
        else:
            _wait_unless_woken(stop, wait, wake)
    return passes


def _wait_unless_woken(stop: threading.Event, seconds: float, wake: Callable[[], bool]) -> None:
    deadline = time.monotonic() + seconds
    while not stop.wait(min(WAKE_CHECK, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline or wake():
            return


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT end the loop after the pass in progress."""

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def spawn(env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
    """Start ``thatch team sync`` detached unless one runs for this database; the child.

    Two callers racing both spawn; the second child finds the lock held and exits."""
    if is_running(lock_path(env)):
        return None
    log = log_path(env)
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(log, "ab") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "thatch.cli", "team", "sync"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd="/",
            env=dict(env),
            start_new_session=True,
        )
    # A long-lived parent (``thatch mcp``) reaps the child when it ends: no zombie.
    threading.Thread(target=child.wait, name="thatch-team-sync-reaper", daemon=True).start()
    return child
