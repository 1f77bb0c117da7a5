"""The session-start reminder text (docs/hooks.md §reminder)."""

from __future__ import annotations

from thatch.frontend.hooks.nudges import host_names
from thatch.frontend.untrusted import quoted

__all__ = ["reminder_text"]


def reminder_text(project_store: str, host: str, hygiene_report: str | None = None) -> str:
    """The reminder for ``project_store``; a hygiene report adds its paragraph."""
    names = host_names(host)
    tool = names.tool
    text = (
        "[thatch] Before you reply, load what earlier sessions learned:\n"
        "(1) the user's preferences and working style,\n"
        f"(2) architecture and conventions of the project store {quoted(project_store)},\n"
        "(3) if you are not on the main branch, notes scoped to this branch.\n"
        f"Call {tool('store_list')} and {tool('memory_list')} to see what exists, "
        f"then {tool('memory_recall')} for what you need."
    )
    named = ["store_list", "memory_list", "memory_recall"]
    if hygiene_report:
        named += ["find_duplicates", "memory_show", "memory_forget"]
    load = names.load(*named)  # Claude Code may defer the thatch tools behind ToolSearch
    if load:
        text += "\n" + load
    if not hygiene_report:
        return text
    return (
        f"{text}\n\n[thatch hygiene] {hygiene_report}\n"
        "After you have handled the user's request (never before), tend the store: run "
        f"{tool('find_duplicates')} and consolidate the clusters it finds with the "
        "thatch-dedup-classifier skill; review stale memories with "
        f"{tool('memory_show')}, then update them or {tool('memory_forget')} them; fold "
        "memories scoped to deleted branches into one archived record before forgetting "
        "them; for memories embedded with another model or not embedded yet, ask the user "
        "to run `thatch reembed`."
    )
