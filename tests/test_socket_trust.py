"""Clients send memories and prompts only to sockets of their own user (issue 9 §5).

Real processes throughout: a listener of another user (``nobody``, set up with setuid as
an attacker's would be) waits where thatch's sockets live, and ``thatch remember``,
``thatch search`` and the prompt hook run as the test's user. The listener must receive
not one byte; the memory is saved, pending; the CLI says why in one line.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.embedder_cleanup import embedder_pids, stop_embedders
from tests.support.foreign_listener import NOBODY, foreign_listener
from tests.support.hookrun import run_hook, thatch_command
from thatch.embedder.__main__ import main as embedder_main
from thatch.embedder.client.autostart import FIX_UNTRUSTED
from thatch.embedder.client.errors import ServerStartError
from thatch.embedder.client.socket_trust import check_path, socket_problem
from thatch.embedder.server.grpc_server import prepare_unix_socket
from thatch.frontend.hooks import recall_scan

SECRET_CONTENT = "the deploy key is hunter2-secret-content"
SECRET_PROMPT = "how do I rotate the hunter2 secret prompt"
FIX = (
    "set THATCH_EMBEDDER_ADDR to a unix:/// path in a directory only you can write, "
    "or remove that directory so thatch recreates it with mode 0700"
)


@dataclass
class Setup:
    runtime: Path  # $XDG_RUNTIME_DIR; thatch's sockets live in runtime/thatch
    socket: Path
    db: Path
    env: dict[str, str]

    @property
    def scan_socket(self) -> Path:
        path = recall_scan.socket_path(self.db, self.env)
        assert path is not None
        return path


@pytest.fixture
def setup(short_tmp: Path, tmp_path: Path) -> Iterator[Setup]:
    """The default socket address under a runtime dir the listener's user can reach."""
    short_tmp.chmod(0o755)  # nobody must traverse it to bind inside
    runtime = short_tmp / "run"
    runtime.mkdir(mode=0o755)
    db = tmp_path / "thatch.db"
    env = dict(os.environ)
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        THATCH_MODEL="mock",
        THATCH_DB_PATH=str(db),
        THATCH_QUEUE_DIR=str(tmp_path / "queue"),
        THATCH_PROJECT_DIR=str(tmp_path),
    )
    socket = runtime / "thatch" / "embedder.sock"
    try:
        yield Setup(runtime, socket, db, env)
    finally:
        stop_embedders(str(socket))


def thatch(setup: Setup, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        thatch_command(*args),
        input=stdin.decode(),
        capture_output=True,
        text=True,
        env=setup.env,
        timeout=120,
        check=False,
    )


