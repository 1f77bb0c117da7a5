"""Claude Code's permission rule for thatch's tools (docs/claude-code.md §permissions).

Without a rule, interactive Claude Code asks the user before every thatch tool call, the
extraction sub-agent's included. ``mcp__thatch`` in ``permissions.allow`` allows every
tool of the server named ``thatch``. Only that exact string is ours: a rule the user
wrote for a single tool (``mcp__thatch__memory_recall``) or anything else is kept.
"""

from __future__ import annotations

from typing import Any

from thatch.frontend.setup.hooks import HookFileConflict

__all__ = ["RULE", "apply", "has_rule"]

RULE = "mcp__thatch"


def _allow_list(doc: dict[str, Any], create: bool) -> list[Any] | None:
    permissions = doc.get("permissions")
    if permissions is None:
        if not create:
            return None
        permissions = doc["permissions"] = {}
    if not isinstance(permissions, dict):
        raise HookFileConflict('"permissions" is not an object')
    allow = permissions.get("allow")
    if allow is None:
        if not create:
            return None
        allow = permissions["allow"] = []
    if not isinstance(allow, list):
        raise HookFileConflict('"permissions.allow" is not a list')
    return allow


def has_rule(doc: dict[str, Any]) -> bool:
    permissions = doc.get("permissions")
    allow = permissions.get("allow") if isinstance(permissions, dict) else None
    return isinstance(allow, list) and RULE in allow


def apply(doc: dict[str, Any], allow_tools: bool) -> dict[str, Any]:
    """``doc`` (a settings object, modified in place) with our rule present or absent."""
    allow = _allow_list(doc, create=allow_tools)
    if allow is None:
        return doc
    if allow_tools:
        if RULE not in allow:
            allow.append(RULE)
        return doc
    if RULE not in allow:
        return doc
    allow[:] = [entry for entry in allow if entry != RULE]
    # Drop only the containers our rule left empty; the user's other permissions stay.
    permissions = doc["permissions"]
    if not allow:
        del permissions["allow"]
    if not permissions:
        del doc["permissions"]
    return doc
