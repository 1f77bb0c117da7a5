"""Find and stop embedder processes a test started, however they were started.

Auto-started servers run in their own session and may outlive the process that spawned
them, so tests find them by what their command line mentions (the socket path) and stop
them in teardown, even when the test failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tests.support.polling import poll


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def embedder_pids(mentioning: str) -> list[int]:
    """Live ``thatch.embedder serve`` processes whose command line mentions ``mentioning``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        args = cmdline(int(entry.name))
        joined = " ".join(args)
        wanted = args[1:4] == ["-m", "thatch.embedder", "serve"] and mentioning in joined
        if wanted and alive(int(entry.name)):
            pids.append(int(entry.name))
    return sorted(pids)


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` s."""
    if not poll(condition, timeout):
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def stop_embedders(mentioning: str, timeout: float = 15.0) -> None:
    """SIGTERM every embedder mentioning ``mentioning``; SIGKILL what is left after ``timeout``."""
    pids = embedder_pids(mentioning)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        if alive(pid):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.kill(pid, sig)


_WORD = re.compile(r"\w+")


def expected_mock_vector(text: str) -> npt.NDArray[np.float32]:
    """docs/embedder.md §mock-model, written out independently of thatch.embedder.models.mock."""
    vector = np.zeros(384, dtype=np.float64)
    for word in _WORD.findall(text.lower()):
        digest = hashlib.sha256(word.encode("utf-8")).digest()
        vector[int.from_bytes(digest[:4], "big") % 384] += 1 if digest[4] % 2 == 0 else -1
    if not vector.any():
        vector[0] = 1.0
    return (vector / np.linalg.norm(vector)).astype(np.float32)
