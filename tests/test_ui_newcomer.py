"""A newcomer's look at their memories: saved with the CLI (or by ``thatch demo``), listed,
searched and one forgotten in a real ``thatch ui`` process (real MiniLM embedder), and the
CLI agrees afterwards."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess
from tests.support.ui_client import UiClient, run_ui_process
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
    with run_ui_process(env) as started:
        client, entry = started
        assert client.request("GET", entry).status == 303
        assert "not yours" not in client.get("/").body  # no demo banner on your own data
        yield started


def cli_labels() -> list[str]:
    listed = CliRunner().invoke(cli, ["list", "--json"])
    assert listed.exit_code == 0, listed.stderr
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


def test_newcomer_runs_the_demo_then_browses_it(
    tmp_path: Path, minilm_dir: Path, minilm_server: EmbedderProcess
) -> None:
    """``thatch demo`` leaves its database in the cache; ``thatch ui --demo`` shows, searches
    and forgets there; the CLI on the printed path agrees; the user's database is untouched."""
    home = tmp_path / "demo-home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("THATCH_", "HF_", "XDG_", "CLAUDE_", "CURSOR_"))
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        HF_HUB_OFFLINE="1",
    )
    thatch = str(BIN / "thatch")
    before_demo = subprocess.run(
        [thatch, "ui", "--demo", "--no-browser"], env=env, capture_output=True, text=True
    )
    assert before_demo.returncode != 0
    assert "no demo database" in before_demo.stderr and "thatch demo" in before_demo.stderr

    demo = subprocess.run(
        [thatch, "demo", "--model", str(minilm_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    shown = re.search(r"^Look at these memories in a browser: (\S+) ui --demo$", demo.stdout, re.M)
    assert shown is not None, demo.stdout
    # "thatch" only when PATH finds this very program; else a path the shell can run.
    runs = shutil.which(shown.group(1), path=env.get("PATH")) or shown.group(1)
    assert Path(runs).resolve() == Path(thatch).resolve()
    found = re.search(r"^The demo's memories are kept in (\S+)$", demo.stdout, re.M)
    assert found is not None, demo.stdout
    database = Path(found.group(1))
    assert database == home / ".cache" / "thatch" / "demo" / "thatch.db"

    ui_env = dict(env, THATCH_EMBEDDER_ADDR=minilm_server.address)
    with run_ui_process(ui_env, "--demo") as (client, entry):
        assert client.request("GET", entry).status == 303
        stores = client.get("/")
        assert ">demo</a>" in stores.body
        assert f"This is the database thatch demo left ({database}), not yours" in stores.body
        listed = client.get("/memories", store="demo")
        demo_labels = sorted(LINK.findall(listed.body))
        assert len(demo_labels) == 3 and "Running the test suite" in demo_labels
        searched = client.get("/memories", store="demo", q="where do we roll out new builds?")
        assert LINK.findall(searched.body)[0] == "Production deployment"
        memory_page = client.get("/memory", store="demo", label="Production deployment")
        forgotten = client.post(
            "/memory/forget",
            {"csrf": memory_page.csrf(), "store": "demo", "label": "Production deployment"},
        )
        assert forgotten.status == 303
        # Ctrl-C below stops the page cleanly with a live chat stream still open.
        stream = client.stream("/chat/stream")
        assert stream.status == 200 and stream.next_block() == {"retry": "2000"}
    with pytest.raises(EOFError):
        stream.next_event()
    stream.close()

    listed_cli = subprocess.run(
        [thatch, "list", "demo", "--json"],
        env=dict(ui_env, THATCH_DB_PATH=str(database)),
        capture_output=True,
        text=True,
    )
    assert listed_cli.returncode == 0, listed_cli.stderr
    remaining = sorted(entry["label"] for entry in json.loads(listed_cli.stdout))
    assert remaining == [label for label in demo_labels if label != "Production deployment"]
    # The user's own database was never created.
    assert not (home / ".config" / "thatch" / "thatch.db").exists()
    assert [p.name for p in (home / ".config").rglob("*.db")] == []


def test_status_agrees_with_doctor_on_the_setup(tmp_path: Path, env: dict[str, str]) -> None:
    """A project set up by thatch setup --claude: the Status page, started from another
    directory, says the setup is installed, as thatch doctor does (issue 23: it said every
    host setup drifted)."""
    project = Path(env["THATCH_PROJECT_DIR"])
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    thatch = str(Path(sys.executable).parent / "thatch")
    setup = subprocess.run(
        [thatch, "setup", "--claude"], env=env, cwd=project, capture_output=True, text=True
    )
    assert setup.returncode == 0, setup.stderr
    doctor = subprocess.run(
        [thatch, "doctor"], env=env, cwd=project, capture_output=True, text=True
    )
    assert "ok  setup:claude  installed (local)" in doctor.stdout, doctor.stdout
    with run_ui_process(env) as (client, entry):  # the test's cwd: not the project
        assert client.request("GET", entry).status == 303
        status = client.get("/status").body
    assert re.search(r"<td>ok</td><td>setup:claude</td><td>installed \(local\)", status), status
    assert "drifted" not in status
