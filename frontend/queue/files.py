"""The extraction queue's files: where they are, their lock, and every read and write.

Layout per session id in the queue directory: ``<safe>.jsonl`` (records, oldest first,
each with a sequence number ``seq``), ``<safe>.count`` (nudges printed since the last
drain), ``<safe>.state`` (the snapshot handed to an extractor: its cursor and when),
``<safe>.project`` (the project directory the session queued calls in) and ``<safe>.lock``
(flock target); a project's carried-over records have the same files under a ``~carry-``
stem (``carry``). Every read-modify-write holds the lock and replaces the file
atomically, so readers (which never lock) see either the old or the new file, never a
torn one. This is the one module of the queue that opens its files, but for the batches
a busy lock made hooks spill (``<safe>.<ms>-<pid>-<random>.spill`` and the marker
``<safe>.spilled``), which ``spill`` reads and writes through this module's helpers; the
marker is asked here (``spilled``), so a tool hook that finds none never imports ``spill``.
Cursor's held prompt nudge (``<safe>.nudge``) is ``held_nudge``'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import stat
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from thatch.frontend.queue.limits import (
    CLEANUP_INTERVAL_SECONDS,
    ID_LIMIT,
    LOCK_TIMEOUT_SECONDS,
    MAX_RECORDS,
    QUEUE_BYTES_LIMIT,
    STALE_SECONDS,
)
from thatch.frontend.queue.records import capped, compact
from thatch.frontend.regular_files import NotRegularFile, open_regular, read_regular

__all__ = [
    "CLEANUP_MARKER",
    "MARKER_SUFFIX",
    "SPILL_SUFFIX",
    "UNREAD",
    "LockBusy",
    "QueueError",
    "Seen",
    "cleanup_again",
    "cleanup_due",
    "ensure_dir",
    "locked",
    "project_path",
    "queue_paths",
    "read_lines",
    "read_number",
    "read_project",
    "read_state",
    "record_project",
    "remove_stale",
    "safe_name",
    "seen_of",
    "spill_marker",
    "spilled",
    "state_path",
    "unlink",
    "usable_project",
    "write_atomic",
    "write_records",
]

CLEANUP_MARKER = ".last-cleanup"
UNREAD = ".unread"  # marker: this session was told once that its payloads are unreadable
# A batch a busy lock made its tool hook spill (``spill``): ``<safe>.<ms>-<pid>-<random>``
# plus SPILL_SUFFIX, and the session's marker ``<safe>`` plus MARKER_SUFFIX. The marker is
# asked here: every lock holder asks, and a tool hook imports ``spill`` only when it says
# that spills wait (or the hook must write one).
SPILL_SUFFIX = ".spill"
MARKER_SUFFIX = ".spilled"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASHED_STEM = re.compile(r"[A-Za-z0-9_-]{0,64}-[0-9a-f]{16}")
SMALL_FILE_BYTES = 64 * 1024  # a .state or .count file is a few dozen bytes
LARGEST_COUNT = 1_000_000  # a count file holding more was not written by thatch


class QueueError(Exception):
    """A queue operation could not be done (lock timeout, unsafe path); one-line message."""


class LockBusy(QueueError):
    """Another process held the queue lock for the whole timeout."""


# -- locations -------------------------------------------------------------------------


def safe_name(session_id: str) -> str:
    """File stem for a session id: itself when already safe, else sanitised plus a hash.

    An id shaped like such a stem (``a_b-2e7336dc8eba87ef``) is hashed too: mapped to
    itself, it was the queue of the id whose stem it is (``a.b``), and read its records.
    No stem a hash makes is then any id's own."""
    safe = _UNSAFE.sub("_", session_id)
    if safe != session_id or len(session_id) > 128 or _HASHED_STEM.fullmatch(session_id):
        import hashlib  # loads OpenSSL (~3 ms); UUIDs and opencode ids never need it

        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        safe = safe[:64] + "-" + digest[:16]
    return safe


def queue_paths(directory: Path, session_id: str) -> tuple[Path, Path, Path]:
    """The ``.jsonl``, ``.count`` and ``.lock`` paths of a non-empty session id."""
    if not session_id:
        raise QueueError("empty session id has no queue")
    stem = safe_name(session_id)
    paths = tuple(directory / f"{stem}{suffix}" for suffix in (".jsonl", ".count", ".lock"))
    for path in paths:
        # Belt and braces: the sanitising above already rules out separators and "..".
        if path.parent != directory or path.name in (".", ".."):
            raise QueueError(f"session id {session_id[:40]!r} does not map into the queue")
    return paths  # type: ignore[return-value]


