"""The vector snapshot directory: whose it must be, which files in it open, what is removed.

A snapshot is only a cache, so anything here that is not plainly this user's own is
passed over and the caller loads from SQLite. The rules mirror the embedder socket's
(``thatch.embedder.client.socket_trust``): the directory is created 0700, refused when another
user owns it, and made 0700 again when it is ours but group or others may write it (from
then on nobody else can add an entry, and every file is checked on its own anyway). A
file is opened only as a regular file (no symlink: ``O_NOFOLLOW``; no FIFO or device:
``O_NONBLOCK`` so opening never waits, then ``S_ISREG``) owned by this user and writable by
nobody else.

Writers tidy the directory before adding a file: temp files of dead writers go, snapshots
nobody used for ``STALE_SECONDS`` go (databases deleted, stores emptied), then the least
recently used go until the rest fit in ``CAP_BYTES``. Removing a file another process has
mapped is safe: its mapping keeps the inode. "Used" is the later of the file's mtime (when
it was written) and its atime, which every process that maps it moves forward at most once
a day (``mark_used``), so that a ``noatime`` mount still ages only what nobody reads.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

__all__ = [
    "CAP_BYTES",
    "SNAPSHOT_SUFFIX",
    "STALE_SECONDS",
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "mark_used",
    "open_own_file",
    "tidy",
    "usable_directory",
]

TEMP_PREFIX = ".snap-"
TEMP_SUFFIX = ".tmp"
SNAPSHOT_SUFFIX = ".vec"
ABANDONED_SECONDS = 600  # older than any write takes
STALE_SECONDS = 14 * 86_400
CAP_BYTES = 1 << 30  # all snapshots together: 100k memories of 384 dimensions take ~160 MB
USED_REFRESH_SECONDS = 86_400
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH
_OPEN_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
)  # fmt: skip


def usable_directory(directory: Path, *, create: bool) -> bool:
    """Whether ``directory`` is this user's to share snapshots in (made 0700 when ``create``)."""
    if create:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            return False
    try:
        info = os.stat(directory)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    if info.st_mode & _SHARED_WRITE:
        try:
            os.chmod(directory, 0o700)
        except OSError:
            return False
    return True


def open_own_file(path: Path) -> tuple[int, os.stat_result] | None:
    """A read-only descriptor of ``path`` and its status, if it is a regular file of ours.

    The caller closes the descriptor.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if (
        not stat.S_ISREG(info.st_mode)
        or info.st_uid != os.geteuid()
        or info.st_mode & _SHARED_WRITE
    ):
        os.close(fd)
        return None
    return fd, info


def mark_used(fd: int, info: os.stat_result) -> None:
    """Move the file's atime to now when it is a day old (see the module docstring)."""
    if time.time() - info.st_atime < USED_REFRESH_SECONDS:
        return
    with contextlib.suppress(OSError):  # a read-only file system: it just ages
        os.utime(fd, ns=(time.time_ns(), info.st_mtime_ns))


def tidy(directory: Path, keep: Path, incoming: int) -> None:
    """Make room before writing ``incoming`` bytes at ``keep`` (which is never removed)."""
    now = time.time()
    kept: list[tuple[float, int, str]] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(TEMP_SUFFIX):
            if now - info.st_mtime > ABANDONED_SECONDS:
                _remove(entry.path)
            continue
        if not entry.name.endswith(SNAPSHOT_SUFFIX) or entry.name == keep.name:
            continue
        used = max(info.st_atime, info.st_mtime)
        if not stat.S_ISREG(info.st_mode) or now - used > STALE_SECONDS:
            _remove(entry.path)  # a FIFO or link where a snapshot belongs is never read
            continue
        kept.append((used, info.st_size, entry.path))
    total = incoming + sum(size for _, size, _ in kept)
    for _used, size, path in sorted(kept):
        if total <= CAP_BYTES:
            break
        _remove(path)
        total -= size


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):  # gone already, or a directory: never read either
        os.unlink(path)
