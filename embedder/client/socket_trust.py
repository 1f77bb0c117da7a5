"""Whether a unix socket is ours to send memories and prompts to (docs/embedder.md §transport).

Frontends send memory text and prompts over unix sockets (the embedder's, the recall
scan's). Whoever can write the socket's directory can put a listener of their own there,
so before sending anything a client checks that the socket and its directory belong to
the current user and are not writable by group or others, and that the process listening
runs as the current user (``SO_PEERCRED`` on a connection).

Standard library only: the prompt hook's recall-scan client imports this module.
"""

from __future__ import annotations

import errno
import os
import pwd
import socket
import stat
import struct
from pathlib import Path
from typing import Literal

__all__ = [
    "PROBE_SECONDS",
    "PathCheck",
    "Peer",
    "SocketState",
    "check_path",
    "directory_problem",
    "peer_credentials",
    "peer_problem",
    "probe",
    "socket_problem",
    "tighten_own_directory",
]

SocketState = Literal["absent", "not_socket", "refused", "listening", "busy", "denied"]
PROBE_SECONDS = 0.2
_SHARED_WRITE = stat.S_IWGRP | stat.S_IWOTH


# Plain classes, not dataclasses: building those at import costs the prompt hook milliseconds.
class Peer:
    """What one raw connect found at a socket path; ``pid``/``uid`` when it listened."""

    __slots__ = ("pid", "state", "uid")

    def __init__(self, state: SocketState, pid: int | None = None, uid: int | None = None):
        self.state = state
        self.pid = pid
        self.uid = uid


class PathCheck:
    """``problem`` (why the path must not be used) or, when none, the socket's identity.

    ``identity`` is ``(st_dev, st_ino)`` of a socket file, None when nothing (or something
    that is not a socket) is there.
    """

    __slots__ = ("identity", "problem")

    def __init__(self, problem: str | None, identity: tuple[int, int] | None = None):
        self.problem = problem
        self.identity = identity


def user(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a uid without a passwd entry."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a connected unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def probe(path: Path, timeout: float = PROBE_SECONDS) -> Peer:
    """What lives at ``path``, judged by one raw connect (no gRPC), and who listens there.

    Only a refused connection or a path that is not a socket proves nothing lives there;
    a timeout or a full backlog means a live (slow) server.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return Peer("not_socket" if os.path.lexists(path) else "absent")  # dangling symlink
    except PermissionError:
        return Peer("denied")
    if not stat.S_ISSOCK(mode):
        return Peer("not_socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except ConnectionRefusedError:
            return Peer("refused")
        except FileNotFoundError:
            return Peer("absent")
        except PermissionError:
            return Peer("denied")
        except (TimeoutError, BlockingIOError):
            return Peer("busy")  # full backlog: alive but slow
        except OSError as error:
            if error.errno in (errno.EAGAIN, errno.EINPROGRESS):
                return Peer("busy")
            raise
        pid, uid = peer_credentials(sock)
    return Peer("listening", pid, uid)


def directory_problem(
    directory: Path, uid: int | None = None, *, tightened: bool = False
) -> str | None:
    """Why ``directory`` must not hold our sockets, or None (also when it does not exist).

    ``tightened``: judge it as ``tighten_own_directory`` would leave it (group/other write
    bits on a directory of ours are no problem), without changing it.
    """
    uid = os.geteuid() if uid is None else uid
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        return None  # whoever creates it makes it private
    except OSError as error:
        return f"cannot inspect socket directory {directory}: {error.strerror or error}"
    if info.st_uid != uid:
        return f"socket directory {directory} belongs to {user(info.st_uid)}, not to you"
    if info.st_mode & _SHARED_WRITE and not tightened:
        return (
            f"socket directory {directory} is writable by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o})"
        )
    return None


def tighten_own_directory(directory: Path, uid: int | None = None) -> bool:
    """Make a directory of ours that group or others can write 0700; True if it changed.

    Only for thatch's own socket directory, which ``thatch model import`` or a log file may
    have created first under a umask of 002. Safe: from the chmod on nobody else can add
    an entry, and what is already there is still checked by owner and by listener.
    """
    uid = os.geteuid() if uid is None else uid
    try:
        info = os.stat(directory)
        if info.st_uid != uid or not info.st_mode & _SHARED_WRITE:
            return False
        os.chmod(directory, 0o700)
    except OSError:
        return False
    return True


def ancestors_problem(directory: Path, uid: int | None = None) -> str | None:
    """Why a directory above ``directory`` lets someone else swap it, or None.

    Whoever can rename entries in a parent can replace our private directory with theirs
    between our check and gRPC's connect: every ancestor must belong to us or root and be
    writable by nobody else unless sticky (like /tmp, where only owners rename entries).
    """
    uid = os.geteuid() if uid is None else uid
    for ancestor in Path(os.path.abspath(directory)).parents:
        try:
            info = os.stat(ancestor)
        except OSError as error:
            return f"cannot inspect {ancestor}: {error.strerror or error}"
        if info.st_uid not in (uid, 0):
            return (
                f"{ancestor} (above socket directory {directory}) belongs to "
                f"{user(info.st_uid)}, who could replace it"
            )
        if info.st_mode & _SHARED_WRITE and not info.st_mode & stat.S_ISVTX:
            return (
                f"{ancestor} (above socket directory {directory}) is writable by group or "
                f"others (mode {stat.S_IMODE(info.st_mode):04o}), who could replace it"
            )
    return None


def check_path(path: Path, uid: int | None = None, *, tightened: bool = False) -> PathCheck:
    """The socket file, its directory and the directories above it (see the two checks);
    ``tightened`` as in ``directory_problem``."""
    uid = os.geteuid() if uid is None else uid
    problem = directory_problem(path.parent, uid, tightened=tightened) or ancestors_problem(
        path.parent, uid
    )
    if problem is not None:
        return PathCheck(problem)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return PathCheck(None)
    except OSError as error:
        return PathCheck(f"cannot inspect {path}: {error.strerror or error}")
    if not stat.S_ISSOCK(info.st_mode):
        return PathCheck(None)  # nothing listens on a regular file; auto-start replaces it
    if info.st_uid != uid:
        return PathCheck(f"socket {path} belongs to {user(info.st_uid)}, not to you")
    if info.st_mode & _SHARED_WRITE:
        return PathCheck(
            f"socket {path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
        )
    return PathCheck(None, (info.st_dev, info.st_ino))


def peer_problem(path: Path, pid: int, peer_uid: int, uid: int | None = None) -> str | None:
    """Why the process listening at ``path`` must not be sent text, or None."""
    uid = os.geteuid() if uid is None else uid
    if peer_uid == uid:
        return None
    return f"the process listening at {path} (pid {pid}) runs as {user(peer_uid)}, not as you"


def socket_problem(
    path: Path, *, uid: int | None = None, timeout: float = PROBE_SECONDS
) -> str | None:
    """Files and listener in one check (one probe connection); None when ours or absent."""
    check = check_path(path, uid)
    if check.problem is not None or check.identity is None:
        return check.problem
    peer = probe(path, timeout)
    if peer.state != "listening" or peer.pid is None or peer.uid is None:
        return None
    return peer_problem(path, peer.pid, peer.uid, uid)
