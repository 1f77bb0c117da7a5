"""One job on a daemon thread of its own, for long-lived processes (``thatch mcp``,
``thatch ui``): started once, stopped by ``close``, which sets ``_stop`` and waits for it.
"""

from __future__ import annotations

import threading
from typing import Self

__all__ = ["Background"]


class Background:
    """Subclasses give the thread a ``name`` and write ``_run``, which returns soon after
    ``self._stop`` is set (wait on it rather than sleeping)."""

    name = "thatch-background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        raise NotImplementedError
