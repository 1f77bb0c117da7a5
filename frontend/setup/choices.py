"""The Claude Code choices a rerun of ``thatch setup`` keeps (docs/hooks.md §setup-choices).

``--post-tool-use`` / ``--post-tool-batch`` and ``--allow-tools`` / ``--no-allow-tools``
are remembered in the files they shape, as ``--engines`` / ``--chat`` are in thatch's MCP
entry: a rerun without either flag of a pair (doctor's fix for drift is one) keeps what
the files say, so it never undoes a choice the user made. Doctor asks the same, so a
choice is never drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from thatch.frontend.setup.hooks import is_thatch_command
from thatch.frontend.setup.hosts import Scope, host_paths
from thatch.frontend.setup.installed import has_own_entry, json_object
from thatch.frontend.setup.permissions import has_rule

__all__ = ["allows_tools", "remembered", "uses_post_tool_use"]


def uses_post_tool_use(scope: Scope, project_dir: Path, env: Mapping[str, str]) -> bool:
    """Whether thatch's buffer hook stands under PostToolUse (``--post-tool-use``)."""
    doc = json_object(host_paths("claude", scope, project_dir, env).hooks)
    try:
        groups = doc["hooks"]["PostToolUse"]  # type: ignore[index]
        return any(is_thatch_command(h.get("command")) for g in groups for h in g.get("hooks", []))
    except (KeyError, TypeError, AttributeError):
        return False


def allows_tools(scope: Scope, project_dir: Path, env: Mapping[str, str]) -> bool:
    """Whether the permission rule belongs: it is there, or thatch is not set up in this
    scope yet (a first setup adds it). Set up without it: the user's ``--no-allow-tools``,
    or a rule they removed by hand; either is theirs to undo (``--allow-tools``)."""
    if has_rule(json_object(host_paths("claude", scope, project_dir, env).permissions)):
        return True
    return not has_own_entry("claude", scope, project_dir, env)


def remembered(
    post_tool_use: bool | None,
    allow_tools: bool | None,
    scope: Scope,
    project_dir: Path,
    env: Mapping[str, str],
) -> tuple[bool, bool]:
    """(post_tool_use, allow_tools): each one given, else (None) as the scope's files say."""
    return (
        uses_post_tool_use(scope, project_dir, env) if post_tool_use is None else post_tool_use,
        allows_tools(scope, project_dir, env) if allow_tools is None else allow_tools,
    )
