"""Claude Code's permission rule for thatch's tools (docs/claude-code.md §permissions).

Without a rule, interactive Claude Code asks the user before every thatch tool call, the
extraction sub-agent's included. ``mcp__thatch`` in ``permissions.allow`` allows every
tool of the server named ``thatch``. ``--no-allow-tools`` moves it to ``permissions.ask``
instead: Claude Code then asks (as it would without a rule), and the entry records the
user's choice, so a rerun of setup keeps it (choices.py) rather than reading a missing
rule, in a file that is not committed, as a choice nobody made. Only that exact string is
ours: a rule the user wrote for a single tool (``mcp__thatch__memory_recall``) or
anything else is kept.
"""

from __future__ import annotations

from typing import Any

from thatch.frontend.setup.hooks import HookFileConflict

__all__ = ["RULE", "apply", "asks", "has_rule"]

RULE = "mcp__thatch"


def _rules(doc: dict[str, Any], key: str, create: bool) -> list[Any] | None:
    permissions = doc.get("permissions")
    if permissions is None:
        if not create:
            return None
        permissions = doc["permissions"] = {}
    if not isinstance(permissions, dict):
        raise HookFileConflict('"permissions" is not an object')
    rules = permissions.get(key)
    if rules is None:
        if not create:
            return None
        rules = permissions[key] = []
    if not isinstance(rules, list):
        raise HookFileConflict(f'"permissions.{key}" is not a list')
    return rules


def _listed(doc: dict[str, Any], key: str) -> bool:
    permissions = doc.get("permissions")
    rules = permissions.get(key) if isinstance(permissions, dict) else None
    return isinstance(rules, list) and RULE in rules


def has_rule(doc: dict[str, Any]) -> bool:
    """``mcp__thatch`` in ``permissions.allow``."""
    return _listed(doc, "allow")


def asks(doc: dict[str, Any]) -> bool:
    """``mcp__thatch`` in ``permissions.ask``: the user's ``--no-allow-tools``."""
    return _listed(doc, "ask")


def _add(doc: dict[str, Any], key: str) -> None:
    rules = _rules(doc, key, create=True)
    assert rules is not None
    if RULE not in rules:
        rules.append(RULE)


def _remove(doc: dict[str, Any], key: str) -> None:
    rules = _rules(doc, key, create=False)
    if rules is None or RULE not in rules:
        return
    rules[:] = [entry for entry in rules if entry != RULE]
    # Drop only the containers our rule left empty; the user's other permissions stay.
    permissions = doc["permissions"]
    if not rules:
        del permissions[key]
    if not permissions:
        del doc["permissions"]


def apply(doc: dict[str, Any], allow_tools: bool | None) -> dict[str, Any]:
    """``doc`` (a settings object, modified in place) with our rule in ``permissions.allow``
    (True) or ``permissions.ask`` (False), and out of the other list; None: as it is."""
    if allow_tools is None:
        return doc
    wanted, other = ("allow", "ask") if allow_tools else ("ask", "allow")
    _rules(doc, other, create=False)  # a list that is none: conflict, before any change
    _add(doc, wanted)
    _remove(doc, other)
    return doc
