"""The Claude Code choices a rerun of ``thatch setup`` keeps (docs/hooks.md §setup-choices).

``--post-tool-use`` / ``--post-tool-batch`` and ``--allow-tools`` / ``--no-allow-tools``
are remembered in the files they shape, as ``--engines`` / ``--chat`` are in thatch's MCP
entry: a rerun without either flag of a pair (doctor's fix for drift is one) keeps what
the files say, so it never undoes a choice the user made. Doctor asks the same, so a
choice is never drift.

A choice is read only from what records it: thatch's buffer hook under ``PostToolUse``,
``mcp__thatch`` in ``permissions.ask``. A missing rule records nothing: the personal
``settings.local.json`` is not in a teammate's clone, a new worktree or a project the
TypeScript release set up, though the committed files are. The files are read as the
writer reads them (JSONC too); one no parser reads keeps what its text shows, so a rerun
never removes a rule or flips a choice because a file could not be parsed. Doctor also
asks every settings file Claude Code reads whether one holds the rule or the ``ask``
entry (``tools_permission``): with neither, Claude asks before each thatch tool call
though nobody chose that, and doctor warns.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from thatch.frontend.setup import jsonfiles
from thatch.frontend.setup.hooks import is_thatch_command
from thatch.frontend.setup.hosts import Scope, host_paths
from thatch.frontend.setup.permissions import RULE, asks, has_rule

__all__ = ["allows_tools", "remembered", "tools_permission", "uses_post_tool_use"]


def _load(path: Path | None) -> jsonfiles.Loaded | None:
    """The file as the writer reads it; None when it cannot be read at all (the writer
    then reports it, whatever the choice)."""
    if path is None:
        return None
    try:
        return jsonfiles.load_object(path)
    except OSError:
        return None


def _shown_under(text: str, needle: str, key: str, keys: tuple[str, ...]) -> bool:
    """In a text no parser reads: whether some ``needle`` stands after ``"key"`` with none
    of the other ``keys`` between them (what the text shows, read as people read it)."""
    start = text.find(needle)
    while start >= 0:
        before = {k: text.rfind(f'"{k}"', 0, start) for k in keys}
        if before[key] >= 0 and before[key] == max(before.values()):
            return True
        start = text.find(needle, start + 1)
    return False


def uses_post_tool_use(scope: Scope, project_dir: Path, env: Mapping[str, str]) -> bool:
    """Whether thatch's buffer hook stands under PostToolUse (``--post-tool-use``)."""
    loaded = _load(host_paths("claude", scope, project_dir, env).hooks)
    if loaded is None:
        return False
    if loaded.unreadable:
        events = ("PostToolUse", "PostToolBatch")
        return _shown_under(loaded.text or "", "buffer-batch", "PostToolUse", events)
    try:
        groups = loaded.data["hooks"]["PostToolUse"]
        return any(is_thatch_command(h.get("command")) for g in groups for h in g.get("hooks", []))
    except (KeyError, TypeError, AttributeError):
        return False


def _recorded(path: Path | None) -> bool | None:
    """False when ``permissions.ask`` in ``path`` holds ``mcp__thatch``, True when
    ``permissions.allow`` does, None when neither (or there is no file to read)."""
    loaded = _load(path)
    if loaded is None:
        return None
    if loaded.unreadable:
        lists = ("allow", "ask", "deny")
        if _shown_under(loaded.text or "", f'"{RULE}"', "ask", lists):
            return False
        return True if _shown_under(loaded.text or "", f'"{RULE}"', "allow", lists) else None
    if asks(loaded.data):
        return False
    return True if has_rule(loaded.data) else None


def allows_tools(
    scope: Scope, project_dir: Path, env: Mapping[str, str], unrecorded: bool | None = True
) -> bool | None:
    """Whether the permission rule belongs: False when ``permissions.ask`` records the
    user's ``--no-allow-tools``, True when the rule is there, else ``unrecorded`` (setup:
    True, the rule is added; doctor: None, the permissions are left as they are)."""
    recorded = _recorded(host_paths("claude", scope, project_dir, env).permissions)
    return unrecorded if recorded is None else recorded


def _settings_files(project_dir: Path, env: Mapping[str, str]) -> list[Path]:
    """The settings files Claude Code takes permission rules from in the project: the
    personal ``settings.local.json``, the committed ``settings.json``, the user's."""
    local = host_paths("claude", "local", project_dir, env)
    user = host_paths("claude", "global", project_dir, env)
    assert local.permissions is not None and local.hooks is not None
    assert user.permissions is not None
    return [local.permissions, local.hooks, user.permissions]


def tools_permission(project_dir: Path, env: Mapping[str, str]) -> bool | None:
    """What Claude Code does before a thatch tool call in the project, as every settings
    file it reads says: False when one asks (an ``ask`` entry wins over a rule in any
    file), True when one holds the rule, None when none holds either (Claude asks, and
    nobody chose that: a teammate's clone without the personal settings file)."""
    found = [_recorded(path) for path in _settings_files(project_dir, env)]
    if False in found:
        return False
    return True if True in found else None


def remembered(
    post_tool_use: bool | None,
    allow_tools: bool | None,
    scope: Scope,
    project_dir: Path,
    env: Mapping[str, str],
    unrecorded_allow: bool | None = True,
) -> tuple[bool, bool | None]:
    """(post_tool_use, allow_tools): each one given, else (None) as the scope's files say."""
    return (
        uses_post_tool_use(scope, project_dir, env) if post_tool_use is None else post_tool_use,
        allows_tools(scope, project_dir, env, unrecorded_allow)
        if allow_tools is None
        else allow_tools,
    )
