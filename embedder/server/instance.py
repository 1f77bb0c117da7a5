"""One embedder per socket address, and finding it again (docs/embedder.md §lifecycle, §transport).

A server holds an exclusive ``flock`` on ``<socket>.instance.lock`` for its whole life and
records its pid in ``<socket>.pid`` once it holds the lock, before it binds: a second
server on the same address fails at once, even when both start at the same
instant or the socket file was deleted meanwhile. ``<socket>.lock`` is a different lock:
auto-start holds it only while it spawns a server, so the two never wait on each other.

``stop`` and ``status`` find the running server from the pid file, else from the kernel's
table of locks (``/proc/locks``), so a server whose socket was deleted is still found.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from thatch.embedder.client.errors import ALREADY_RUNNING_FIX, ServerStartError

__all__ = [
    "InstanceLock",
    "lock_holder",
    "lock_path",
    "looks_like_embedder",
    "pid_path",
    "process_alive",
    "running_pid",
]


def lock_path(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".instance.lock")


def pid_path(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".pid")


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie awaiting its reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, ValueError):  # ValueError: a name that is not UTF-8
        return True
    return fields[0] not in ("Z", "X")


def looks_like_embedder(pid: int, *, strict: bool = True) -> bool:
    """Guard against a recycled pid in a stale pid file: the process must be thatch's
    embedder server (``python -m thatch.embedder serve``, ``thatch embedder serve``,
    ``python -m thatch.cli embedder serve``, ``thatch-embedder serve``), not any process
    naming an embedder (``vim embedder.md``).
    Not ``strict``: any process whose command line mentions an embedder (for the holder of
    the instance lock, which only a server takes)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return process_alive(pid)  # no /proc: trust the pid file
    if not strict:
        return any(b"embedder" in part for part in cmdline)
    names = [os.path.basename(part) for part in cmdline]
    thatch = (
        b"thatch.embedder" in names
        or b"thatch-embedder" in names
        or ((b"thatch" in names or b"thatch.cli" in names) and b"embedder" in names)
    )
    return thatch and b"serve" in names


def lock_holder(path: Path) -> int | None:
    """The pid holding a ``flock`` on ``path``, from ``/proc/locks`` (Linux); None if none."""
    try:
        inode = os.stat(path).st_ino
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; "->" marks a waiter, not a holder
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[2] == "->":
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode) and fields[4].isdigit():
            return int(fields[4])
    return None


def running_pid(socket_path: Path) -> int | None:
    """The pid of the embedder serving (or starting on) ``socket_path``, however found."""
    lock = lock_path(socket_path)
    holder = lock_holder(lock)
    if holder is not None and process_alive(holder) and looks_like_embedder(holder, strict=False):
        return holder
    if holder is None and lock.exists() and _locks_listed():
        # A server holds this lock for its whole life: nobody holds it, so none runs, and a
        # pid file left by one that was killed names a process the pid may since be.
        return None
    pid = read_pid(pid_path(socket_path))
    if pid is not None and process_alive(pid) and looks_like_embedder(pid):
        return pid
    return None


def _locks_listed() -> bool:
    """Whether this system lists its file locks (``/proc/locks``: Linux)."""
    return os.path.exists("/proc/locks")


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
