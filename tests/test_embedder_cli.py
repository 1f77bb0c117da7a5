"""`thatch embedder start|stop|status` (and `serve` being the server's command)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_cleanup import alive, embedder_pids, stop_embedders, wait_until
from thatch.cli.main import cli
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import FIX_REMOTE, EmbedderUnavailable
from thatch.embedder.client.kind import Kind
from thatch.embedder.models.fixes import unavailable_fix
from thatch.embedder.server.instance import lock_holder, lock_path, pid_path, running_pid


@pytest.fixture
def sock(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """THATCH_EMBEDDER_ADDR on a temp socket with the mock model; servers stopped after."""
    path = short_tmp / "e.sock"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{path}")
    monkeypatch.setenv("THATCH_MODEL", "mock")
    try:
        yield path
    finally:
        stop_embedders(str(path))


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["embedder", *args], catch_exceptions=False)


def test_serve_is_the_server_command() -> None:
    """`thatch embedder serve` is the very command object of `thatch-embedder serve`."""
    from thatch.cli.embedder_cmds import embedder
    from thatch.embedder.server.serve_cmd import serve

    assert embedder.commands["serve"] is serve


def test_start_status_stop_round_trip(sock: Path) -> None:
    """start leaves a detached server, status describes it, stop really stops it."""
    started = run("start")
    assert started.exit_code == 0, started.stderr
    [pid] = embedder_pids(str(sock))
    assert started.stdout == f"embedder serving at unix://{sock} (pid {pid}, model mock)\n"

    again = run("start")
    assert again.stdout == f"embedder already running at unix://{sock} (pid {pid}, model mock)\n"
    assert embedder_pids(str(sock)) == [pid]

    text = run("status")
    assert text.exit_code == 0
    lines = dict(line.split(":", 1) for line in text.stdout.splitlines())
    assert lines["pid"].strip() == str(pid)
    assert lines["model"].strip() == "mock"
    assert lines["health"].strip() == "SERVING"
    assert lines["auto-started"].strip() == "yes"
    assert lines["exit after"].strip() == "3600 s"

    facts = json.loads(run("status", "--json").stdout)
    assert facts["address"] == f"unix://{sock}"
    assert (facts["pid"], facts["model_id"], facts["dim"]) == (pid, "mock", 384)
    assert (facts["auto_started"], facts["health"], facts["pooling"]) == (True, "SERVING", "mean")

    stopped = run("stop")
    assert (stopped.exit_code, stopped.stdout) == (0, "embedder stopped\n")
    assert not alive(pid)
    assert not sock.exists()

    assert (run("stop").exit_code, run("stop").stdout) == (0, "embedder not running\n")
    gone = run("status")
    assert gone.exit_code == 1
    assert gone.stderr == (
        f"Error: no embedder answering at unix://{sock}.\nFix: thatch embedder start\n"
    )


def test_start_refuses_remote_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """start/stop manage only a local unix-socket embedder."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "dns:///embedder.example:50051")
    result = run("start")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: thatch embedder start manages a local unix-socket embedder only; "
        "dns:///embedder.example:50051 is remote.\n"
    )


def test_invalid_address_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An invalid THATCH_EMBEDDER_ADDR gives the spec's message and exit 1, no traceback."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "http://x")
    for command in ("start", "stop", "status"):
        result = run(command)
        assert result.exit_code == 1
        assert result.stderr == (
            'Error: invalid THATCH_EMBEDDER_ADDR "http://x": expected unix:///path, '
            "host:port or dns:///host:port\n"
        )


def test_status_of_unreachable_remote(monkeypatch: pytest.MonkeyPatch) -> None:
    """status of a TCP address nobody answers: error and the remote fix, exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"127.0.0.1:{port}")
    result = run("status")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no embedder answering at 127.0.0.1:{port}.\nFix: {FIX_REMOTE}\n"
    )


def test_start_timeout_names_the_log_file(sock: Path, isolated_env: Path) -> None:
    """A server that never becomes ready: notice after a second, error naming the log, exit 1."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(sock))
        silent.listen(64)
        result = run("start", "--wait", "2.5")
    log = isolated_env / ".cache" / "thatch" / "embedder.log"
    assert result.exit_code == 1
    assert result.stderr == (
        "Starting embedder…\n"
        f"Error: the embedder did not start serving within 2.5 s; log: {log}\n"
        "Fix: retry in a minute, or run thatch embedder status\n"
    )
    assert embedder_pids(str(sock)) == []


def test_start_failure_gives_cause_and_log(
    sock: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that exits at once (offline, model not cached): its cause, the log, the fix."""
    monkeypatch.setenv("THATCH_MODEL", "thatch-test/absent")
    result = run("start", "--wait", "60")
    log = isolated_env / ".cache" / "thatch" / "embedder.log"
    assert result.exit_code == 1
    fix = unavailable_fix("thatch-test/absent", os.environ, hub=False, by_variable=True)
    assert result.stderr.endswith(
        "Error: model thatch-test/absent is not in the local cache and HF_HUB_OFFLINE=1; "
        f"log: {log}\nFix: {fix}\n"
    )


def test_stop_ignores_stale_pid_file(sock: Path) -> None:
    """A pid file naming a dead process means 'not running'; nothing is signalled."""
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    Path(f"{sock}.pid").write_text(dead.stdout)
    result = run("stop")
    assert (result.exit_code, result.stdout) == (0, "embedder not running\n")


@pytest.mark.parametrize("lock_file", ["left by a killed server", "none"])
def test_stop_never_signals_a_process_the_stale_pid_now_names(sock: Path, lock_file: str) -> None:
    """A killed server leaves its pid file; that pid may since be any process, one whose
    command line names an embedder too (an editor on embedder.md). It is not signalled:
    nobody holds the instance lock, or, without one, it is no embedder server."""
    if lock_file != "none":
        lock_path(sock).touch()
    with subprocess.Popen(
        ["bash", "-c", 'exec -a "vim notes-about-the-embedder.md" sleep 600'],
    ) as bystander:
        try:
            pid_path(sock).write_text(f"{bystander.pid}\n")
            wait_until(
                lambda: b"vim" in Path(f"/proc/{bystander.pid}/cmdline").read_bytes(), 30, "exec"
            )
            assert running_pid(sock) is None
            result = run("stop")
            assert (result.exit_code, result.stdout) == (0, "embedder not running\n")
            assert bystander.poll() is None
        finally:
            bystander.kill()


# -- one server per address, found without its socket ------------------------------------


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
        "Fix: thatch embedder stop && thatch embedder start\n"
    )

    # A frontend's auto-start cannot start a rival: it explains what holds the address.
    with EmbedderClient(f"unix://{sock}") as client, pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY, timeout=60, start_wait=60)
    assert caught.value.cause == (
        f"nothing is listening at unix://{sock} (auto-start failed: an embedder is already "
        f"running at unix://{sock} (pid {pid}))"
    )
    assert caught.value.fix == "stop it, then retry: thatch embedder stop"
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
