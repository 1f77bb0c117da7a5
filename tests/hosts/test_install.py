"""The hosts' install fails with its reason (never a skip) when npm or the registry is missing."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.hosts.hostkit import HostInstallError, cache_root, install_hosts, lock_key


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_npm_is_a_failure_that_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
    with pytest.raises(HostInstallError, match="npm is not on PATH"):
        install_hosts(env)


def test_an_unreachable_registry_is_a_failure_that_says_so(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "XDG_CACHE_HOME": str(tmp_path / "c"),
        "npm_config_registry": f"http://127.0.0.1:{closed_port()}/",
        "npm_config_cache": str(tmp_path / "npm-cache"),  # nothing cached to fall back on
        "npm_config_fetch_retries": "0",
        "npm_config_userconfig": str(tmp_path / "npmrc"),
    }
    with pytest.raises(HostInstallError, match="is the npm registry reachable") as failure:
        install_hosts(env)
    assert "ECONNREFUSED" in str(failure.value)
    root = cache_root(env)
    assert not (root / lock_key()).exists()
    assert [p.name for p in root.iterdir()] == []  # the half-done install is gone
