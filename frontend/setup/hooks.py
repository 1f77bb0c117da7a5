"""Recognise and replace thatch's hook entries in host hook files (docs/hooks.md §hook-entries).

An entry is thatch's only when its command, split with shell rules, is exactly a thatch
hook invocation. Earlier releases removed every hook whose command merely contained
"thatch", which deleted users' own hooks; anything not matching the strict shape is kept.
Options a user added to thatch's entry (a timeout, a matcher on its group) carry over to
the entry that replaces it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any

from thatch.frontend.setup.own_keys import Replaced, merge_own
from thatch.frontend.switches import OFF_OPTION, off_args

__all__ = [
    "HOOK_SUBCOMMANDS",
    "HookFileConflict",
    "claude_commands",
    "cursor_commands",
    "is_thatch_command",
    "merge_claude",
    "merge_cursor",
]

HOOK_SUBCOMMANDS = frozenset(
    {
        "reminder",
        "buffer-batch",
        "buffer-tool",
        "flush-tools",
        "flush-predictions",
        "chat-notify",
        "session-end",
        "extraction-complete",
        "extraction-requeue",
        "echo",
    }
)


class HookFileConflict(ValueError):
    """The hook file has a shape setup cannot merge into without losing the user's data."""


def is_thatch_command(command: object) -> bool:
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if words and words[-1].startswith(OFF_OPTION):
        words = words[:-1]  # the project's switches (frontend/switches.py), always last
    if not 2 <= len(words) <= 5:  # thatch <hook> [--json] [--host <host>]
        return False
    if os.path.basename(words[0]) != "thatch" or words[1] not in HOOK_SUBCOMMANDS:
        return False
    rest = words[2:]
    while rest:
        if rest[0] == "--json":
            rest = rest[1:]
        elif rest[0] == "--host" and len(rest) >= 2:
            rest = rest[2:]
        else:
            return False
    return True


def claude_commands(
    bin_word: str, post_tool_use: bool, off: frozenset[str] = frozenset()
) -> dict[str, str]:
    """Event -> command for Claude Code; ``bin_word`` is already shell-quoted; ``off``:
    the features the project switched off (each command carries them)."""
    commands = {
        "SessionStart": f"{bin_word} reminder",
        "PostToolUse" if post_tool_use else "PostToolBatch": f"{bin_word} buffer-batch",
        "UserPromptSubmit": f"{bin_word} flush-tools",
        "Stop": f"{bin_word} chat-notify",
        # The last turn's calls move to the project's queue (docs/hooks.md §carry-over).
        "SessionEnd": f"{bin_word} session-end",
        # The extractor's stop completes its snapshot even without extraction_done
        # (docs/hooks.md §snapshot); any other sub-agent's stop changes nothing.
        "SubagentStop": f"{bin_word} extraction-complete",
    }
    return _with_off(commands, off)


def _with_off(commands: dict[str, str], off: frozenset[str]) -> dict[str, str]:
    suffix = "".join(f" {arg}" for arg in off_args(off))
    return {event: command + suffix for event, command in commands.items()}


def cursor_commands(bin_word: str, off: frozenset[str] = frozenset()) -> dict[str, str]:
    # Every command names its host, which picks the payload's session field
    # (hookio.host_session): left to THATCH_HOST or CURSOR_PROJECT_DIR, a session could
    # queue under one id and be nudged or carried over under the other.
    commands = {
        "sessionStart": f"{bin_word} reminder --json --host cursor",
        "postToolUse": f"{bin_word} buffer-tool --host cursor",
        "beforeSubmitPrompt": f"{bin_word} flush-tools --json --host cursor",
        "stop": f"{bin_word} chat-notify --host cursor",
        # Fire-and-forget; carries session_id and conversation_id like the prompt hook
        # (docs/hooks.md §cursor). Cursor's subagentStop names no agent, so the snapshot
        # is left to extraction_done and the 10-minute expiry there.
        "sessionEnd": f"{bin_word} session-end --host cursor",
    }
    return _with_off(commands, off)


# Cursor's own cap on follow-ups one stop hook may chain (docs/chat.md §liveness).
CURSOR_ENTRY_EXTRAS: dict[str, dict[str, Any]] = {"stop": {"loop_limit": 3}}

# Claude Code gives SessionEnd hooks 1.5 s in all unless one names a longer timeout
# (seconds, at most 60): on a loaded machine session-end was killed mid-carry, between
# taking the session's queue lock and the project's (each wait up to 2 s). The other
# events' default (60 s and more) already covers every hook's worst case.
SESSION_END_TIMEOUT = 10
CLAUDE_ENTRY_EXTRAS: dict[str, dict[str, Any]] = {"SessionEnd": {"timeout": SESSION_END_TIMEOUT}}


def _hooks_map(doc: dict[str, Any]) -> dict[str, Any]:
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise HookFileConflict('"hooks" is not an object')
    return hooks


def _event_list(hooks: dict[str, Any], event: str) -> list[Any]:
    entries = hooks.get(event, [])
    if not isinstance(entries, list):
        raise HookFileConflict(f'"hooks.{event}" is not a list')
    return entries


