"""One embedder per address (issue 9 §5; real processes).

Two ``serve`` processes are released at the same instant (both have imported everything
and wait on stdin; one write to each starts them): exactly one serves, the other exits 1
naming the winner's pid. (A server whose socket was deleted: test_embedder_cli.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

from tests.support.embedder_cleanup import wait_until
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.embedder.server.instance import running_pid

ROUNDS = 5

# Imports first, then wait for the starting gun on stdin, then `thatch-embedder serve`.
RACER = """
import sys
from thatch.embedder.__main__ import main
import thatch.embedder.server.grpc_server
import thatch.embedder.models.mock
import thatch.embedder.models.registry
sys.stdin.buffer.read(1)
main(["serve", "--listen", sys.argv[1], "--model", "mock", "--log-file", sys.argv[2]])
"""


def racers(sock: Path, logs: Path) -> list[subprocess.Popen[bytes]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, f"unix://{sock}", str(logs / f"racer{i}.log")],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"!")
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()  # both go now
    return procs


def any_exited(procs: list[subprocess.Popen[bytes]]) -> bool:
    return any(p.poll() is not None for p in procs)


def test_two_servers_started_together_one_serves(short_tmp: Path, tmp_path: Path) -> None:
    """Round after round, exactly one of two simultaneous servers runs; the other says who."""
    sock = short_tmp / "e.sock"
    for _ in range(ROUNDS):
        procs = racers(sock, tmp_path)
        try:
            wait_until(partial(any_exited, procs), 60, "a loser")
            [loser] = [p for p in procs if p.poll() is not None]
            [winner] = [p for p in procs if p is not loser]
            assert loser.returncode == 1
            assert loser.stderr is not None
            assert loser.stderr.read().decode() == (
                f"Error: an embedder is already running at unix://{sock} (pid {winner.pid})\n"
                "Fix: nothing to do, every agent and command shares it; to see it: thatch "
                "embedder status; or to restart it, stop it first: thatch embedder stop\n"
            )
            with EmbedderClient(f"unix://{sock}", autostart=False) as client:
                assert client.embed(["one server"], Kind.QUERY, timeout=60).model_id == "mock"
                assert client.info().pid == winner.pid
            assert running_pid(sock) == winner.pid
            winner.send_signal(signal.SIGTERM)
            assert winner.wait(30) == 0
            assert os.listdir(sock.parent) == []  # socket, pid file and lock removed
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
                if proc.stderr is not None:
                    proc.stderr.close()
