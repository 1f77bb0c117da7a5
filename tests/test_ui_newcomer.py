"""A newcomer's look at their memories: saved with the CLI, listed, searched and one forgotten
in a real ``thatch ui`` process (real MiniLM embedder), and the CLI agrees afterwards."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess
from tests.support.ui_client import UiClient
from thatch.cli.main import cli

BIN = Path(sys.executable).parent
MEMORIES = {
    "Release process": "To ship a release, push a signed git tag; CI builds and uploads it.",
    "Indentation": "The user wants four spaces, never tabs, in Python files.",
    "Database location": "The SQLite file lives under XDG_CONFIG_HOME/thatch.",
}
LINK = re.compile(r'<a href="/memory\?[^"]*">([^<]+)</a>')


@pytest.fixture
def env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm_server: EmbedderProcess
) -> dict[str, str]:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", minilm_server.address)
    return dict(os.environ)


@pytest.fixture
def ui_process(env: dict[str, str]) -> Iterator[tuple[UiClient, str]]:
    """``thatch ui --port 0 --no-browser`` as a user runs it; its printed URL."""
    process = subprocess.Popen(
        [str(BIN / "thatch"), "ui", "--port", "0", "--no-browser"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the socket listens
        assert line.startswith("thatch ui: http://127.0.0.1:"), (line, process.stderr)
        url = urlsplit(line.split(": ", 1)[1].strip())
        assert url.port is not None
        yield UiClient(url.port), f"{url.path}?{url.query}"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _out, err = process.communicate(timeout=30)  # also closes the pipes
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 0, err


def cli_labels() -> list[str]:
    listed = CliRunner().invoke(cli, ["list", "--json"])
    assert listed.exit_code == 0, listed.stderr
    import json

    return sorted(entry["label"] for entry in json.loads(listed.stdout))


def test_newcomer_lists_searches_and_forgets(
    env: dict[str, str], ui_process: tuple[UiClient, str]
) -> None:
    for label, content in MEMORIES.items():
        saved = CliRunner().invoke(cli, ["remember", label, content])
        assert saved.exit_code == 0, saved.stderr
    client, entry = ui_process
    assert client.request("GET", entry).status == 303  # the printed URL lets the browser in

    stores = client.get("/")
    assert stores.status == 200 and ">proj</a>" in stores.body
    listed = client.get("/memories", store="proj")
    assert sorted(LINK.findall(listed.body)) == sorted(MEMORIES)

    found = client.get("/memories", store="proj", q="how do I publish a new version?")
    assert found.status == 200
    assert LINK.findall(found.body)[0] == "Release process"

    shown = client.get("/memory", store="proj", label="Release process")
    forgotten = client.post(
        "/memory/forget", {"csrf": shown.csrf(), "store": "proj", "label": "Release process"}
    )
    assert forgotten.status == 303
    after = client.get(forgotten.headers["location"])
    assert "[forgotten] proj :: Release process" in after.body
    assert sorted(LINK.findall(after.body)) == ["Database location", "Indentation"]
    assert cli_labels() == ["Database location", "Indentation"]
