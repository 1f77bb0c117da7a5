"""`thatch doctor` applies the socket checks every tool applies before sending text: a live
embedder behind a socket the tools refuse is FAIL with the fix, never "ok embedder" (real
embedder process, doctor run as a process, a real database file)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.embedder_cleanup import expected_mock_vector
from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.hookrun import thatch_command
from thatch.common.environment import default_db_path
from thatch.embedder.client.autostart import FIX_UNTRUSTED
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import EmbedderUntrusted
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.memory_store import Store


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_MODEL", "mock")
    path = default_db_path(os.environ)
    with Store.open(path) as store:
        text = "# Tests\n\nRun pytest."
        store.remember("proj", "Tests", text, expected_mock_vector(text), "mock")
    return path


@pytest.fixture
def served(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbedderProcess]:
    """A mock embedder in a private directory of its own, set as THATCH_EMBEDDER_ADDR."""
    directory = short_tmp / "d"
    directory.mkdir(mode=0o700)
    with embedder_process("mock", socket_dir=directory, log_dir=short_tmp) as proc:
        monkeypatch.setenv("THATCH_EMBEDDER_ADDR", proc.address)
        yield proc


def embedder_line(database: Path) -> list[str]:
    """The embedder check's lines of `thatch doctor`, run as a process."""
    result = subprocess.run(
        thatch_command("doctor"), capture_output=True, text=True, timeout=120, check=False
    )
    lines = result.stdout.splitlines()
    (index,) = [i for i, line in enumerate(lines) if line.split("  ")[1:2] == ["embedder"]]
    fixed = index + 1 < len(lines) and lines[index + 1].startswith("      fix: ")
    return lines[index : index + 2 if fixed else index + 1]


def tool_refusal() -> EmbedderUntrusted:
    with EmbedderClient() as client, pytest.raises(EmbedderUntrusted) as caught:
        client.embed(["x"], Kind.QUERY)
    return caught.value


def test_socket_in_a_group_writable_directory_fails(
    database: Path, served: EmbedderProcess
) -> None:
    """The embedder serves, but its directory is group-writable: every tool refuses it, and
    doctor says so with the tools' own cause and fix (and changes no mode)."""
    directory = served.socket_path.parent
    assert embedder_line(database)[0].startswith("ok  embedder  serving at ")
    os.chmod(directory, 0o770)
    refusal = tool_refusal()
    assert embedder_line(database) == [
        f"FAIL  embedder  {refusal.cause}",
        f"      fix: {FIX_UNTRUSTED}",
    ]
    assert "is writable by group or others (mode 0770)" in refusal.cause
    assert directory.stat().st_mode & 0o777 == 0o770


def test_group_writable_socket_file_fails(database: Path, served: EmbedderProcess) -> None:
    """A socket file others may write (someone could have swapped it) is refused alike."""
    os.chmod(served.socket_path, 0o666)
    refusal = tool_refusal()
    assert f"socket {served.socket_path} is writable by group or others" in refusal.cause
    assert embedder_line(database) == [
        f"FAIL  embedder  {refusal.cause}",
        f"      fix: {FIX_UNTRUSTED}",
    ]


def test_own_socket_directory_tools_make_private_is_not_a_failure(
    database: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """thatch's own socket directory left group-writable is made 0700 by the first tool
    call, so it is no refusal: doctor says ok and, looking only, leaves the mode alone."""
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    own = runtime / "thatch"
    own.mkdir(mode=0o700)
    with embedder_process("mock", socket_dir=own, log_dir=short_tmp, socket_name="embedder.sock"):
        os.chmod(own, 0o770)
        assert embedder_line(database)[0].startswith("ok  embedder  serving at ")
        assert own.stat().st_mode & 0o777 == 0o770
        with EmbedderClient() as client:
            client.embed(["x"], Kind.QUERY)
        assert own.stat().st_mode & 0o777 == 0o700
