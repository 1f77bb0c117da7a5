"""Bytes that are not UTF-8 on the command line, on stdin or in the directory's name (a
Latin-1 file piped in, a terminal in another encoding): Python reads them as lone
surrogates, which used to end commands with a UnicodeEncodeError traceback. Real
processes, real bytes, a real database that keeps what it held."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows


@pytest.fixture
def env(tmp_path: Path, mock_embedder: EmbedderProcess) -> dict[str, str]:
    return {
        **os.environ,
        "THATCH_DB_PATH": str(tmp_path / "thatch.db"),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_PROJECT_DIR": str(tmp_path),
    }


def thatch(
    env: dict[str, str], *args: bytes, stdin: bytes = b"", cwd: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"thatch.cli", *args],
        input=stdin,
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "stdin", "said"),
    [
        ([b"remember", b"lbl", b"bad \xff content"], b"", b"content: must be UTF-8 text"),
        ([b"remember", b"bad\xfflabel", b"content"], b"", b"label: must be UTF-8 text"),
        ([b"remember", b"notes"], b"caf\xe9", b"content: must be UTF-8 text"),
        ([b"search", b"caf\xe9"], b"", b"query: must be UTF-8 text"),
        ([b"list", b"st\xff"], b"", b'"st\\udcff" holds bytes that are not'),
        ([b"show", b"a\xff"], b"", b"label: must be UTF-8 text"),
        ([b"restore-branch", b"a\xff"], b"", b'"a\\udcff" holds bytes that are not'),
        ([b"chat", b"send", b"a\xff", b"hi"], b"", b'"a\\udcff" holds bytes that are not'),
    ],
)
def test_bytes_that_are_not_utf8_are_a_usage_error(
    env: dict[str, str], args: list[bytes], stdin: bytes, said: bytes
) -> None:
    assert thatch(env, b"remember", b"Kept", b"what was there").returncode == 0
    result = thatch(env, *args, stdin=stdin)
    assert result.returncode == 2, result.stderr
    assert b"Traceback" not in result.stderr and said in result.stderr
    assert result.stdout == b""
    assert rows(Path(env["THATCH_DB_PATH"]), "SELECT label FROM entries") == [("Kept",)]


def test_a_directory_name_that_is_not_utf8_is_a_store_with_a_replacement_character(
    env: dict[str, str], tmp_path: Path
) -> None:
    directory = os.path.join(os.fsencode(tmp_path), b"bad\xffname")
    os.mkdir(directory)
    env = {k: v for k, v in env.items() if k != "THATCH_PROJECT_DIR"}
    saved = thatch(env, b"remember", b"Here", b"saved from the odd directory", cwd=directory)
    assert saved.returncode == 0, saved.stderr
    listed = thatch(env, b"list", cwd=directory)
    assert listed.returncode == 0 and listed.stdout.startswith('["bad\ufffdname"] Here'.encode())
