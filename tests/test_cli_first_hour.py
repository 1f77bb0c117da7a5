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


@pytest.mark.parametrize(
    ("args", "meant"),
    [
        (["model", "pul"], "pull"),
        (["embedder", "serv"], "serve"),
        (["chat", "lst"], "list"),
        (["team", "jion"], "join"),
        (["hub", "member", "ad"], "add"),
        (["behaviors", "shwo"], "show"),
    ],
)
def test_a_subcommand_typo_names_the_command_meant(args: list[str], meant: str) -> None:
    """Only the top level named the command meant: a typo one level down said no more
    than "No such command"."""
    typo = run(*args)
    assert typo.exit_code == 2
    assert f"Error: No such command {args[-1]!r}. Did you mean {meant!r}?" in typo.stderr


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
    gone = run("forget", "Nothing", "--yes")  # nothing saved in proj yet: no such store
    assert gone.stderr.splitlines()[1] == "Fix: see the stores there are: thatch stores"


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
    assert fix.startswith("Fix: nothing to do, every agent and command shares it")


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


INTERRUPT_DURING_IMPORT = """
import sys
from importlib.abc import MetaPathFinder

TARGET = sys.argv[1]


class Interrupt(MetaPathFinder):
    # Ctrl-C arriving while thatch's modules are still importing.
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            raise KeyboardInterrupt
        return None


sys.meta_path.insert(0, Interrupt())
sys.argv = ["thatch", *sys.argv[2:]]
from thatch.cli.entry import main

main()
"""


@pytest.mark.parametrize(
    ("module", "args", "code", "stderr"),
    [
        ("thatch.cli.main", ["demo"], 130, "Aborted!\n"),
        ("thatch.frontend.hooks.runner", ["flush-tools"], 0, ""),
    ],
)
def test_ctrl_c_while_importing_is_one_line_not_a_traceback(
    module: str, args: list[str], code: int, stderr: str
) -> None:
    """A command interrupted before click runs says Aborted! (exit 130); a hook stays silent."""
    import sys

    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT_DURING_IMPORT, module, *args],
        capture_output=True,
        text=True,
        input="{}",
        check=False,
    )
    assert (done.returncode, done.stderr, done.stdout) == (code, stderr, "")


def test_a_virtual_file_system_is_not_called_a_full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """THATCH_DB_PATH under /proc: named as a virtual file system, fix: a file on a disk."""
    monkeypatch.setenv("THATCH_DB_PATH", "/proc/thatch.db")
    done = run("list")
    assert done.exit_code == 1
    assert done.stderr == (
        "Error: cannot open database at /proc/thatch.db: /proc is on a virtual file system "
        "(such as /proc or /sys) that cannot hold a database\n"
        "Fix: set THATCH_DB_PATH to a file on a disk (unset, it is ~/.config/thatch/thatch.db)\n"
    )


def test_a_missing_model_is_named_with_its_fix_when_remember_saves_pending(
    tmp_path: Path, isolated_env: Path
) -> None:
    """No embedder and the default model not on this machine (hub offline): remember saves
    pending and its notice names the model fix, not a start that cannot help."""
    import os
    import sys

    env = {**os.environ, "THATCH_DB_PATH": str(tmp_path / "t.db")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir(mode=0o700)
    thatch = str(Path(sys.executable).parent / "thatch")
    done = subprocess.run(
        [thatch, "remember", "Deploy", "push a tag"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # "Starting embedder…" comes first when the start takes over a second (a loaded machine).
    (notice,) = [line for line in done.stderr.splitlines() if line.startswith("Embedding")]
    assert notice.startswith("Embedding pending: the embedding service is unreachable (model ")
    fix = notice.split("; to fix it: ", 1)[1]
    assert "thatch model import" in fix and "thatch model use" in fix
    assert "embedder start" not in fix


def test_the_demo_says_how_to_run_thatch_when_path_does_not_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as .venv/bin/thatch with PATH lacking it: the demo's commands use its absolute
    path, which works from any project directory."""
    import sys

    from thatch.frontend.demo import thatch_invocation

    bin_dir = Path(sys.executable).parent
    monkeypatch.chdir(bin_dir.parent)
    monkeypatch.setattr(sys, "argv", [str(bin_dir / "thatch"), "demo"])
    assert thatch_invocation({"PATH": "/usr/bin:/bin"}) == str(bin_dir / "thatch")
    assert thatch_invocation({"PATH": f"{bin_dir}:/usr/bin"}) == "thatch"
    monkeypatch.chdir(tmp_path)
    assert thatch_invocation({"PATH": "/usr/bin"}) == str(bin_dir / "thatch")


def test_completion_after_a_typo_is_quiet() -> None:
    """Shell completion parses what was typed so far, typos included: the suggestion's
    usage error ended it in a traceback, at the top level and, once every group suggested,
    at each level."""
    import os
    import sys

    for words in ("thatch serch x", "thatch model pul x"):
        env = {**os.environ, "_THATCH_COMPLETE": "bash_complete", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "thatch.cli"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert (done.returncode, done.stderr) == (0, ""), words
