"""Embedder lifecycle over real processes: start, health, idle release, exit, shutdown."""

from __future__ import annotations

import logging.handlers
import os
import re
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.polling import poll
from tests.support.thread_signal import signal_a_worker_thread
from thatch.embedder.__main__ import main
from thatch.embedder.server.serve_cmd import setup_logging
from thatch.embedder.v1 import embedder_pb2 as pb

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def embed(proc: EmbedderProcess, texts: list[str], timeout: float = 60) -> pb.EmbedResponse:
    return proc.stub().Embed(pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=timeout)


def test_start_serve_and_stop_on_sigint(short_tmp: Path) -> None:
    """The mock server serves, reports itself, logs properly and cleans up on SIGINT."""
    env = {**os.environ, "THATCH_EMBEDDER_IDLE_SECONDS": "42"}
    with embedder_process("mock", socket_dir=short_tmp, env=env) as proc:
        assert proc.health() == SERVING
        assert proc.health("thatch.embedder.v1.Embedder") == SERVING
        assert embed(proc, ["hello world"]).model_id == "mock"
        info = proc.info()
        assert (info.model_id, info.dim, info.pid, info.loaded) == ("mock", 384, proc.pid, True)
        assert (info.idle_release_seconds, info.exit_after_seconds) == (42, 0)
        assert not info.auto_started and info.requests_served == 1
        assert proc.pid_path.read_text().strip() == str(proc.pid)
        assert proc.socket_path.stat().st_mode & 0o777 == 0o600
        assert proc.stop(signal.SIGINT) == 0
        assert not proc.socket_path.exists() and not proc.pid_path.exists()
        log = proc.log_text()
    assert f"INFO serving at {proc.address} model mock\n" in log
    assert "DEBUG Embed 1 passage texts" in log
    assert all(LOG_LINE.match(line) for line in log.splitlines()), log
    assert proc.stdout_path.read_bytes() == b""


def test_auto_started_flag_is_reported(short_tmp: Path) -> None:
    """--auto-started and --exit-after show up in Info."""
    args = ("--auto-started", "--exit-after", "3600")
    with embedder_process("mock", socket_dir=short_tmp, args=args) as proc:
        info = proc.info()
        assert info.auto_started and info.exit_after_seconds == 3600


def test_exit_after_idle_ignores_health_checks(short_tmp: Path) -> None:
    """With --exit-after 1 the server exits 0 although health checks keep coming."""
    with embedder_process("mock", socket_dir=short_tmp, args=("--exit-after", "1")) as proc:
        checks = 0

        def exited() -> bool:
            nonlocal checks
            if proc.process.poll() is not None:
                return True
            try:
                proc.health(timeout=1)
                checks += 1
            except grpc.RpcError:
                pass  # it may stop between poll() and the check
            return False

        assert poll(exited, timeout=30), proc.output()
        assert proc.process.returncode == 0 and checks > 0
        assert not proc.socket_path.exists() and not proc.pid_path.exists()
        assert "no Embed or Info call for 1 s: shutting down" in proc.log_text()


@pytest.fixture
def minilm_copy(minilm_dir: Path, tmp_path: Path) -> Path:
    """A private copy (hard links) of the imported model that a test may break."""
    copy = tmp_path / "minilm"
    shutil.copytree(minilm_dir, copy, copy_function=os.link)
    return copy


def test_idle_release_drops_memory_and_reloads(short_tmp: Path, minilm_dir: Path) -> None:
    """After --idle-seconds the session is released (RSS falls), the next Embed reloads it."""
    args = ("--idle-seconds", "1")
    with embedder_process(str(minilm_dir), socket_dir=short_tmp, args=args) as proc:
        first = embed(proc, ["an idle server gives its memory back"])
        loaded_rss = rss_kib(proc.pid)
        assert poll(lambda: not proc.info().loaded, timeout=30), proc.output()
        released_rss = rss_kib(proc.pid)
        assert proc.health() == SERVING
        again = embed(proc, ["an idle server gives its memory back"])
        assert again.vectors == first.vectors
        assert proc.info().loaded
        assert "released the model session" in proc.log_text()
    print(f"MiniLM RSS loaded {loaded_rss} KiB, released {released_rss} KiB")
    assert released_rss < loaded_rss


