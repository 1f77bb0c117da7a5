"""Recognising thatch's hook entries strictly and replacing them per host (docs/hooks.md
§hook-entries)."""

from __future__ import annotations

import copy
import shlex

import pytest

from thatch.cli.entry import HOOKS
from thatch.frontend.setup.hooks import (
    HookFileConflict,
    claude_commands,
    cursor_commands,
    is_thatch_command,
    merge_claude,
    merge_cursor,
)


@pytest.mark.parametrize(
    "command",
    [
        "thatch reminder",
        "/usr/local/bin/thatch buffer-batch",
        "'/opt/my tools/thatch' flush-tools --json",
        "thatch chat-notify --host cursor --off=chat",
        "thatch reminder --json --off=engines,chat",
        "thatch flush-tools --json --host cursor",  # Cursor's: every command names its host
    ],
)
def test_thatch_commands_recognised(command: str) -> None:
    """Exact thatch hook invocations are thatch's."""
    assert is_thatch_command(command)


@pytest.mark.parametrize(
    "command",
    [
        "echo thatch",
        "/usr/bin/thatch-other reminder",
        "thatch reminder --verbose",
        "thatch",
        "thatch mcp",
        "thatch reminder --json --host claude --json",  # six words
        "thatch reminder --off=chat --json",  # the switches come last
        "thatch reminder --host",
        "thatch 'unterminated",
        "bash -c 'thatch reminder'",
        None,
        42,
    ],
)
def test_foreign_commands_kept(command: object) -> None:
    """Commands that merely mention thatch, or have any other shape, are not thatch's."""
    assert not is_thatch_command(command)


def test_host_option_recognised() -> None:
    """`--host <value>` is allowed within four words."""
    assert is_thatch_command("thatch buffer-tool --host cursor")


def test_claude_merge_drops_emptied_groups_keeps_others() -> None:
    """Thatch entries leave their groups; emptied groups go; others keep their order, and
    thatch's group stays where its first group of its own was."""
    doc = {
        "hooks": {
            "UserPromptSubmit": [
                {"hooks": [{"type": "command", "command": "thatch flush-tools"}]},
                {
                    "hooks": [
                        {"type": "command", "command": "mine"},
                        {"type": "command", "command": "thatch flush-tools --json"},
                    ]
                },
                "not-a-group",
            ]
        }
    }
    out = merge_claude(doc, "thatch", post_tool_use=False)
    groups = out["hooks"]["UserPromptSubmit"]
    assert groups == [
        {"hooks": [{"type": "command", "command": "thatch flush-tools"}]},
        {"hooks": [{"type": "command", "command": "mine"}]},
        "not-a-group",
    ]


def test_claude_merge_is_stable() -> None:
    """Merging twice gives the same document."""
    once = merge_claude({}, "thatch", post_tool_use=True)
    assert merge_claude(copy.deepcopy(once), "thatch", post_tool_use=True) == once
    assert once["hooks"]["PostToolUse"] == [
        {"matcher": "*", "hooks": [{"type": "command", "command": "thatch buffer-batch"}]}
    ]


def test_cursor_merge_adds_version_first() -> None:
    """A hooks.json without version gets "version": 1 as its first key."""
    out = merge_cursor({"hooks": {"stop": [{"command": "x"}]}}, "thatch")
    assert list(out) == ["version", "hooks"]
    # The foreign stop hook is kept, thatch's chat-notify comes after it.
    assert out["hooks"]["stop"] == [
        {"command": "x"},
        {"command": "thatch chat-notify --host cursor", "loop_limit": 3},
    ]
    assert merge_cursor({"version": 2}, "thatch")["version"] == 2


@pytest.mark.parametrize("doc", [{"hooks": []}, {"hooks": {"sessionStart": {"a": 1}}}])
def test_unmergeable_shapes_conflict(doc: dict[str, object]) -> None:
    """Hook maps or event lists of the wrong type raise HookFileConflict."""
    with pytest.raises(HookFileConflict):
        merge_cursor(doc, "thatch")


@pytest.mark.parametrize("post_tool_use", [False, True])
def test_every_installed_command_is_one_thatch_runs_and_recognises(post_tool_use: bool) -> None:
    """Each command setup writes is a hook the entry point runs without click (or the
    chat hook), and is recognised as thatch's, so a rerun replaces it instead of adding a
    second copy."""
    commands = [
        *claude_commands("thatch", post_tool_use).values(),
        *cursor_commands("thatch").values(),
    ]
    for command in commands:
        assert is_thatch_command(command), command
        sub = shlex.split(command)[1]
        assert sub in HOOKS or sub == "chat-notify", command


def test_claude_session_end_and_subagent_stop_are_wired() -> None:
    """SessionEnd carries the last turn's calls over; SubagentStop completes the snapshot."""
    hooks = merge_claude({}, "thatch", post_tool_use=False)["hooks"]
    # Claude Code gives SessionEnd 1.5 s unless the entry names a longer timeout.
    assert hooks["SessionEnd"] == [
        {"hooks": [{"type": "command", "command": "thatch session-end", "timeout": 10}]}
    ]
    assert hooks["SubagentStop"] == [
        {"hooks": [{"type": "command", "command": "thatch extraction-complete"}]}
    ]


def test_a_session_end_entry_without_its_timeout_is_replaced_once() -> None:
    """An install from before the SessionEnd timeout: a rerun writes it, a further rerun
    changes nothing."""
    old = merge_claude({}, "thatch", post_tool_use=False)
    del old["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"]
    new = merge_claude(copy.deepcopy(old), "thatch", post_tool_use=False)
    assert new["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] == 10
    assert merge_claude(copy.deepcopy(new), "thatch", post_tool_use=False) == new


def test_an_older_install_gains_the_new_events_and_keeps_foreign_hooks() -> None:
    """An install from before SessionEnd/SubagentStop were wired: a rerun adds them after
    the user's own hooks in those events, and replaces (never duplicates) the old ones."""
    old = merge_claude({}, "thatch", post_tool_use=False)
    del old["hooks"]["SessionEnd"], old["hooks"]["SubagentStop"]
    mine_end = {"hooks": [{"type": "command", "command": "notify-send bye"}]}
    mine_sub = {"matcher": "Explore", "hooks": [{"type": "command", "command": "log-agent"}]}
    old["hooks"]["SessionEnd"] = [mine_end]
    old["hooks"]["SubagentStop"] = [mine_sub]
    new = merge_claude(copy.deepcopy(old), "thatch", post_tool_use=False)["hooks"]
    assert new["SessionEnd"] == [
        mine_end,
        {"hooks": [{"type": "command", "command": "thatch session-end", "timeout": 10}]},
    ]
    assert new["SubagentStop"] == [
        mine_sub,
        {"hooks": [{"type": "command", "command": "thatch extraction-complete"}]},
    ]
    for event in ("SessionStart", "PostToolBatch", "UserPromptSubmit", "Stop"):
        assert new[event] == old["hooks"][event]


def test_cursor_session_end_is_wired_after_foreign_entries() -> None:
    """Cursor's sessionEnd runs session-end; a user's own sessionEnd hook stays first."""
    out = merge_cursor({"hooks": {"sessionEnd": [{"command": "audit.sh"}]}}, "thatch")
    assert out["hooks"]["sessionEnd"] == [
        {"command": "audit.sh"},
        {"command": "thatch session-end --host cursor"},
    ]
    assert "subagentStop" not in out["hooks"]  # it names no agent: see cursor_commands
