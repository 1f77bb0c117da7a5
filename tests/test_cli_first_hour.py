"""The CLI a newcomer meets (issue 23): typos get a suggestion, every error names its fix,
``list``/``show``/``forget`` take ``--store`` like the other commands, the engine groups
take ``--json`` without a command, and setup keeps its personal file out of git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_proc import EmbedderProcess
from thatch.cli.main import cli


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    return tmp_path / "thatch.db"


def test_a_top_level_typo_names_the_command_meant() -> None:
    """thatch serch → 'Did you mean search?', exit 2; nonsense gets no guess."""
    typo = run("serch", "x")
    assert typo.exit_code == 2
    assert "Error: No such command 'serch'. Did you mean 'search'?" in typo.stderr
    nonsense = run("zzzzqq")
    assert nonsense.exit_code == 2 and "Did you mean" not in nonsense.stderr


def test_store_by_option_or_argument(db: Path) -> None:
    """list/show/forget accept --store as well as the positional STORE; two different ones
    are a usage error."""
    assert run("remember", "--store", "global", "Tabs", "tabs not spaces").exit_code == 0
    assert run("list", "--store", "global").stdout == run("list", "global").stdout
    assert "Tabs" in run("list", "--store", "global").stdout
    shown = run("show", "Tabs", "--store", "global")
    assert shown.exit_code == 0 and "tabs not spaces" in shown.stdout
    both = run("show", "Tabs", "proj", "--store", "global")
    assert both.exit_code == 2 and "two stores given" in both.stderr
    assert run("forget", "Tabs", "--store", "global", "--yes").exit_code == 0
    assert "Tabs" not in run("list", "--store", "global").stdout


def test_a_memory_in_another_store_is_named_with_the_command_that_shows_it(db: Path) -> None:
    """show LABEL of a memory in global: the error says where it is, the fix is the command."""
    assert run("remember", "--store", "global", "Tabs", "tabs not spaces").exit_code == 0
    missing = run("show", "Tabs")
    assert missing.exit_code == 1
    assert missing.stderr == (
        'Error: no memory labeled "Tabs" in "proj"; it is in "global".\n'
        "Fix: thatch show Tabs --store global\n"
    )
    gone = run("forget", "Nothing", "--yes")
    assert gone.stderr.splitlines()[1] == "Fix: thatch list --store proj shows its labels"


def test_engine_groups_take_json_and_store_without_a_command(db: Path) -> None:
    """thatch predictions --json is the list's JSON; after a command it is a usage error."""
    listed = run("predictions", "--json")
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.stdout) == json.loads(run("predictions", "list", "--json").stdout)
    assert run("behaviors", "--store", "global", "--json").exit_code == 0
    misplaced = run("predictions", "--json", "show", "x")
    assert misplaced.exit_code == 2 and "go after the command" in misplaced.stderr


def test_a_directory_as_the_database_path_names_the_file_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_DB_PATH pointing at a directory: the error and a Fix line naming a file in it."""
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path))
    done = run("list")
    assert done.exit_code == 1
    assert done.stderr == (
        f"Error: cannot open database at {tmp_path}: is a directory\n"
        f"Fix: set THATCH_DB_PATH to a file, e.g. {tmp_path / 'thatch.db'}\n"
    )


def test_importing_a_directory_without_a_checkpoint_says_what_to_pass(tmp_path: Path) -> None:
    done = run("model", "import", str(tmp_path))
    assert done.exit_code == 1
    error, fix = done.stderr.splitlines()
    assert error == (
        f"Error: no config.json in {tmp_path}: it is not a sentence-transformers checkpoint"
    )
    assert fix.startswith("Fix: pass the checkpoint's own directory")


def test_a_second_embedder_says_there_is_nothing_to_do(
    mock_embedder: EmbedderProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve on the address of a running embedder: exit 1, and the fix says it serves already."""
    monkeypatch.setenv("THATCH_MODEL", "mock")
    done = run("embedder", "serve", "--listen", mock_embedder.address)
    assert done.exit_code == 1
    error, fix = done.stderr.splitlines()
    assert error.startswith(f"Error: an embedder is already running at {mock_embedder.address}")
    assert fix.startswith("Fix: nothing to do: it serves every thatch process")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def test_setup_keeps_the_personal_settings_file_out_of_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup --claude in a git clone: settings.local.json is untracked and ignored through
    .git/info/exclude (not .gitignore); a second run adds nothing."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no claude CLI: the files only
    first = run("setup", "--claude")
    assert first.exit_code == 0, first.output
    assert "git ignores settings.local.json" in first.stdout
    assert (repo / ".claude" / "settings.local.json").is_file()
    untracked = _git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert "?? .claude/settings.json" in untracked
    assert not any("settings.local.json" in line for line in untracked)
    assert not (repo / ".gitignore").exists()
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/.claude/settings.local.json") == 1
    again = run("setup", "--claude")
    assert again.exit_code == 0 and "git ignores" not in again.stdout
    assert (repo / ".git" / "info" / "exclude").read_text() == exclude