def test_failed_reload_reports_and_recovers(short_tmp: Path, minilm_copy: Path) -> None:
    """A reload that fails gives FAILED_PRECONDITION and NOT_SERVING until a load succeeds."""
    args = ("--idle-seconds", "1")
    with embedder_process(str(minilm_copy), socket_dir=short_tmp, args=args) as proc:
        assert poll(lambda: not proc.info().loaded, timeout=30), proc.output()
        hidden = minilm_copy / "hidden"
        hidden.mkdir()
        onnx_files = list((minilm_copy / "onnx").iterdir())
        for path in onnx_files:
            path.rename(hidden / path.name)
        with pytest.raises(grpc.RpcError) as raised:
            embed(proc, ["hello"])
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert raised.value.details().startswith("model could not be loaded: ")
        assert proc.health() == NOT_SERVING
        for path in onnx_files:
            (hidden / path.name).rename(path)
        assert embed(proc, ["hello"]).count == 1
        assert proc.health() == SERVING


def test_sigterm_during_a_burst_finishes_in_flight_calls(short_tmp: Path, minilm_dir: Path) -> None:
    """SIGTERM while calls are queued: every one completes, then exit 0 and files removed."""
    sentence = "long text about batching and graceful shutdown " * 4
    texts = [f"request {i}: {sentence}" for i in range(8)]
    callers = 8
    with embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc:
        stub = proc.stub()
        request = pb.EmbedRequest(texts=texts, kind=pb.PASSAGE)
        with ThreadPoolExecutor(callers) as pool:
            futures = [pool.submit(stub.Embed, request, timeout=120) for _ in range(callers)]
            # Every call has reached the server (its arrival is logged) before the signal.
            arrived = proc.wait_for_log("DEBUG Embed call: 8 passage texts queued", count=callers)
            assert arrived, proc.output()
            proc.process.send_signal(signal.SIGTERM)
            responses = [future.result() for future in futures]
        assert proc.process.wait(60) == 0
        log = proc.log_text()
    assert all(response.count == 8 for response in responses)
    assert log.index("received SIGTERM") < log.rindex("DEBUG Embed 8 passage texts")
    assert not proc.socket_path.exists() and not proc.pid_path.exists()


def test_a_sigterm_taken_by_a_worker_thread_stops_the_embedder(
    short_tmp: Path, minilm_dir: Path
) -> None:
    """The kernel may give SIGTERM to any of grpc's threads; the embedder still stops."""
    with embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc:
        assert embed(proc, ["hello"]).count == 1
        signal_a_worker_thread(proc.process.pid, signal.SIGTERM)
        assert proc.process.wait(60) == 0
        assert "received SIGTERM" in proc.log_text()
    assert not proc.socket_path.exists() and not proc.pid_path.exists()


def test_a_second_signal_exits_at_once(short_tmp: Path, minilm_dir: Path) -> None:
    """A second SIGTERM during the graceful drain exits 1 at once, removing the socket."""
    texts = [f"text {i} " + "about a server that is told twice to stop " * 6 for i in range(64)]
    with embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc:
        stub = proc.stub()
        request = pb.EmbedRequest(texts=texts, kind=pb.PASSAGE)
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(stub.Embed, request, timeout=120) for _ in range(4)]
            assert proc.wait_for_log("DEBUG Embed call: 64 passage texts queued", count=4)
            proc.process.send_signal(signal.SIGTERM)
            assert proc.wait_for_log("received SIGTERM: shutting down")
            proc.process.send_signal(signal.SIGTERM)
            assert proc.process.wait(30) == 1
            failed = [future.exception() is not None for future in futures]
        assert any(failed)  # it did not wait for the queued work
        assert not proc.socket_path.exists() and not proc.pid_path.exists()


