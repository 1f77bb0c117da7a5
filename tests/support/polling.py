"""Waiting for a real state change in another thread or process, with a bound."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll(condition: Callable[[], object], timeout: float = 10.0) -> bool:
    """True once ``condition()`` is true; False if it is still false after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)  # between checks of a condition, not instead of one
    return True
