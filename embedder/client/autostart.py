"""Auto-start of a local embedder on a unix socket (docs/embedder.md §client, §transport).

Frontends call ``AutoStarter.run`` (through ``EmbedderClient.ensure_started``) when no
embedder answers. The rules that keep concurrent frontends safe:

- nothing is started (or trusted) in a directory that is not ours or is writable by
  group/other, nor behind a socket or listener of another user (``socket_trust``);
- the socket is probed at the OS level first, because only a *refused* connection proves
  nothing lives there; a timeout means a slow live server, which must never be replaced;
- anything at the socket path that is not a socket (a file, a directory, a dangling
  symlink) is someone's data or a misconfigured address: it is never removed, the start
  fails naming the path (``not_a_socket``);
- spawning happens under an exclusive ``flock`` on ``<socket>.lock``, after checking again,
  so eight frontends starting at once produce one server;
- the lock is released once the new server has bound its socket (at most 10 s later);
  a background start (hooks, ``wait=0``) hands the lock to a tiny launcher process
  (``hold_until_bound``) so the hook returns at once while the lock still covers the bind;
- the server runs detached (own session, stdin/stdout on /dev/null, stderr to the log,
  cwd ``/``, environment inherited). A daemon thread waits for each child so a long-lived
  frontend never keeps a zombie; when the frontend exits first, init adopts the server.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from thatch.common.environment import embedder_log_file
from thatch.embedder.client.errors import (
    FIX_START,
    FIX_STARTING,
    EmbedderUnavailable,
    EmbedderUntrusted,
    fix_offline,
)
from thatch.embedder.client.settings import DEFAULT_EXIT_SECONDS, Address, int_setting
from thatch.embedder.client.socket_trust import PROBE_SECONDS, SocketState, probe, socket_problem
from thatch.embedder.grpc_env import child_environment

__all__ = [
    "FIX_RECORD",
    "FIX_UNTRUSTED",
    "POLL_SECONDS",
    "STILL_STARTING",
    "STOP_RECORD",
    "AutoStarter",
    "Health",
    "LockHold",
    "StartOutcome",
    "log_reason",
    "make_private_dir",
    "offline_error",
    "probe_socket",
    "start_failure",
    "untrusted",
]

Health = Literal["SERVING", "NOT_SERVING", "UNREACHABLE"]

LOCK_WAIT_SECONDS = 30.0
BIND_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.05
STILL_STARTING = "the embedder is still starting (the first start downloads the model)"
# How long a server that accepts connections may answer nothing before it counts as hung.
SILENT_SECONDS = 20.0
FIX_ORPHAN = "stop it, then retry: thatch embedder stop"
FIX_UNTRUSTED = (
    "set THATCH_EMBEDDER_ADDR to a unix:/// path in a directory only you can write, "
    "or remove that directory so thatch recreates it with mode 0700"
)
_OFFLINE = re.compile(r"model (\S+) is not in the local cache and HF_HUB_OFFLINE=1")
_LOG_PREFIX = re.compile(r"^.*?\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+")
# A server that fails writes why it stopped and its fix as records of its own
# (serve_cmd's formatter: one line, its time and level first) naming the mark its starter
# gave it (``--fix-mark``): what else reaches the log (grpc's own lines, a traceback
# quoting a model id or a directory's name) may hold a line starting "Fix: ", or come
# after the server's error, never with the mark of this start.
STOP_RECORD = "Stopped (start {mark}): "
FIX_RECORD = "Fix (start {mark}): "
_MARKED_RECORD = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ERROR (Stopped|Fix) \(start (\w+)\): (.*)$"
)


def probe_socket(path: Path, timeout: float = PROBE_SECONDS) -> SocketState:
    """What lives at ``path``, judged by one raw connect (no gRPC)."""
    return probe(path, timeout).state


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) with mode 0700; existing dirs are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # another frontend made it meanwhile
        os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask


@dataclass
class LockHold:
    acquired: bool
    fd: int
    handed_off: bool = False  # a child holds it now: closing our fd must not unlock it


@contextmanager
def exclusive_lock(path: Path, wait: float) -> Iterator[LockHold]:
    """Try for ``wait`` s to hold an exclusive flock on ``path``; see ``acquired``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    hold = LockHold(acquired=False, fd=fd)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                hold.acquired = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(POLL_SECONDS)
        yield hold
    finally:
        if hold.acquired and not hold.handed_off:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def spawn_command(address: Address, env: Mapping[str, str], log: Path, fix_mark: str) -> list[str]:
    exit_after = int_setting(env, "THATCH_EMBEDDER_EXIT_SECONDS", DEFAULT_EXIT_SECONDS)
    return [
        sys.executable,
        "-m",
        "thatch.embedder",
        "serve",
        "--listen",
        address.target,
        "--exit-after",
        str(exit_after),
        "--auto-started",
        "--fix-mark",
        fix_mark,
        "--log-file",
        str(log),
    ]


