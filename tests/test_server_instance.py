"""One embedder per address, found again without its socket (issue 9 §5; real processes).

Two ``serve`` processes are released at the same instant (both have imported everything
and wait on stdin; one write to each starts them): exactly one serves, the other exits 1
naming the winner's pid. A server whose socket was deleted still holds the address:
another ``serve`` or an auto-start refuses, ``status`` says the socket is missing, and
``stop`` finds and stops it, from the pid file or, without that, from the kernel's lock
table.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from thatch.cli.main import cli
from thatch.embedder.client import EmbedderClient
from thatch.embedder.encoder import Kind
from thatch.embedder.errors import EmbedderUnavailable
from thatch.embedder.instance import lock_holder, lock_path, pid_path, running_pid

from tests.support.embedder_cleanup import alive, embedder_pids, stop_embedders, wait_until

ROUNDS = 5

# Imports first, then wait for the starting gun on stdin, then `thatch-embedder serve`.
RACER = """
import sys
from thatch.embedder.__main__ import main
import thatch.embedder.server, thatch.embedder.mock, thatch.embedder.models
sys.stdin.buffer.read(1)
main(["serve", "--listen", sys.argv[1], "--model", "mock", "--log-file", sys.argv[2]])
"""


@pytest.fixture
def sock(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = short_tmp / "e.sock"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{path}")
    monkeypatch.setenv("THATCH_MODEL", "mock")
    try:
        yield path
    finally:
        stop_embedders(str(path))


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


def test_two_servers_started_together_one_serves(sock: Path, tmp_path: Path) -> None:
    """Round after round, exactly one of two simultaneous servers runs; the other says who."""
    for _ in range(ROUNDS):
        procs = racers(sock, tmp_path)
        try:
            wait_until(lambda procs=procs: any(p.poll() is not None for p in procs), 60, "a loser")
            [loser] = [p for p in procs if p.poll() is not None]
            [winner] = [p for p in procs if p is not loser]
            assert loser.returncode == 1
            assert loser.stderr is not None
            assert loser.stderr.read().decode() == (
                f"Error: an embedder is already running at unix://{sock} (pid {winner.pid})\n"
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


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["embedder", *args], catch_exceptions=False)


def started(sock: Path) -> int:
    result = run("start")
    assert result.exit_code == 0, result.stderr
    [pid] = embedder_pids(str(sock))
    return pid


@pytest.mark.parametrize("pid_file", ["kept", "deleted"])
def test_server_without_its_socket_is_found_and_stopped(sock: Path, pid_file: str) -> None:
    """Socket deleted (and even the pid file): no second server, status explains, stop works."""
    pid = started(sock)
    assert pid_path(sock).read_text() == f"{pid}\n"
    assert lock_holder(lock_path(sock)) == pid
    sock.unlink()
    if pid_file == "deleted":
        pid_path(sock).unlink()

    status = run("status")
    assert status.exit_code == 1
    assert status.stderr == (
        f"Error: the embedder (pid {pid}) is running but its socket {sock} is missing.\n"
        "Fix: thatch embedder stop, then thatch embedder start\n"
    )

    # A frontend's auto-start cannot start a rival: it explains what holds the address.
    with EmbedderClient(f"unix://{sock}") as client, pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY, timeout=60, start_wait=60)
    assert caught.value.cause == (
        f"nothing is listening at unix://{sock} (auto-start failed: an embedder is already "
        f"running at unix://{sock} (pid {pid}))"
    )
    assert caught.value.fix == "run thatch embedder stop, then retry"
    assert embedder_pids(str(sock)) == [pid]

    stopped = run("stop")
    assert (stopped.exit_code, stopped.stdout) == (0, "embedder stopped\n")
    assert not alive(pid)
    assert embedder_pids(str(sock)) == []
    assert not lock_path(sock).exists() and not pid_path(sock).exists()
    assert run("stop").stdout == "embedder not running\n"


def test_a_new_server_starts_after_the_old_one_is_killed(sock: Path) -> None:
    """SIGKILL leaves the lock file and a stale pid file; neither blocks the next server."""
    pid = started(sock)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), 30, "the killed embedder to go")
    assert pid_path(sock).exists() and lock_path(sock).exists()
    assert running_pid(sock) is None
    new = started(sock)
    assert new != pid and pid_path(sock).read_text() == f"{new}\n"
