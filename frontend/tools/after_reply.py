"""Work a tool call leaves for after its answer is written: recall-count stamps.

A stamp does not change what the agent is told, and it is a write transaction (~0.4 ms,
and now and then the WAL checkpoint that commit triggers). The MCP server queues it during
the call, releases it once the answer is written, and one background thread runs the
queue in order. Shutdown (stdin EOF or SIGTERM) runs every kept job still queued, so a
clean exit never loses a recall count; jobs queued with ``keep=False`` are dropped then.
(Pending embeddings have their own scheduler, ``pending_fill.py``.)
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "AfterReply",
]


@dataclass(frozen=True)
class _Job:
    run: Callable[[], None]
    keep: bool
    key: str | None


class AfterReply:
    """Jobs held until ``release``, then run by one thread; ``close`` runs the kept rest."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: list[_Job] = []  # queued by calls whose answers may not be out yet
        self._ready: deque[_Job] = deque()
        self._running: _Job | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def defer(self, run: Callable[[], None], *, keep: bool = True, key: str | None = None) -> None:
        """Queue ``run``; with ``key``, not when a job of that key is queued and not started.

        After ``close`` a kept job runs at once in the caller (nothing would run it later).
        """
        with self._cond:
            if not self._closed:
                queued = (*self._held, *self._ready)
                if key is None or all(job.key != key for job in queued):
                    self._held.append(_Job(run, keep, key))
                return
        if keep:
            _run_quietly(run)

    def release(self) -> None:
        """The answers of the calls so far are written: their jobs may run now."""
        with self._cond:
            if not self._held or self._closed:
                return
            self._ready.extend(self._held)
            self._held.clear()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="thatch-after-reply", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def wait_idle(self) -> None:
        """Wait until every released job has run (held ones wait for their release)."""
        with self._cond:
            while self._ready or self._running is not None:
                self._cond.wait()

    def close(self) -> None:
        """Run every kept job not yet run, here and now; drop the rest; stop the thread.

        A kept job the thread is running is waited for (the process may exit right after);
        a running fill is not: its write is one transaction, so cutting it loses nothing.
        """
        with self._cond:
            self._closed = True
            kept = [job for job in (*self._ready, *self._held) if job.keep]
            self._ready.clear()
            self._held.clear()
            self._cond.notify_all()
            while self._running is not None and self._running.keep:
                self._cond.wait()
        for job in kept:
            _run_quietly(job.run)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready and not self._closed:
                    self._cond.wait()
                if not self._ready:
                    return
                job = self._running = self._ready.popleft()
            try:
                _run_quietly(job.run)
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()


def _run_quietly(run: Callable[[], None]) -> None:
    # Jobs handle their own expected failures; anything else is one stderr line, since
    # the answer it belonged to is long gone.
    try:
        run()
    except Exception as error:
        print(f"[thatch] background work failed: {error}", file=sys.stderr)
