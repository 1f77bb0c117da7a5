"""common/stop_signals: a stop asked by a signal that another thread took is seen.

Each case runs in a child process, so a wait that never wakes shows as the child's time
running out rather than as a hung suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# The child's main thread waits while a thread of its own takes SIGUSR1, whose handler
# sets the stop; with a plain Event.wait the handler would wait for the main thread.
CHILD = textwrap.dedent(
    """
    import signal, sys, threading
    from thatch.common.stop_signals import wait_for_stop

    stop = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())

    def take_the_signal():
        while not stop._cond._waiters:  # until the main thread is inside Event.wait
            threading.Event().wait(0.001)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    threading.Thread(target=take_the_signal).start()
    print(wait_for_stop(stop, None if sys.argv[1] == "none" else float(sys.argv[1])))
    """
)


@pytest.mark.parametrize("seconds", ["none", "3600"])
def test_a_signal_taken_by_another_thread_ends_the_wait(seconds: str) -> None:
    """With no time and with an hour: the handler's stop is seen, not slept through."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, seconds], capture_output=True, text=True, timeout=60
    )
    assert (child.returncode, child.stdout, child.stderr) == (0, "True\n", "")


def test_a_wait_with_nothing_asked_ends_at_its_time_unset() -> None:
    """Slices add up to the time asked, and the answer is False."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD.replace("signal.pthread_kill", "(lambda *_: None)"), "0.2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (child.returncode, child.stdout, child.stderr) == (0, "False\n", "")