def saved_rows(db: Path) -> list[tuple[str, object]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT content, embedding FROM entries").fetchall()


def assert_refused_everything(setup: Setup, reason: str) -> None:
    """remember saves pending and says why; search fails in one line; the hook stays quiet."""
    cause = f"refusing to send text to unix://{setup.socket}: {reason}"

    remembered = thatch(setup, "remember", "rotation secret", SECRET_CONTENT)
    assert remembered.returncode == 0, remembered.stderr
    assert remembered.stdout.startswith("[saved] "), remembered.stdout
    assert remembered.stderr.splitlines() == [
        "Embedding pending: the embedding service is unreachable "
        f"({cause}), so this memory is saved but not searchable yet. It is indexed "
        f"automatically when the service is back; to fix it: {FIX_UNTRUSTED}"
    ]
    [(content, embedding)] = saved_rows(setup.db)
    assert SECRET_CONTENT in content and embedding is None

    searched = thatch(setup, "search", "rotation", "secret")
    assert searched.returncode == 1
    assert searched.stdout == ""
    assert searched.stderr == f"Error: embedding service unavailable: {cause}.\nFix: {FIX}\n"

    payload = {"session_id": "s1", "prompt": SECRET_PROMPT, "cwd": str(setup.db.parent)}
    hook = run_hook(["flush-tools"], payload, setup.env)
    assert hook.returncode == 0 and hook.stderr == b"", hook.stderr
    assert SECRET_PROMPT.encode() not in hook.stdout

    assert embedder_pids(str(setup.socket)) == []  # nothing was started in its place


def test_runtime_dir_of_another_user_gets_no_text(setup: Setup, tmp_path: Path) -> None:
    """runtime/thatch is nobody's, mode 0777, with nobody listening at both sockets."""
    directory = setup.socket.parent
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    os.chown(directory, NOBODY, NOBODY)
    with (
        foreign_listener([setup.socket], record=tmp_path / "texts.txt", kind="grpc") as thief,
        foreign_listener([setup.scan_socket], record=tmp_path / "scan.bin") as scan,
    ):
        reason = f"socket directory {directory} belongs to nobody (uid {NOBODY}), not to you"
        assert_refused_everything(setup, reason)
        assert thief.received() == b"" and scan.received() == b""


def test_private_dir_inside_another_users_runtime_dir_gets_no_text(setup: Setup) -> None:
    """runtime is nobody's (0777), runtime/thatch ours and private: nobody could rename
    it and put a directory of theirs in its place between the check and the connect."""
    setup.runtime.chmod(0o777)
    os.chown(setup.runtime, NOBODY, NOBODY)
    directory = setup.socket.parent
    directory.mkdir(mode=0o700)
    reason = (
        f"{setup.runtime} (above socket directory {directory}) belongs to nobody "
        f"(uid {NOBODY}), who could replace it"
    )
    assert_refused_everything(setup, reason)


def test_chosen_dir_writable_by_others_gets_no_text(setup: Setup, tmp_path: Path) -> None:
    """THATCH_EMBEDDER_ADDR in a directory of ours, mode 0777: someone else may listen there."""
    directory = setup.runtime / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    setup.socket = directory / "embedder.sock"
    setup.env["THATCH_EMBEDDER_ADDR"] = f"unix://{setup.socket}"
    record = tmp_path / "texts.txt"
    with foreign_listener([setup.socket], record=record, kind="grpc") as listener:
        reason = f"socket directory {directory} is writable by group or others (mode 0777)"
        assert_refused_everything(setup, reason)
        assert listener.received() == b""
    assert directory.stat().st_mode & 0o777 == 0o777  # the user chose it: not ours to fix


def test_own_default_dir_writable_by_group_is_made_private(setup: Setup) -> None:
    """thatch's own socket directory, left 0775 by a umask of 002: made 0700, then used."""
    directory = setup.socket.parent
    directory.mkdir()
    directory.chmod(0o775)
    remembered = thatch(setup, "remember", "rotation secret", SECRET_CONTENT)
    assert remembered.returncode == 0, remembered.stderr
    [(_, embedding)] = saved_rows(setup.db)
    assert embedding is not None
    assert directory.stat().st_mode & 0o777 == 0o700


def test_socket_file_of_another_user_gets_no_text(setup: Setup, tmp_path: Path) -> None:
    """Our private directory, but the socket in it was bound by nobody (while it could)."""
    directory = setup.socket.parent
    directory.mkdir()
    directory.chmod(0o777)

    def close_directory() -> None:
        directory.chmod(0o700)

    record = tmp_path / "got.bin"
    with foreign_listener([setup.socket], record=record, after_bind=close_directory) as listener:
        reason = f"socket {setup.socket} belongs to nobody (uid {NOBODY}), not to you"
        assert_refused_everything(setup, reason)
        assert listener.received() == b""


def test_listener_of_another_user_behind_our_socket_gets_no_text(
    setup: Setup, tmp_path: Path
) -> None:
    """Directory and socket file are ours; the process listening is not: SO_PEERCRED says so."""
    directory = setup.socket.parent
    directory.mkdir()
    directory.chmod(0o777)

    def make_it_look_ours() -> None:
        os.chown(setup.socket, 0, 0)
        directory.chmod(0o700)

    record = tmp_path / "got.bin"
    with foreign_listener(
        [setup.socket], record=record, kind="grpc", after_bind=make_it_look_ours
    ) as listener:
        pid = listener.process.pid
        reason = (
            f"the process listening at {setup.socket} (pid {pid}) runs as nobody "
            f"(uid {NOBODY}), not as you"
        )
        assert socket_problem(setup.socket) == reason
        assert_refused_everything(setup, reason)
        assert listener.received() == b""


def test_own_private_socket_is_trusted_and_served(setup: Setup) -> None:
    """The same commands against our own embedder: vectors, no refusal."""
    remembered = thatch(setup, "remember", "rotation secret", SECRET_CONTENT)
    assert remembered.returncode == 0, remembered.stderr
    # "Starting embedder…" may show if the start takes over a second; nothing else may.
    assert remembered.stderr in ("", "Starting embedder…\n"), remembered.stderr
    [(_, embedding)] = saved_rows(setup.db)
    assert embedding is not None
    assert check_path(setup.socket).problem is None
    assert setup.socket.parent.stat().st_mode & 0o777 == 0o700
    searched = thatch(setup, "search", "rotation")
    assert searched.returncode == 0 and "rotation secret" in searched.stdout


# -- the server side ------------------------------------------------------------------------


def test_server_refuses_a_directory_writable_by_others(short_tmp: Path) -> None:
    """`serve` on a socket in a 0777 (or 0770) directory exits 1 with one clear line."""
    for mode in (0o777, 0o770):
        directory = short_tmp / f"d{mode:o}"
        directory.mkdir()
        directory.chmod(mode)
        listen = f"unix://{directory}/e.sock"
        result = CliRunner().invoke(embedder_main, ["serve", "--listen", listen, "--model", "mock"])
        assert result.exit_code == 1
        assert result.stderr == (
            f"Error: socket directory {directory} is writable by group or others "
            f"(mode {mode:04o}); run chmod 700 {directory} or choose a directory of your own "
            "with --listen unix:///path\n"
        )
        assert list(directory.iterdir()) == []


def test_shared_sticky_directory_is_refused(short_tmp: Path) -> None:
    """A /tmp-like directory (root's, 1777) is no longer accepted for the socket."""
    directory = short_tmp / "shared"
    directory.mkdir()
    directory.chmod(0o1777)
    with pytest.raises(ServerStartError, match="is writable by group or others"):
        prepare_unix_socket(directory / "e.sock")


def test_embedder_start_refuses_in_one_line(setup: Setup) -> None:
    """`thatch embedder start` in a directory of another user: the reason, nothing started."""
    directory = setup.socket.parent
    directory.mkdir(mode=0o777)
    os.chown(directory, NOBODY, NOBODY)
    result = thatch(setup, "embedder", "start")
    assert result.returncode == 1
    cause = (
        f"refusing to send text to unix://{setup.socket}: socket directory {directory} "
        f"belongs to nobody (uid {NOBODY}), not to you"
    )
    assert result.stderr == f"Error: embedding service unavailable: {cause}.\nFix: {FIX}\n"
    assert embedder_pids(str(setup.socket)) == []