def test_a_second_signal_taken_by_a_worker_thread_exits_at_once(
    short_tmp: Path, minilm_dir: Path
) -> None:
    """The drain's waits wake to run the second signal's handler, whichever thread took
    it: the one call in flight, seconds of work, is not finished first."""
    texts = [f"text {i} " + "about a server that is told twice to stop " * 24 for i in range(256)]
    with embedder_process(str(minilm_dir), socket_dir=short_tmp) as proc:
        call = proc.stub().Embed.future(pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=120)
        assert proc.wait_for_log("DEBUG Embed call: 256 passage texts queued")
        proc.process.send_signal(signal.SIGTERM)
        assert proc.wait_for_log("received SIGTERM: shutting down")
        signal_a_worker_thread(proc.process.pid, signal.SIGTERM)
        assert proc.process.wait(30) == 1
        assert call.exception() is not None
        assert not proc.socket_path.exists() and not proc.pid_path.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "nonsense"], 'Error: invalid --listen "nonsense": expected unix:///path, '),
        (
            ["--listen", "unix:///" + "s" * 120],
            "Error: socket path too long (121 bytes; max 107): set THATCH_EMBEDDER_ADDR",
        ),
        (
            ["--model", "org/not-cached"],
            "Error: model org/not-cached is not in the local cache and HF_HUB_OFFLINE=1",
        ),
    ],
    ids=["bad-address", "long-path", "unresolvable-model"],
)
def test_startup_errors_are_one_line(short_tmp: Path, args: list[str], message: str) -> None:
    """A startup problem prints one clear error on stderr (and, for a model, one line with
    the fix that works on this machine) and exits 1, leaving no socket."""
    listen = [] if "--listen" in args else ["--listen", f"unix://{short_tmp}/e.sock"]
    result = CliRunner().invoke(main, ["serve", *listen, *args])
    assert result.exit_code == 1, result.output
    # Log lines (the server logs to stderr by default) aside, there is one error line.
    errors = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
    assert errors[0].startswith(message), result.stderr
    assert [line[:5] for line in errors[1:]] == (["Fix: "] if "--model" in args else [])
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert list(short_tmp.iterdir()) == []


def test_second_server_on_a_live_socket_is_refused(short_tmp: Path) -> None:
    """Starting where an embedder already answers fails with its pid, exit 1."""
    with embedder_process("mock", socket_dir=short_tmp) as proc:
        result = CliRunner().invoke(main, ["serve", "--listen", proc.address, "--model", "mock"])
        assert result.exit_code == 1
        assert result.stderr == (
            f"Error: an embedder is already running at {proc.address} (pid {proc.pid})\n"
            "Fix: nothing to do, every agent and command shares it; to see it: thatch "
            "embedder status; or to restart it, stop it first: thatch embedder stop\n"
        )
        assert proc.health() == SERVING


def test_log_file_rotates_at_5_mb_with_one_backup(tmp_path: Path) -> None:
    """--log-file uses a rotating handler (5 MB, one backup) and the spec's line format."""
    logger, handler = setup_logging(tmp_path / "logs" / "embedder.log", "info")
    try:
        assert isinstance(handler, logging.handlers.RotatingFileHandler)
        assert (handler.maxBytes, handler.backupCount) == (5 * 1024 * 1024, 1)
        logger.info("hello %s", "there")
        logger.debug("not at info level")
        handler.flush()
        text = (tmp_path / "logs" / "embedder.log").read_text()
        assert LOG_LINE.match(text) and text.endswith(" INFO hello there\n")
        assert "not at info level" not in text
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_an_unwritable_log_file_is_one_line(tmp_path: Path) -> None:
    """A log file that cannot be written stops serve with one line, before any other check
    (a malformed config here), not a traceback."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = CliRunner().invoke(
        main,
        ["serve", "--listen", "unix:///nowhere.sock", "--log-file", str(blocker / "e.log")],
        env={"THATCH_CONFIG": str(tmp_path / "config.json"), "THATCH_MODEL": ""},
    )
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: cannot write the log file ")
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_sigterm_while_the_model_downloads_stops_the_embedder(short_tmp: Path) -> None:
    """A first start downloads the model; SIGTERM (`thatch embedder stop`) used to wait for
    the whole download, here a hub that never answers."""
    import socket as sockets

    with sockets.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts, never answers
        env = {
            **os.environ,
            "HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_ETAG_TIMEOUT": "600",
            "HF_HUB_DOWNLOAD_TIMEOUT": "600",
        }
        with embedder_process(
            "someone/not-cached", socket_dir=short_tmp, env=env, wait=False
        ) as proc:
            assert proc.wait_for_log("INFO starting: model someone/not-cached", timeout=120)
            # A foreground serve says why it waits (it was silent for the whole download).
            assert proc.wait_for_log(
                "INFO model someone/not-cached is not ready yet: a first start downloads it",
                timeout=120,
            )
            assert proc.stop(signal.SIGTERM, timeout=60) == 0, proc.log_text()
            assert "INFO embedder stopped" in proc.log_text()
            assert not proc.socket_path.exists() and not proc.pid_path.exists()
