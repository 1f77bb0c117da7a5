"""claude_server_declined: what the project's Claude settings say about thatch's server
(docs/claude-code.md §declined)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from thatch.frontend.setup.declined import MAX_SETTINGS_BYTES, claude_server_declined


def write(project: Path, name: str, doc: object) -> None:
    path = project / ".claude" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


@pytest.mark.parametrize(
    ("local", "shared", "declined"),
    [
        (None, None, False),
        ({"disabledMcpjsonServers": ["thatch"]}, None, True),
        (None, {"disabledMcpjsonServers": ["other", "thatch"]}, True),
        ({"disabledMcpjsonServers": ["other"]}, None, False),
        ({"enabledMcpjsonServers": ["thatch"]}, {"disabledMcpjsonServers": ["thatch"]}, False),
        ({"enableAllProjectMcpServers": True}, {"disabledMcpjsonServers": ["thatch"]}, False),
        ({"permissions": {}}, {"disabledMcpjsonServers": ["thatch"]}, True),
        (
            {"enabledMcpjsonServers": ["thatch"], "disabledMcpjsonServers": ["thatch"]},
            None,
            True,
        ),
        ({"enableAllProjectMcpServers": "yes"}, {"disabledMcpjsonServers": ["thatch"]}, True),
        ({"disabledMcpjsonServers": "thatch"}, None, False),
    ],
)
def test_settings_decide(tmp_path: Path, local: object, shared: object, declined: bool) -> None:
    """settings.local.json (the dialog's answer) decides first, then settings.json; a
    rejection beats an approval in the same file; no answer is not a refusal."""
    if local is not None:
        write(tmp_path, "settings.local.json", local)
    if shared is not None:
        write(tmp_path, "settings.json", shared)
    assert claude_server_declined(tmp_path) is declined


@pytest.mark.parametrize(
    "bad", ["", "{not json", "[1, 2]", "null", "\udcff", '{"disabledMcpjsonServers": [[]]}']
)
def test_bad_files_say_nothing(tmp_path: Path, bad: str) -> None:
    """An unreadable local file falls through to the shared one; never raises."""
    path = tmp_path / ".claude" / "settings.local.json"
    path.parent.mkdir()
    path.write_bytes(bad.encode("utf-8", "surrogateescape"))
    assert claude_server_declined(tmp_path) is False
    write(tmp_path, "settings.json", {"disabledMcpjsonServers": ["thatch"]})
    assert claude_server_declined(tmp_path) is True


def test_directory_in_place_of_a_file_and_missing_project(tmp_path: Path) -> None:
    (tmp_path / ".claude" / "settings.local.json").mkdir(parents=True)
    assert claude_server_declined(tmp_path) is False
    assert claude_server_declined(tmp_path / "nope") is False


def test_huge_file_is_not_parsed(tmp_path: Path) -> None:
    padding = " " * MAX_SETTINGS_BYTES
    write(tmp_path, "settings.local.json", '{"disabledMcpjsonServers": ["thatch"]}' + padding)
    assert claude_server_declined(tmp_path) is False


def test_import_stays_stdlib_only() -> None:
    """The hook paths import it on every prompt: it must not pull in setup's other modules."""
    code = (
        "import sys\n"
        "from thatch.frontend.setup.declined import claude_server_declined\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('thatch'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert eval(out) == [  # our own printed list
        "thatch",
        "thatch.frontend",
        "thatch.frontend.setup",
        "thatch.frontend.setup.declined",
    ]


def test_env_is_accepted_and_does_not_change_the_answer(tmp_path: Path) -> None:
    write(tmp_path, "settings.local.json", {"disabledMcpjsonServers": ["thatch"]})
    assert claude_server_declined(tmp_path, {"CLAUDE_CONFIG_DIR": str(tmp_path / "x")}) is True
    assert claude_server_declined(tmp_path, {}) is True