def ensure_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)


def spill_marker(jsonl: Path) -> Path:
    return jsonl.with_suffix(MARKER_SUFFIX)


def spilled(jsonl: Path) -> bool:
    """Whether spills may wait for the session (one ``lstat``: every lock holder asks).
    Anything at the marker's path counts: a directory there (no marker can be written)
    costs each holder a listing, never a spill."""
    return os.path.lexists(spill_marker(jsonl))


# -- locking and atomic files ----------------------------------------------------------


@contextlib.contextmanager
def locked(lock_path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[float]:
    """Hold the lock; yields when the lock file was last touched before this taker touched
    it: the abandoned-session pass asks whether the session took it meanwhile."""
    fd = _open_lock(lock_path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if not _flock_until(fd, deadline):
                raise LockBusy(f"queue lock {lock_path.name} busy for {timeout:g} s; gave up")
            # The cleanup may have unlinked this file while we waited for it: holding an
            # orphan locks nobody out, so only the file still at the path counts.
            if _same_file(fd, lock_path):
                break
            orphan, fd = fd, _open_lock(lock_path)
            os.close(orphan)
        touched = os.fstat(fd).st_mtime
        # Touch the lock so the 7-day cleanup leaves it alone (it also skips held locks).
        os.utime(fd)
        yield touched
    finally:
        os.close(fd)  # closing releases the flock


def _open_lock(lock_path: Path) -> int:
    """The lock file, created if missing: QueueError when something else is at the path (a
    directory, a FIFO, a link: nothing a session's hooks could lock or should follow)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError as error:
        raise QueueError(
            f"queue lock {lock_path.name} cannot be opened: {error.strerror or error}"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise QueueError(f"queue lock {lock_path.name} is not a regular file")
    return fd


_TICK_SECONDS = 0.005  # the timer's repeat once the deadline has passed


class _Expired(Exception):
    """The alarm of a timed blocking flock went off."""


def _flock_until(fd: int, deadline: float) -> bool:
    """Take the exclusive flock on ``fd`` by ``deadline``; False when it stayed busy.

    The main thread (every hook process) waits in the kernel, queued behind the holder and
    woken at its release, under an interval timer: polling with sleeps lost the lock again
    and again to processes that came later, so under heavy load a hook gave up after its
    2 s while others got through. Other threads (the MCP server's workers) cannot take
    SIGALRM, and a process whose own alarm is set, or that blocks SIGALRM, keeps it as it
    is: those poll.
    """
    if _try_flock(fd):
        return True
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
        or signal.SIGALRM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ):
        return _poll_flock(fd, deadline)
    waiting = [True]

    def expire(signum: int, frame: object) -> None:
        # Once only: a later tick must not break out of the handling of the first.
        if waiting[0]:
            waiting[0] = False
            raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        try:
            # Ticks repeat: one that lands after the timer is set but before flock(2)
            # starts to block runs the handler only once flock returns, so the next one
            # is what interrupts the wait.
            signal.setitimer(signal.ITIMER_REAL, remaining, _TICK_SECONDS)
            fcntl.flock(fd, fcntl.LOCK_EX)
            waiting[0] = False
        except _Expired:
            # The alarm may also go off just after the flock was taken: ask again.
            return _try_flock(fd)
        return True
    finally:
        waiting[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None: a handler not set from Python (an embedding host's); the default is closest.
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        return False
    return True


def _poll_flock(fd: int, deadline: float) -> bool:
    delay = 0.002
    while not _try_flock(fd):
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)  # another thread of this process or another process holds it
        delay = min(delay * 2, 0.05)
    return True


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file at ``path`` now (not one unlinked or replaced meanwhile)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


def _remove_idle_lock(path: str, stale_before: float) -> bool:
    """Unlink a stale lock file only while holding it, so no process holds it then.

    A taker that opened it before the unlink finds it gone once it gets the flock and
    retries on the file at the path (``locked``). True when removed.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False  # gone meanwhile, or not a file we can lock: leave it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held right now
        # Re-check under the flock: a taker may have touched it, or replaced it, meanwhile.
        if os.fstat(fd).st_mtime >= stale_before or not _same_file(fd, Path(path)):
            return False
        os.unlink(path)
        return True
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    # Not tempfile.mkstemp: importing tempfile costs a tool hook ~3 ms.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The file's records, newest MAX_RECORDS, each capped; at most QUEUE_BYTES_LIMIT read."""
    try:
        # Only a regular file at the session's own path: a FIFO put here hung every hook
        # and tool of the session, and a symlink to another session's queue handed its
        # records over.
        with open_regular(path, follow_links=False) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > QUEUE_BYTES_LIMIT:
                handle.seek(size - QUEUE_BYTES_LIMIT)  # the first (partial) line is skipped
            data = handle.read(QUEUE_BYTES_LIMIT)
    except FileNotFoundError:
        return []
    except (NotRegularFile, PermissionError):
        # Not the session's regular file (a FIFO, a socket, a link), or one this user may
        # not read (left by a sudo run): no records; the next write replaces it. Any other
        # failure is the caller's, which then writes nothing over the queue.
        return []
    # "\n" only: str.splitlines also cuts at U+2028, U+2029 and U+0085, which a record
    # written with ensure_ascii=False holds raw (a minified script, text from the web).
    lines = data.decode("utf-8", errors="replace").split("\n")
    if size > QUEUE_BYTES_LIMIT:
        lines = lines[1:]
    records: list[dict[str, Any]] = []
    for line in lines[-MAX_RECORDS * 2 :]:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a foreign or damaged line must not hide the others
        if isinstance(value, dict):
            records.append(capped(value))
    return records[-MAX_RECORDS:]


# -- state: the snapshot handed to an extractor ----------------------------------------------


def state_path(jsonl: Path) -> Path:
    return jsonl.with_suffix(".state")


_INFINITY = float("inf")


def read_state(path: Path) -> dict[str, Any]:
    """``{"cursor": int, "accepted_at": float}`` or ``{}`` (missing, damaged, foreign: an
    ``accepted_at`` that is no finite number too)."""
    try:
        value = json.loads(read_regular(path, SMALL_FILE_BYTES, follow_links=False).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    cursor, at = value.get("cursor"), value.get("accepted_at")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
        return {}
    if isinstance(at, bool) or not isinstance(at, int | float):
        return {}
    try:
        at = float(at)  # OverflowError for a 400-digit integer
    except OverflowError:
        return {}
    # Finite (no math import on a tool hook's path): NaN, Infinity or 1e400 in a damaged
    # file, spilled as a hook's ``seen``, would make the next holder delete its spill.
    if not -_INFINITY < at < _INFINITY:
        return {}
    state: dict[str, Any] = {"cursor": cursor, "accepted_at": at}
    agent = value.get("agent_id")
    if isinstance(agent, str) and agent:
        state["agent_id"] = agent[:ID_LIMIT]
    return state


class Seen(NamedTuple):
    """The snapshot a tool hook saw handed out as it began (``.state``'s ``cursor`` and
    ``accepted_at``): the only one its spilled drains and fetch may act on. ``cursor``
    None: a spill of the release before this one, whose hook read ``accepted_at`` alone,
    after its wait (that snapshot must also have been handed out before the hook began)."""

    cursor: int | None
    accepted_at: float


def seen_of(state: dict[str, Any]) -> Seen | None:
    """The snapshot a state (``read_state``) hands out, None for none."""
    if "cursor" not in state:
        return None
    return Seen(state["cursor"], state["accepted_at"])


# -- project: where the session's calls were queued ---------------------------------------


def project_path(jsonl: Path) -> Path:
    return jsonl.with_suffix(".project")


def record_project(jsonl: Path, project: str) -> None:
    """Note the project directory of the session whose queue is ``jsonl``, unless noted
    already: should its host die before its ``session-end``, the daily pass carries its
    calls there (``carry.carry_abandoned``). The latest wins, as at a ``session-end``
    (the hooks' directory then): a session that moved on works, and is next prompted,
    there. The caller holds the session's lock."""
    path = project_path(jsonl)
    text = _project_text(project)
    with contextlib.suppress(OSError):
        if read_regular(path, SMALL_FILE_BYTES, follow_links=False) == text.encode():
            return  # one small read a batch; anything else at the path is replaced
    write_atomic(path, text)


def read_project(path: Path) -> str:
    """The project directory a queue recorded, or "" (none: an earlier release's queue; or
    damaged, foreign, not a regular file, not an absolute path, no file name): never
    guessed."""
    try:
        value = json.loads(read_regular(path, SMALL_FILE_BYTES, follow_links=False).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return ""
    project = value.get("project") if isinstance(value, dict) else None
    return project if isinstance(project, str) and _names_a_directory(project) else ""


def usable_project(project: object) -> str:
    """``project`` when a queue may note it (``record_project``), else "": a project
    directory as ``read_project`` gives one back (an absolute path a file name can hold),
    in a ``.project`` file it reads. A hook's project (``append.append_calls``, whether
    it gets the lock or spills) and a spill's are checked so: a host's ``cwd`` may be
    anything, anything may have written a spill, and an invalid one would replace the
    session's own."""
    if not isinstance(project, str) or len(project) > SMALL_FILE_BYTES:
        return ""  # (a 10 MB string is neither encoded nor escaped)
    if not _names_a_directory(project) or len(_project_text(project)) > SMALL_FILE_BYTES:
        return ""
    return project


def _names_a_directory(project: str) -> bool:
    """Whether ``project`` is an absolute path a file name can hold (no NUL, no lone
    surrogate: realpath would raise). A relative one would name a directory of whatever
    process reads it (the daily pass runs in any project)."""
    if not os.path.isabs(project) or "\x00" in project:
        return False
    try:
        os.fsencode(project)
    except UnicodeEncodeError:
        return False
    return True


def _project_text(project: str) -> str:
    # ASCII: a directory name that is no UTF-8 (surrogate escapes) round-trips as \udcXX.
    return json.dumps({"project": project}) + "\n"


def write_records(jsonl: Path, records: list[dict[str, Any]]) -> None:
    kept = records[-MAX_RECORDS:]
    if kept:
        write_atomic(jsonl, "".join(compact(record) + "\n" for record in kept))
    else:
        unlink(jsonl)


# -- counts and upkeep ----------------------------------------------------------------


def read_number(path: Path) -> int:
    """A count file's number (missing, unparsable or negative = 0; at most LARGEST_COUNT)."""
    try:
        value = int(
            read_regular(path, SMALL_FILE_BYTES, follow_links=False).decode("utf-8").strip()
        )
    except (OSError, ValueError):
        return 0
    return min(max(value, 0), LARGEST_COUNT)


def cleanup_due(directory: Path, now: float, *, force: bool = False) -> bool:
    """Whether the queue's daily pass is due (marked done now when it is): it runs at most
    once a day (``.last-cleanup``), so a prompt costs one stat."""
    if not directory.is_dir():
        return False
    marker = directory / CLEANUP_MARKER
    try:
        last = marker.stat().st_mtime
    except FileNotFoundError:
        last = 0.0
    if not force and now - last < CLEANUP_INTERVAL_SECONDS:
        return False
    marker.touch()
    os.utime(marker, (now, now))
    return True


def cleanup_again(directory: Path) -> None:
    """Make the daily pass due at the next hook (it stopped at its bound with work left)."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(directory / CLEANUP_MARKER, (0, 0))


def remove_stale(directory: Path, now: float, *, spare: Collection[str] = ()) -> int:
    """Delete queue files (carried-over ones and spills too) untouched for 7 days; returns
    files removed. A lock file goes only while this process holds it (``_remove_idle_lock``):
    never one another process holds or is taking. A ``.project`` stays while its session's
    ``.jsonl`` is younger: it is written once, and a session may live longer than a week.
    ``spare``: the stems of sessions whose queues stay (the pass that would carry them
    over stopped before them)."""
    removed = 0
    suffixes = (*_SESSION_SUFFIXES, ".spill", ".tmp", UNREAD)
    for entry in os.scandir(directory):
        if entry.name == CLEANUP_MARKER or not entry.is_file(follow_symlinks=False):
            continue
        if not entry.name.endswith(suffixes):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime <= STALE_SECONDS:
                continue
            if spare and _spared(entry.name, spare):
                continue
            if entry.name.endswith(".lock"):
                removed += _remove_idle_lock(entry.path, now - STALE_SECONDS)
            elif entry.name.endswith(".project") and _queue_younger(entry.path, now):
                continue
            else:
                os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            continue
    return removed


# A session's queue files (a spill, ``<stem>.<ms>-<pid>-<random>.spill``, is one too).
_SESSION_SUFFIXES = (".jsonl", ".count", ".state", ".project", ".lock", ".spilled", ".nudge")


def _spared(name: str, spare: Collection[str]) -> bool:
    """Whether ``name`` is a queue file of one of the ``spare`` sessions."""
    if name.endswith(".spill"):
        return name.split(".", 1)[0] in spare
    stem, dot, suffix = name.rpartition(".")
    return dot + suffix in _SESSION_SUFFIXES and stem in spare


def _queue_younger(project: str, now: float) -> bool:
    """Whether the ``.jsonl`` beside a ``.project`` was touched within 7 days."""
    try:
        changed = os.lstat(project.removesuffix(".project") + ".jsonl").st_mtime
    except FileNotFoundError:
        return False
    return now - changed <= STALE_SECONDS
