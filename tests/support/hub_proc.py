"""Run a real ``thatch hub serve`` process for integration tests.

    with hub_process(database_url, embedder_address, tmp, tls=certs) as hub:
        client = hub.client(token)

The port is read from the ``serving at`` line the hub writes to stderr once its health is
SERVING (the pool open, the role checked, the migrations found applied); teardown sends
SIGTERM and waits.
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

from thatch.hub.client import HubClient

__all__ = ["HubProcess", "hub_command", "hub_process"]

STARTUP_SECONDS = 120


@dataclass
class HubProcess:
    process: subprocess.Popen[bytes]
    stderr_path: Path
    host: str
    ca: Path | None  # the CA of its certificate; None when it serves plaintext
    port: int = 0
    _clients: list[HubClient] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self, token: str, **options: object) -> HubClient:
        """A client of this hub with ``token``, closed when the process context ends."""
        if self.ca is not None:
            options.setdefault("ca_file", self.ca)
        else:
            options.setdefault("plaintext", True)
        client = HubClient(self.address, token, **options)  # type: ignore[arg-type]
        self._clients.append(client)
        return client

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def wait_for(self, needle: str, timeout: float = STARTUP_SECONDS) -> bool:
        """Wait until ``needle`` is on stderr or the process ends; whether it is there."""
        deadline = time.monotonic() + timeout
        while needle not in self.stderr():
            if time.monotonic() > deadline or self.process.poll() is not None:
                return needle in self.stderr()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(0.05)  # a short pause that ends early if it exits
        return True

    def wait_serving(self, timeout: float = STARTUP_SECONDS) -> None:
        """Wait for the ``serving at`` line (health SERVING) and read the port from it."""
        assert self.wait_for(" INFO serving at ", timeout), self.stderr()
        match = re.search(rf"serving at {re.escape(self.host)}:(\d+)", self.stderr())
        assert match, self.stderr()
        self.port = int(match.group(1))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the hub did not exit within {timeout:g} s of {sig!r}:\n{self.stderr()}"
            ) from None

    def shut_down(self) -> None:
        for client in self._clients:
            client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def hub_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "thatch.cli", "hub", *args]


@contextmanager
def hub_process(
    database_url: str,
    embedder: str,
    directory: Path,
    *,
    certs: Path | None = None,
    host: str = "127.0.0.1",
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    wait: bool = True,
    name: str = "hub",
) -> Iterator[HubProcess]:
    """``thatch hub serve --listen <host>:0`` (TLS with ``certs``/server.pem when given)."""
    tls = [] if certs is None else ["--tls-cert", str(certs / "server.pem")]
    tls += [] if certs is None else ["--tls-key", str(certs / "server.key")]
    command = hub_command("serve", "--listen", f"{host}:0", "--embedder", embedder, *tls, *args)
    stderr_path = directory / f"{name}.stderr"
    run_env = dict(os.environ if env is None else env)
    run_env["THATCH_HUB_DATABASE_URL"] = database_url
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            command, env=run_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
        )
    hub = HubProcess(process, stderr_path, host, None if certs is None else certs / "ca.pem")
    try:
        if wait:
            hub.wait_serving()
        yield hub
    finally:
        hub.shut_down()
