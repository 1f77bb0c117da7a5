"""Snapshot files under read leases: who holds one, and a truncation that waits for it."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.polling import poll

DEADLINE = 180.0  # seconds: only a hang ever gets near it


def leases(path: Path) -> list[tuple[str, int]]:
    """(state, holder pid) of each lease on ``path``'s inode, from ``/proc/locks``.

    A line reads ``1: LEASE  ACTIVE    READ  <pid> <major>:<minor>:<inode> 0 EOF``; the
    state is BREAKING while a writer waits (its own ``->`` line names no inode).
    """
    return leases_on(lock_key(path))


def lock_key(path: Path) -> str:
    """How ``/proc/locks`` names the file: ``<major>:<minor>:<inode>``, hex, hex, decimal."""
    info = os.stat(path)
    return f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"


def leases_on(key: str) -> list[tuple[str, int]]:
    found = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "LEASE" and fields[5] == key:
            found.append((fields[2], int(fields[4])))
    return found


@contextmanager
def truncating(path: Path, size: int) -> Iterator[threading.Thread]:
    """``os.truncate(path, size)`` in a thread, entered once it waits on a lease (or is
    done); on exit the truncation must have finished without error."""
    key = lock_key(path)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            os.truncate(path, size)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, name="truncating", daemon=True)
    thread.start()
    waiting = poll(
        lambda: not thread.is_alive() or any(s == "BREAKING" for s, _ in leases_on(key)),
        DEADLINE,
    )
    assert waiting, f"truncating {path} neither waits on a lease nor ends"
    yield thread
    thread.join(DEADLINE)
    assert not thread.is_alive(), f"truncating {path} still waits"
    assert not errors, errors
