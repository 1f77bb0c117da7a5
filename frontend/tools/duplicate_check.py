"""The background comparison of memories no write compared (docs/database.md
§duplicate-candidates): long-lived processes (``thatch mcp``, ``thatch ui``) run it so
an upgraded database gets its duplicate candidates without any session start paying.
"""

from __future__ import annotations

import contextlib
import random
import time

from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.background import Background

__all__ = ["DuplicateChecker"]

# Between two chunks (at least; as long as the chunk took when that is longer): the lock
# and the write lock are free for requests meanwhile, and the agents keep their CPU.
PAUSE_SECONDS = 0.05
# When every store is checked: look again this often (the earlier release writes too).
IDLE_SECONDS = 60.0


class DuplicateChecker(Background):
    """Checks every store in chunks (``Store.check_duplicates``) on its own thread until
    ``close``. A cache: any failure waits for the next round, nothing is printed."""

    name = "thatch-dup-check"

    def __init__(self, store: Store) -> None:
        self._store = store
        self._random = random.Random()
        super().__init__()

    def _run(self) -> None:
        while not self._stop.is_set():
            worked = False
            with contextlib.suppress(Exception):
                for name in self._store.store_names():
                    # From a random row on, then from the start: several servers on one
                    # file (one per session) mostly check different chunks.
                    middle = self._random.randrange(self._store.last_entry_rowid() + 1)
                    for start in (middle, 0):
                        worked |= self._pass(name, start)
            self._stop.wait(PAUSE_SECONDS if worked else IDLE_SECONDS)

    def _pass(self, name: str, after: int) -> bool:
        """Chunks of ``name`` from rowid ``after`` to the end; whether any was checked.
        Waits at least as long as each chunk took: at most half a core, however big."""
        worked = False
        while not self._stop.is_set():
            began = time.monotonic()
            _, after = self._store.check_duplicates(name, after=after)
            if not after:
                return worked
            worked = True
            self._stop.wait(max(PAUSE_SECONDS, time.monotonic() - began))
        return worked
