"""Send a signal to one thread of another process, not to the process.

``kill`` lets the kernel choose the thread, and it nearly always chooses the main one,
which hides a server whose main thread only wakes for a signal delivered to itself. A
thread-directed signal (``tgkill``) makes the other case happen every time.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

__all__ = ["signal_a_worker_thread"]


def _blocks(pid: int, tid: int, sig: int) -> bool:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    masks = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    return bool(int(masks["SigBlk"].strip(), 16) & (1 << (sig - 1)))


def signal_a_worker_thread(pid: int, sig: int) -> int:
    """Deliver ``sig`` to a thread of ``pid`` other than its main one that does not block
    it; that thread's id."""
    tids = sorted(int(name) for name in os.listdir(f"/proc/{pid}/task"))
    workers = [tid for tid in tids if tid != pid and not _blocks(pid, tid, sig)]
    assert workers, f"process {pid} has no thread but its main one that takes signal {sig}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, workers[-1], sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {workers[-1]}, {sig})")
    return workers[-1]
