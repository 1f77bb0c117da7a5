"""Finding the embedder serving a unix socket, from its files (docs/embedder.md §lifecycle).

A server holds an exclusive ``flock`` on ``<socket>.instance.lock`` for its whole life and
records its pid in ``<socket>.pid`` (``thatch.embedder.server.instance`` takes them). Here
is what reads them: ``stop``, ``status`` and auto-start find the running server from the
kernel's table of locks (``/proc/locks``), else from the pid file, so a server whose socket
was deleted is still found and a stale pid file names nobody. The client's half, so that it
never loads the server.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "lock_holder",
    "lock_path",
    "looks_like_embedder",
    "pid_path",
    "process_alive",
    "read_pid",
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
