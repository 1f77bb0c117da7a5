"""The import's scratch directories beside the output: claimed under a lock, swept when dead.

An import builds in ``.thatch-importing-<hex>`` and moves an earlier import aside as
``.thatch-replaced-<hex>`` (importer.py). Each is held under an exclusive ``flock`` on the
directory itself for as long as the import that made it runs; the kernel drops the lock
when that process dies, however it dies. So a directory of ours whose lock is free belongs
to an import that is gone (SIGKILL, a crash, a power cut: hundreds of MB each), and the
next import in the same place removes it. A lock that is held means an import is under way
there, and its directories are left alone. Where a lock says less (NFS, whose clients each
keep directory flocks to themselves; an import by a release that took none), a directory
written to within ``STALE_SECONDS`` is left alone too.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "BUILD_PREFIX",
    "REPLACED_PREFIX",
    "claim_build_dir",
    "hold",
    "hold_existing",
    "sweep_abandoned",
]

BUILD_PREFIX = ".thatch-importing-"
REPLACED_PREFIX = ".thatch-replaced-"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A scratch directory nothing was written into for this long is no running import's.
STALE_SECONDS = 3600.0


def hold(path: Path) -> int:
    """An fd holding the exclusive lock on the directory ``path`` (the lock follows it
    through renames); close it to let go."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def hold_existing(path: Path) -> int | None:
    """``hold`` on the directory at ``path`` as it is once locked; None when ``path`` is a
    symlink (renaming it moves the link, not a directory a sweep could take)."""
    while True:
        try:
            fd = hold(path)
        except OSError:
            if path.is_symlink():
                return None
            raise
        if _still_there(fd, path):
            return fd
        os.close(fd)  # another import replaced it meanwhile: lock the one there now


def claim_build_dir(parent: Path) -> tuple[Path, int]:
    """A new, empty build directory in ``parent`` and the fd holding its lock."""
    while True:
        build = parent / f"{BUILD_PREFIX}{secrets.token_hex(4)}"
        build.mkdir()
        # Between mkdir and flock a sweeping import may find it unlocked and remove it:
        # before the open (nothing to lock) or after (the fd names a deleted directory).
        try:
            fd = hold(build)
        except FileNotFoundError:
            continue
        if _still_there(fd, build):
            return build, fd
        os.close(fd)


def sweep_abandoned(parent: Path, log: Callable[[str], None]) -> None:
    """Remove the scratch directories in ``parent`` whose import is no longer running."""
    try:
        entries = [
            entry
            for entry in parent.iterdir()
            if entry.name.startswith((BUILD_PREFIX, REPLACED_PREFIX))
        ]
    except OSError:
        return  # nothing to sweep where nothing can be listed; the import says why itself
    for entry in entries:
        try:
            fd = os.open(entry, _DIR_FLAGS)
        except OSError:
            continue  # not a directory (or gone): not one of ours to remove
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: an import is under way
            if _still_there(fd, entry) and _untouched_since(entry, time.time() - STALE_SECONDS):
                shutil.rmtree(entry, ignore_errors=True)
                log(f"removed {entry}, left by an import that did not finish")
        finally:
            os.close(fd)


def _untouched_since(directory: Path, cutoff: float) -> bool:
    """Whether nothing in ``directory`` (a few files) was written after ``cutoff``."""
    for root, dirs, files in os.walk(directory):
        for name in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            try:
                if os.lstat(name).st_mtime > cutoff:
                    return False
            except OSError:
                continue
    return True


def _still_there(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError:
        return False