def _without_thatch_groups(groups: list[Any]) -> list[Any]:
    kept: list[Any] = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            kept.append(group)
            continue
        remaining = [h for h in inner if not (isinstance(h, dict) and is_thatch(h))]
        if len(remaining) == len(inner):
            kept.append(group)
        elif remaining:
            kept.append({**group, "hooks": remaining})
    return kept


def is_thatch(entry: dict[str, Any]) -> bool:
    return is_thatch_command(entry.get("command"))


def _old_claude_options(groups: list[Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What thatch's entries in ``groups`` held (later ones win), and what the groups
    holding nothing but thatch's entries held: the groups setup drops. None: none there."""
    entry: dict[str, Any] | None = None
    group_keys: dict[str, Any] | None = None
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        ours = [h for h in inner if isinstance(h, dict) and is_thatch(h)]
        for hook in ours:
            entry = {**(entry or {}), **hook}
        if ours and len(ours) == len(inner):
            group_keys = {**(group_keys or {}), **group}
    return entry, group_keys


def merge_claude(
    doc: dict[str, Any],
    bin_word: str,
    post_tool_use: bool,
    off: frozenset[str] = frozenset(),
    replaced: list[Replaced] | None = None,
) -> dict[str, Any]:
    """``doc`` (a settings.json object, modified in place) with thatch's hooks current;
    each user value of a key thatch writes that gives way is appended to ``replaced``."""
    replaced = [] if replaced is None else replaced
    hooks = _hooks_map(doc)
    buffer_event = "PostToolUse" if post_tool_use else "PostToolBatch"
    other = "PostToolBatch" if post_tool_use else "PostToolUse"
    moved: dict[str, Any] | None = None
    if other in hooks:
        # The buffer hook's own keys (a timeout, an env) move with it; its group's stay
        # behind, a matcher meaning something else under the other event.
        moved, _ = _old_claude_options(_event_list(hooks, other))
        remaining = _without_thatch_groups(_event_list(hooks, other))
        if remaining:
            hooks[other] = remaining
        else:
            del hooks[other]
    for event, command in claude_commands(bin_word, post_tool_use, off).items():
        old_entry, old_group = _old_claude_options(_event_list(hooks, event))
        if event == buffer_event and moved is not None:
            old_entry = {**moved, **(old_entry or {})}  # the event's own entry is later
        listed = _event_list(hooks, event)
        groups = _without_thatch_groups(listed)
        # Claude Code runs an event's hooks side by side: where thatch's group stands is
        # the user's to choose, and moving it past theirs would be a change for nothing.
        # Every group before thatch's first own group is kept; a new group goes last.
        at = next((i for i, group in enumerate(listed) if _ours(group)), len(groups))
        fresh = {"type": "command", "command": command, **CLAUDE_ENTRY_EXTRAS.get(event, {})}
        entry = merge_own(fresh, old_entry, _named(f"thatch's {event} hook"), replaced)
        group: dict[str, Any] = {"matcher": "*"} if event == "PostToolUse" else {}
        group["hooks"] = [entry]
        where = _named(f"thatch's {event} hook group")
        hooks[event] = [*groups[:at], merge_own(group, old_group, where, replaced), *groups[at:]]
    return doc


def _ours(group: object) -> bool:
    """A Claude hook group holding thatch's hooks and nothing else."""
    inner = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(inner, list) or not inner:
        return False
    return all(isinstance(h, dict) and is_thatch(h) for h in inner)


def _named(owner: str) -> Callable[[str], str]:
    return lambda key: f"the {key} of {owner}"


def merge_cursor(
    doc: dict[str, Any],
    bin_word: str,
    off: frozenset[str] = frozenset(),
    replaced: list[Replaced] | None = None,
) -> dict[str, Any]:
    """A Cursor hooks.json object with thatch's hooks current (``"version": 1`` first if
    new); each user value of a key thatch writes that gives way is appended to ``replaced``."""
    replaced = [] if replaced is None else replaced
    if "version" not in doc:
        doc = {"version": 1, **doc}
    hooks = _hooks_map(doc)
    for event, command in cursor_commands(bin_word, off).items():
        entries = _event_list(hooks, event)
        ours = [i for i, e in enumerate(entries) if isinstance(e, dict) and is_thatch(e)]
        kept = [e for i, e in enumerate(entries) if i not in ours]
        # Where thatch's entry stands is the user's to choose, as in Claude's: it stays
        # where its first one stood (every entry before it is kept); a new one goes last.
        at = ours[0] if ours else len(kept)
        old: dict[str, Any] | None = None
        for i in ours:
            old = {**(old or {}), **entries[i]}  # later entries win, as in Claude's
        fresh = {"command": command, **CURSOR_ENTRY_EXTRAS.get(event, {})}
        entry = merge_own(fresh, old, _named(f"thatch's {event} hook"), replaced)
        hooks[event] = [*kept[:at], entry, *kept[at:]]
    return doc
