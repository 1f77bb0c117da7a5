"""One embedder per socket address, and finding it again (docs/embedder.md §lifecycle, §transport).

A server holds an exclusive ``flock`` on ``<socket>.instance.lock`` for its whole life and
records its pid in ``<socket>.pid`` once it holds the lock, before it binds: a second
server on the same address fails at once, even when both start at the same
instant or the socket file was deleted meanwhile. ``<socket>.lock`` is a different lock:
auto-start holds it only while it spawns a server, so the two never wait on each other.

Finding it again (``stop``, ``status``, auto-start) is the client's half, re-exported here:
``thatch.embedder.client.instance_files``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from thatch.embedder.client.errors import ALREADY_RUNNING_FIX, ServerStartError
from thatch.embedder.client.instance_files import (
    lock_holder,
    lock_path,
    looks_like_embedder,
    pid_path,
    process_alive,
    read_pid,
    running_pid,
)

__all__ = [
    "InstanceLock",
    "lock_holder",
    "lock_path",
    "looks_like_embedder",
    "pid_path",
    "process_alive",
    "running_pid",
]


@dataclass
class InstanceLock:
    """The lock (and pid file) one server holds for its lifetime; ``release`` at exit."""

    socket_path: Path
    fd: int

    @classmethod
    def acquire(cls, socket_path: Path, address: str) -> InstanceLock:
        """Hold ``<socket>.instance.lock``, or fail naming the holder (then ``write_pid``)."""
        path = lock_path(socket_path)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                pid = running_pid(socket_path) or lock_holder(path)
                raise ServerStartError(
                    f"an embedder is already running at {address} (pid {pid or 'unknown'})",
                    ALREADY_RUNNING_FIX,
                ) from None
            except BaseException:
                os.close(fd)
                raise
            # A server exiting unlinks the file while holding the lock: if we locked that
            # unlinked file, the lock guards nothing; open the new one and try again.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        return cls(socket_path, fd)

    def write_pid(self) -> None:
        pid_path(self.socket_path).write_text(f"{os.getpid()}\n")

    def release(self) -> None:
        """Remove the pid file (if still ours) and the lock file, then drop the lock."""
        pid_file = pid_path(self.socket_path)
        if read_pid(pid_file) == os.getpid():
            with contextlib.suppress(OSError):
                pid_file.unlink()
        with contextlib.suppress(OSError):
            path = lock_path(self.socket_path)
            if os.stat(path).st_ino == os.fstat(self.fd).st_ino:
                path.unlink()  # while still holding it: see acquire
        with contextlib.suppress(OSError):
            os.close(self.fd)