def detached(
    command: list[str], env: Mapping[str, str], log: Path, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session, output to the log, reaped by a daemon thread."""
    make_private_dir(log.parent)
    with open(log, "ab") as stderr:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd="/",
            env=child_environment(dict(env)),
            start_new_session=True,
            close_fds=True,
            pass_fds=pass_fds,
        )
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    return proc


def wait_bound(path: Path, proc: subprocess.Popen[bytes], until: float) -> None:
    """Return once a server listens at ``path``, ``proc`` exited, or ``until`` passed."""
    while time.monotonic() < until and proc.poll() is None:
        if probe_socket(path) in ("listening", "busy"):
            return
        time.sleep(POLL_SECONDS)


def hold_until_bound(argv: list[str]) -> int:
    """``python -m thatch.embedder.client.autostart LOCK_FD SOCKET -- COMMAND…``.

    The launcher of background starts (hooks): it inherits the frontend's flock, starts the
    server and keeps the lock until the server has bound, so the frontend returns at once
    and no second frontend can spawn a rival meanwhile. The server outlives it (init
    adopts it), so nobody is left holding a zombie.
    """
    lock_fd, socket_path, separator, *command = argv
    assert separator == "--" and command, "usage: LOCK_FD SOCKET -- COMMAND..."
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    wait_bound(Path(socket_path), server, time.monotonic() + BIND_WAIT_SECONDS)
    os.close(int(lock_fd))
    return 0


def _log_lines(log: Path, offset: int) -> list[str] | None:
    """The lines of ``log`` written after ``offset`` (all of it when it was rotated since)."""
    try:
        with open(log, "rb") as handle:
            if handle.seek(0, os.SEEK_END) >= offset:
                handle.seek(offset)
            else:  # rotated meanwhile: read the new file from its start
                handle.seek(0)
            return handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None


def log_reason(log: Path, offset: int, mark: str | None = None) -> str | None:
    """Why the spawned server stopped: its record marked ``mark`` (``STOP_RECORD``), else
    the last line written after ``offset``, without timestamp and level (a crash leaves
    no record: its traceback's last line is the best clue)."""
    lines = _log_lines(log, offset) or []
    if mark is not None:
        marked = _marked(lines, "Stopped", mark)
        if marked is not None:
            return marked
    for line in reversed(lines):
        line = line.strip()
        # The fix follows the error: the CLI's line (or anyone's starting so), the record.
        if line and not line.startswith("Fix: ") and not _MARKED_RECORD.match(line):
            return _LOG_PREFIX.sub("", line, count=1).removeprefix("Error: ")
    return None


def log_fix(log: Path, offset: int, mark: str) -> str | None:
    """The server's fix after ``offset``, from the record marked ``mark`` (``FIX_RECORD``)
    that only the server started with it writes: it knows which models this machine has."""
    return _marked(_log_lines(log, offset) or [], "Fix", mark)


def _marked(lines: list[str], kind: str, mark: str) -> str | None:
    for line in reversed(lines):
        record = _MARKED_RECORD.match(line)
        if record is not None and record.group(1) == kind and record.group(2) == mark:
            return record.group(3).strip() or None
    return None


def offline_error(text: str) -> EmbedderUnavailable | None:
    """The offline-cache failure named in a log line or status detail, if that is what it is."""
    offline = _OFFLINE.search(text)
    if offline is None:
        return None
    return EmbedderUnavailable(offline.group(0), fix_offline(offline.group(1)))


def start_failure(address: Address, reason: str, fix: str | None = None) -> EmbedderUnavailable:
    """``fix``: the server's own, when it wrote one (a model it cannot get names the
    import or pull that works on this machine)."""
    offline = offline_error(reason)
    if offline is not None:
        return EmbedderUnavailable(offline.cause, fix) if fix else offline
    # A server that holds the instance lock but does not answer here is an orphan: its
    # own fix ("nothing to do, it is running") is right for a person starting a second one.
    if fix is not None and "an embedder is already running at" not in reason:
        return EmbedderUnavailable(
            f"nothing is listening at {address} (auto-start failed: {reason.rstrip('.')})", fix
        )
    # An embedder that lost its socket file still holds the address: only stopping it helps.
    fix = FIX_ORPHAN if "an embedder is already running at" in reason else FIX_START
    return EmbedderUnavailable(
        f"nothing is listening at {address} (auto-start failed: {reason.rstrip('.')})", fix
    )


@dataclass
class Silence:
    """A server that accepts connections and answers nothing, watched since ``since``.

    Hung means silent for ``SILENT_SECONDS`` while its process makes no progress: stopped,
    or under 1 % of a CPU (a deadlock). A server that answers nothing because every worker
    is busy (a large reembed beside several agents) burns CPU: that is waited for, as a
    server whose process cannot be watched (no /proc, pid unknown) is."""

    pid: int | None
    since: float
    ticks: int | None

    @classmethod
    def start(cls, socket_path: Path) -> Silence:
        from thatch.embedder.client.instance_files import running_pid

        pid = running_pid(socket_path)
        progress = _progress(pid) if pid is not None else None
        return cls(pid, time.monotonic(), progress[1] if progress else None)

    def hung(self) -> bool:
        elapsed = time.monotonic() - self.since
        if elapsed < SILENT_SECONDS or self.pid is None or self.ticks is None:
            return False
        progress = _progress(self.pid)
        if progress is None:
            return False
        state, ticks = progress
        idle = ticks - self.ticks < 0.01 * elapsed * _TICKS_PER_SECOND
        if state in ("T", "t") or idle:
            return True
        self.since, self.ticks = time.monotonic(), ticks  # busy: watch it afresh
        return False


_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _progress(pid: int) -> tuple[str, int] | None:
    """(state, user + system CPU ticks) of ``pid`` from /proc; None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def hung(address: Address, pid: int | None) -> EmbedderUnavailable:
    """The error for a running server that does not answer (``Silence``)."""
    which = f"the embedder (pid {pid})" if pid is not None else "the embedder"
    return EmbedderUnavailable(
        f"{which} at {address} is running but does not answer "
        f"(not even 'starting') for {SILENT_SECONDS:g} s",
        "stop it, then retry: thatch embedder stop",
    )


def not_a_socket(address: Address) -> EmbedderUnavailable:
    """The error for a path that holds something other than a socket; nothing is removed."""
    path = address.path
    return EmbedderUnavailable(
        f"{path} exists and is not a socket, so no embedder can listen at {address} "
        "(auto-start never removes it)",
        f"move {path} away if it is not needed, or set THATCH_EMBEDDER_ADDR to another "
        "unix:/// path",
    )


def untrusted(address: Address, problem: str) -> EmbedderUntrusted:
    """The error for a socket that is not ours; the caller sends nothing."""
    return EmbedderUntrusted(f"refusing to send text to {address}: {problem}", FIX_UNTRUSTED)


def check_trusted(address: Address) -> None:
    """Raise ``EmbedderUntrusted`` unless the socket (if any) and its directory are ours."""
    assert address.path is not None
    problem = socket_problem(address.path)
    if problem is not None:
        raise untrusted(address, problem)


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


@dataclass(frozen=True)
class StartOutcome:
    serving: bool
    spawned_pid: int | None  # the server this call started, None if one was already there


NEEDS_SPAWN = ("absent", "refused")


class AutoStarter:
    """One auto-start attempt against a unix address.

    ``health(timeout)`` is the client's gRPC health check on its own channel, waiting for
    the channel to become ready; ``notice`` runs once if starting takes over a second.
    """

    def __init__(
        self,
        address: Address,
        env: Mapping[str, str],
        health: Callable[[float], Health],
        notice: Callable[[], None] | None = None,
    ) -> None:
        assert address.path is not None, "auto-start needs a unix address"
        self.address = address
        self.path = address.path
        self.env = env
        self.health = health
        self.notice = notice
        self.log = embedder_log_file(env)
        # Marks the fix record of the server this attempt starts: unguessable, so no
        # other text in the log can pass for it.
        self.fix_mark = os.urandom(8).hex()

    def state(self, timeout: float = PROBE_SECONDS) -> SocketState | Health:
        """``SERVING`` / ``NOT_SERVING`` for a live server, ``UNREACHABLE`` for a socket
        that accepts but whose server does not answer at all, else the socket's state."""
        found = probe_socket(self.path, timeout)
        if found not in ("listening", "busy"):
            return found
        return self.health(timeout)

    def run(self, wait: float) -> StartOutcome:
        """Make sure an embedder runs; wait up to ``wait`` s for it to serve (0: don't wait)."""
        deadline = time.monotonic() + wait
        timer = None
        if self.notice is not None and wait > 1.0:
            timer = threading.Timer(1.0, self.notice)
            timer.daemon = True
            timer.start()
        proc: subprocess.Popen[bytes] | None = None
        log_offset = 0
        silent: Silence | None = None
        try:
            check_trusted(self.address)
            while True:
                state = self.state(min(PROBE_SECONDS, max(deadline - time.monotonic(), 0.05)))
                if state == "SERVING":
                    return StartOutcome(True, proc.pid if proc else None)
                # A server not ours whose socket accepts but which answers nothing, not
                # even "starting" (a starting server says NOT_SERVING at once), is hung
                # (stopped, deadlocked): waiting out the deadline would only end in "still
                # starting", minutes later.
                if state != "UNREACHABLE" or proc is not None:
                    silent = None
                elif silent is None:
                    silent = Silence.start(self.path)
                elif silent.hung():
                    raise hung(self.address, silent.pid)
                if state == "denied":
                    raise start_failure(self.address, f"permission denied on {self.path}")
                if state == "not_socket":
                    raise not_a_socket(self.address)
                if state in NEEDS_SPAWN and (proc is None or proc.poll() is not None):
                    if proc is not None:  # ours exited and nobody else serves: say why
                        reason = log_reason(self.log, log_offset, self.fix_mark)
                        raise start_failure(
                            self.address,
                            reason or f"the embedder exited with {proc.returncode}",
                            log_fix(self.log, log_offset, self.fix_mark),
                        )
                    log_offset = _log_size(self.log)
                    proc = self._spawn_locked(deadline, background=wait <= 0)
                    if wait <= 0:
                        return StartOutcome(False, proc.pid if proc else None)
                    continue
                if wait <= 0:
                    return StartOutcome(False, None)
                if time.monotonic() >= deadline:
                    raise EmbedderUnavailable(STILL_STARTING, FIX_STARTING)
                time.sleep(POLL_SECONDS)
        finally:
            if timer is not None:
                timer.cancel()

    def _spawn_locked(self, deadline: float, *, background: bool) -> subprocess.Popen[bytes] | None:
        """Spawn a server under the lock unless someone else's is there by then."""
        try:
            make_private_dir(self.path.parent)
            check_trusted(self.address)  # the directory may have appeared meanwhile
            lock_wait = 0.0 if background else min(LOCK_WAIT_SECONDS, deadline - time.monotonic())
            with exclusive_lock(Path(f"{self.path}.lock"), max(lock_wait, 0.0)) as lock:
                if not lock.acquired:
                    # Another frontend is starting one right now (background: let it), or
                    # started one and still holds the lock: fine as long as it listens.
                    if background or probe_socket(self.path) in ("listening", "busy"):
                        return None
                    raise start_failure(
                        self.address, f"another process held {self.path}.lock for {lock_wait:g} s"
                    )
                found = probe_socket(self.path)
                if found == "not_socket":
                    raise not_a_socket(self.address)
                if found not in NEEDS_SPAWN:
                    return None
                if found == "refused":  # a socket nobody listens on: provably dead, replace it
                    self.path.unlink(missing_ok=True)
                command = spawn_command(self.address, self.env, self.log, self.fix_mark)
                if background:
                    launcher = [sys.executable, "-m", "thatch.embedder.client.autostart"]
                    launcher += [str(lock.fd), str(self.path), "--", *command]
                    detached(launcher, self.env, self.log, pass_fds=(lock.fd,))
                    lock.handed_off = True
                    return None
                proc = detached(command, self.env, self.log)
                wait_bound(self.path, proc, min(deadline, time.monotonic() + BIND_WAIT_SECONDS))
                return proc
        except OSError as error:
            where = f": {error.filename}" if error.filename else ""
            raise start_failure(self.address, f"{error.strerror or error}{where}") from error


if __name__ == "__main__":
    sys.exit(hold_until_bound(sys.argv[1:]))
