"""Recognising thatch's hook entries strictly and replacing them per host (docs/hooks.md
§hook-entries)."""

from __future__ import annotations

import pytest

from thatch.frontend.setup.hooks import (
    HookFileConflict,
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
        "thatch reminder --json --host claude",  # five words
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
    """Thatch entries leave their groups; emptied groups go; others keep their order."""
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
        {"hooks": [{"type": "command", "command": "mine"}]},
        "not-a-group",
        {"hooks": [{"type": "command", "command": "thatch flush-tools"}]},
    ]


def test_claude_merge_is_stable() -> None:
    """Merging twice gives the same document."""
    once = merge_claude({}, "thatch", post_tool_use=True)
    import copy

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
