"""Send a signal to one thread of another process, not to the process.

``kill`` lets the kernel choose the thread, and it nearly always chooses the main one,
which hides a server whose main thread only wakes for a signal delivered to itself. A
thread-directed signal (``tgkill``) makes the other case happen every time.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from pathlib import Path

__all__ = ["signal_a_worker_thread"]

# tgkill's number where glibc (before 2.30) has no wrapper for it.
_TGKILL_SYSCALL = {"x86_64": 234, "aarch64": 131}


def _blocks(pid: int, tid: int, sig: int) -> bool:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    return bool(int(masks["SigBlk"].strip(), 16) & (1 << (sig - 1)))


def _tgkill(pid: int, tid: int, sig: int) -> int:
    """0, or the errno of the failure."""
    libc = ctypes.CDLL(None, use_errno=True)
    tgkill = getattr(libc, "tgkill", None)
    if tgkill is not None:
        failed = tgkill(pid, tid, sig) != 0
    else:
        failed = libc.syscall(_TGKILL_SYSCALL[platform.machine()], pid, tid, sig) != 0
    return ctypes.get_errno() if failed else 0


def signal_a_worker_thread(pid: int, sig: int) -> int:
    """Deliver ``sig`` to a thread of ``pid`` other than its main one that does not block
    it; that thread's id. The oldest such thread first: pools grow and shrink at the top,
    and one that ends meanwhile is passed over."""
    for tid in sorted(int(name) for name in os.listdir(f"/proc/{pid}/task")):
        try:
            if tid == pid or _blocks(pid, tid, sig):
                continue
        except FileNotFoundError:  # it ended since the listing
            continue
        failed = _tgkill(pid, tid, sig)
        if failed == 0:
            return tid
        if failed != errno.ESRCH:
            raise OSError(failed, f"tgkill({pid}, {tid}, {sig}): {os.strerror(failed)}")
    raise AssertionError(f"process {pid} has no thread but its main one that takes signal {sig}")
