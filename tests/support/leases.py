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
    """How ``/proc/locks`` names the file: ``<major>:<minor>:<inode>`` (hex, hex, decimal),
    the device being the file system's own as ``/proc/self/mountinfo`` shows it (``stat``
    gives another on btrfs subvolumes)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        inode = os.fstat(fd).st_ino
        fdinfo = Path(f"/proc/self/fdinfo/{fd}").read_text()
    finally:
        os.close(fd)
    mount = next(line.split()[1] for line in fdinfo.splitlines() if line.startswith("mnt_id:"))
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[0] == mount:
            major, minor = (int(part) for part in fields[2].split(":"))
            return f"{major:02x}:{minor:02x}:{inode}"
    raise AssertionError(f"mount {mount} of {path} is not in /proc/self/mountinfo")


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
