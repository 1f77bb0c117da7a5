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
never removes a rule or flips a choice because a file could not be parsed.

Doctor also asks whether any settings file Claude Code reads decides thatch's tool calls
(``tools_permission``): a rule for them in ``allow``, ``ask`` or ``deny`` (``mcp__thatch``,
``mcp__thatch__*``, or one tool's, as "don't ask again" writes it), a permission mode that
decides for the prompt, or managed settings that take no rule from the project. These it
reads as Claude Code does, as strict JSON: Claude Code ignores a settings file with a
comment or a trailing comma whole. When nothing decides, doctor warns: nobody chose.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thatch.frontend.regular_files import read_regular
from thatch.frontend.setup import hosts, jsonfiles
from thatch.frontend.setup.hooks import is_thatch_command
from thatch.frontend.setup.hosts import Scope, host_paths
from thatch.frontend.setup.permissions import RULE, asks, has_rule

__all__ = [
    "ToolsPermission",
    "allows_tools",
    "remembered",
    "tools_permission",
    "uses_post_tool_use",
]

# The permission modes in which a thatch tool call that no rule decides is put to the
# user (acceptEdits decides only edits and file commands); in any other (plan, auto,
# dontAsk, bypassPermissions, one to come) Claude Code or the user decided otherwise.
PROMPTING_MODES = frozenset({"default", "manual", "acceptEdits"})


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


@dataclass(frozen=True)
class ToolsPermission:
    """What doctor needs of the settings for thatch's tool calls in a project."""

    decided: bool  # some settings decide them: a rule, a permission mode, managed settings
    ignored: tuple[tuple[Path, str], ...] = ()  # files Claude Code ignores, and why


def tools_permission(project_dir: Path, env: Mapping[str, str]) -> ToolsPermission:
    """Whether the settings files Claude Code reads in the project decide thatch's tool
    calls: the personal ``settings.local.json``, the committed ``settings.json``, the
    user's, and the system's managed ones. Not decided when none holds a rule for them
    or a permission mode other than a prompting one, and managed settings leave the
    project's rules in force (``allowManagedPermissionRulesOnly`` makes them the only
    rules: not the project's to say). A file that cannot be read at all (a directory, a
    FIFO, unreadable) might decide: taken as deciding, so doctor claims nothing."""
    local = host_paths("claude", "local", project_dir, env)
    user = host_paths("claude", "global", project_dir, env)
    assert local.permissions is not None and local.hooks is not None
    assert user.permissions is not None
    ignored: list[tuple[Path, str]] = []
    decided = False
    for path in [local.permissions, local.hooks, user.permissions, *_managed_files()]:
        doc = _settings(path)
        if isinstance(doc, str):
            ignored.append((path, doc))
        elif doc is _UNKNOWN:
            decided = True
        elif isinstance(doc, dict):
            managed = path.is_relative_to(hosts.CLAUDE_MANAGED_DIR)
            if managed and doc.get("allowManagedPermissionRulesOnly") is True:
                return ToolsPermission(True)
            decided = decided or _decides(doc)
    return ToolsPermission(decided, tuple(ignored))


_UNKNOWN = object()


def _settings(path: Path) -> dict[str, Any] | str | object | None:
    """The settings file at ``path`` as Claude Code parses it: its object; None when there
    is none; why Claude Code ignores it (not strict JSON, no object); ``_UNKNOWN`` when
    it cannot be read here."""
    try:
        raw = read_regular(path, jsonfiles.MAX_JSON_BYTES)
    except FileNotFoundError:
        return None
    except OSError:
        return _UNKNOWN
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
        if not text.strip():
            return None  # Claude Code reads an empty file as no settings
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return "not JSON"
    return doc if isinstance(doc, dict) else "no JSON object"


def _managed_files() -> list[Path]:
    """The managed settings files Claude Code reads on this system: managed-settings.json,
    then the drop-ins of managed-settings.d in name order."""
    base = hosts.CLAUDE_MANAGED_DIR
    try:
        names = sorted(
            entry.name
            for entry in (base / "managed-settings.d").iterdir()
            if entry.name.endswith(".json") and not entry.name.startswith(".")
        )
    except OSError:
        names = []
    return [base / "managed-settings.json", *(base / "managed-settings.d" / n for n in names)]


def _decides(doc: dict[str, Any]) -> bool:
    """Whether the settings ``doc`` decide thatch's tool calls: a rule for them in
    ``permissions.allow``, ``ask`` or ``deny``, or a permission mode that is no prompting
    one."""
    permissions = doc.get("permissions")
    if not isinstance(permissions, dict):
        return False
    if "defaultMode" in permissions and permissions["defaultMode"] not in PROMPTING_MODES:
        return True
    for key in ("allow", "ask", "deny"):
        rules = permissions.get(key)
        if isinstance(rules, list) and any(map(_thatch_rule, rules)):
            return True
    return False


def _thatch_rule(rule: object) -> bool:
    """A rule for thatch's tools: the server's (``mcp__thatch``, ``mcp__thatch__*``) or one
    tool's (``mcp__thatch__memory_recall``, as "Yes, and don't ask again" writes it). A
    wider wildcard (``mcp__*``) counts too: whether Claude Code applies one is not doctor's
    to say, so it says nothing."""
    if not isinstance(rule, str):
        return False
    if rule == RULE or rule.startswith(f"{RULE}__"):
        return True
    return "*" in rule and fnmatch.fnmatchcase(f"{RULE}__memory_recall", rule)


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
