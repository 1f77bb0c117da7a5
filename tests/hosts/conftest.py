"""Fixtures of the real-host tests: the installed hosts, the model server, the embedder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts.hostkit import CLAUDE_VERSIONS, HostInstallError, claude_hosts, install_hosts
from tests.hosts.model_server import ModelServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.hosts)


@pytest.fixture(scope="session")
def host_bin() -> Path:
    """node_modules/.bin of the pinned hosts; a missing npm or registry fails, never skips."""
    # Session fixtures are set up before the per-test isolation: this sees the real cache.
    try:
        return install_hosts(dict(os.environ))
    except HostInstallError as error:
        pytest.fail(f"the real hosts could not be installed: {error}", pytrace=False)


@pytest.fixture(scope="session", params=CLAUDE_VERSIONS)
def claude_version(request: pytest.FixtureRequest) -> str:
    """Each Claude Code scenario runs on the older release thatch supports and the latest."""
    return str(request.param)


@pytest.fixture(scope="session")
def claude_bin(claude_version: str) -> Path:
    """node_modules/.bin holding ``claude`` at ``claude_version``."""
    try:
        return install_hosts(dict(os.environ), claude_hosts(claude_version))
    except HostInstallError as error:
        pytest.fail(f"the real hosts could not be installed: {error}", pytrace=False)


@pytest.fixture(scope="session")
def model_server() -> Iterator[ModelServer]:
    server = ModelServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def host_embedder(minilm_dir: Path) -> Iterator[object]:
    """One real MiniLM embedder (int8) that every host run's hooks and MCP server share."""
    from tests.support.embedder_proc import embedder_process

    socket_dir = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))  # short: a socket lives here
    try:
        with embedder_process(str(minilm_dir), socket_dir=socket_dir) as proc:
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
