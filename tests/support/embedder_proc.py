"""Run a real embedder process on a temporary unix socket for integration tests.

    with embedder_process("mock", socket_dir=short_tmp) as proc:
        proc.stub().Embed(...)

Startup waits on the standard health service (a Watch stream, not a sleep) until SERVING,
within a deadline; teardown sends SIGTERM and waits. stdout is captured separately so tests
can check the server never writes to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from thatch.embedder.v1 import embedder_pb2 as pb
from thatch.embedder.v1 import embedder_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]


class EmbedderStartError(RuntimeError):
    pass


@dataclass
class EmbedderProcess:
    """A running ``thatch-embedder serve`` subprocess and the ways to reach it."""

    address: str  # unix:///...
    socket_path: Path
    log_path: Path
    stdout_path: Path
    stderr_path: Path
    process: subprocess.Popen[bytes]
    _channels: list[grpc.Channel] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def pid_path(self) -> Path:
        return self.socket_path.with_name(self.socket_path.name + ".pid")

    def channel(self) -> grpc.Channel:
        """A new channel to the server, closed when the process context ends."""
        channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self._channels.append(channel)
        return channel

    def stub(self) -> pb_grpc.EmbedderStub:
        return pb_grpc.EmbedderStub(self.channel())

    def info(self, timeout: float = 10) -> pb.InfoResponse:
        return self.stub().Info(pb.InfoRequest(), timeout=timeout)

    def health(self, service: str = "", timeout: float = 5) -> int:
        stub: Any = health_pb2_grpc.HealthStub(self.channel())
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return int(response.status)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def output(self) -> str:
        """What the process wrote to stderr and the log (for assertion messages)."""
        stderr = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return f"--- stderr\n{stderr}--- log\n{self.log_text()}"

    def wait_for_log(self, needle: str, timeout: float = 30, count: int = 1) -> bool:
        """Wait until ``needle`` occurs ``count`` times in the log (or the process ends)."""
        deadline = time.monotonic() + timeout
        while self.log_text().count(needle) < count:
            if time.monotonic() > deadline or self.process.poll() is not None:
                return self.log_text().count(needle) >= count
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(0.02)  # a short pause that ends early if it exits
        return True

    def wait_serving(self, timeout: float) -> None:
        """Follow the health Watch stream until SERVING; fail early if the process exits."""
        deadline = time.monotonic() + timeout
        stub: Any = health_pb2_grpc.HealthStub(self.channel())
        while True:
            if self.process.poll() is not None:
                raise EmbedderStartError(
                    f"embedder exited with {self.process.returncode}\n{self.output()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EmbedderStartError(f"embedder not SERVING after {timeout} s\n{self.output()}")
            try:
                stream = stub.Watch(
                    health_pb2.HealthCheckRequest(service=""),
                    timeout=min(remaining, 2.0),
                    wait_for_ready=True,
                )
                for response in stream:
                    if response.status == SERVING:
                        stream.cancel()
                        return
            except grpc.RpcError:
                continue  # not listening yet, or the attempt's own deadline: look again

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Signal the process and wait for it; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def shut_down(self) -> None:
        """SIGTERM and wait (30 s), then SIGKILL: whatever state the test left it in."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def close_channels(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()


def serve_command(
    model: str, address: str | None, log_path: Path, args: Sequence[str]
) -> list[str]:
    listen = ["--listen", address] if address is not None else []
    return [
        sys.executable,
        "-m",
        "thatch.embedder",
        "serve",
        *listen,
        "--model",
        model,
        "--log-file",
        str(log_path),
        *args,
    ]


@contextmanager
def embedder_process(
    model: str,
    *,
    socket_dir: Path,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = ("--log-level", "debug"),
    startup_timeout: float = 120,
    wait: bool = True,
    socket_name: str = "e.sock",
    listen: bool = True,
    log_dir: Path | None = None,
) -> Iterator[EmbedderProcess]:
    """Start ``python -m thatch.embedder serve`` on ``socket_dir/socket_name``.

    ``env`` defaults to the current environment (which the autouse fixture isolates).
    With ``listen=False`` no ``--listen`` is passed: the caller's ``env`` must make the
    default address land at ``socket_dir/socket_name``. Log, stdout and stderr files go to
    ``log_dir`` (default ``socket_dir``). With ``wait`` (default) the context is entered
    once health reports SERVING. On exit the process gets SIGTERM (then SIGKILL after 30 s)
    and is waited for.
    """
    socket_path = socket_dir / socket_name
    address = f"unix://{socket_path}"
    log_dir = log_dir or socket_dir
    log_path = log_dir / "embedder.log"
    stdout_path = log_dir / "stdout.txt"
    stderr_path = log_dir / "stderr.txt"
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            serve_command(model, address if listen else None, log_path, args),
            env=dict(os.environ if env is None else env),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    proc = EmbedderProcess(address, socket_path, log_path, stdout_path, stderr_path, process)
    try:
        if wait:
            proc.wait_serving(startup_timeout)
        yield proc
    finally:
        proc.close_channels()
        proc.shut_down()


@contextmanager
def tcp_embedder(
    directory: Path, *args: str, host: str = "127.0.0.1"
) -> Iterator[tuple[EmbedderProcess, int]]:
    """``thatch-embedder serve --listen <host>:0 --model mock``; the process and its port.

    The port is read from the ``serving at`` log line; on exit the process is stopped.
    """
    log = directory / "embedder.log"
    command = [sys.executable, "-m", "thatch.embedder", "serve", "--listen", f"{host}:0"]
    command += ["--model", "mock", "--log-file", str(log), *args]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    proc = EmbedderProcess("", directory / "none", log, log, log, process)
    try:
        assert proc.wait_for_log(" INFO serving at "), proc.output()
        match = re.search(rf"serving at {re.escape(host)}:(\d+) model mock", proc.log_text())
        assert match, proc.log_text()
        yield proc, int(match.group(1))
    finally:
        proc.shut_down()
