"""The hook commands hosts run on every session start, tool call and prompt.

``buffer-batch`` and ``buffer-tool`` run after every tool call, so this module imports
only the standard library, click and ``thatch.frontend.queue``/``hooks.hookio`` at the top;
what ``reminder`` and ``flush-tools`` need (store, embedder client, git) is imported
inside the functions that use it. Every command exits 0 whatever happens (docs/hooks.md
§rules): problems are one stderr line, tracebacks only with ``THATCH_DEBUG=1``.
"""

from __future__ import annotations

from typing import Any

import click

from thatch.frontend.hooks import hookio
from thatch.frontend.hooks.hookio import hook_options
from thatch.frontend.hooks.runner import run_buffer_hook, run_extraction_status

__all__ = [
    "HOOK_SETTINGS",
    "HookCommand",
    "buffer_batch",
    "buffer_tool",
    "extraction_complete",
    "extraction_requeue",
    "extraction_status",
    "flush_tools",
    "reminder",
    "session_end",
]

# Hosts add options over time; an unknown one must not turn a hook into exit 2.
HOOK_SETTINGS: dict[str, Any] = {
    "ignore_unknown_options": True,
    "allow_extra_args": True,
    "help_option_names": ["-h", "--help"],
}


class HookCommand(click.Command):
    """A hook always exits 0: malformed options of its own are reported, not fatal."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        original = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            hookio.warn(self.name or "hook", f"ignoring bad options: {error.format_message()}")
            lenient = hook_options(self.name or "hook", original)
            ctx.params = {p.name: lenient.get(p.name) for p in self.params if p.name}
            return []


# Every hook's --host: how its texts name tools, and which payload field names the session.
HOST_HELP = "claude, cursor or opencode (tool naming, the payload's session field)."


# -- tool hooks ------------------------------------------------------------------------


@click.command("buffer-batch", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def buffer_batch(host: str | None) -> None:
    """Claude Code tool hook: queue a batch of tool calls for fact extraction."""
    run_buffer_hook("buffer-batch", host)


@click.command("buffer-tool", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def buffer_tool(host: str | None) -> None:
    """Cursor/opencode tool hook: queue one tool call for fact extraction; for Cursor,
    also print the prompt's held nudge as {"additional_context": …}, once."""
    run_buffer_hook("buffer-tool", host)


@click.command("extraction-requeue", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def extraction_requeue(host: str | None) -> None:
    """Extractor died: stdin {session_id}; its handed-out records are pending again."""
    run_buffer_hook("extraction-requeue", host)


@click.command("extraction-complete", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def extraction_complete(host: str | None) -> None:
    """Extractor finished: stdin {session_id}; drain exactly the handed-out records."""
    run_buffer_hook("extraction-complete", host)


@click.command("extraction-status", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def extraction_status(host: str | None) -> None:
    """stdin {session_id}: print {"pending": n, "accepted": b} (the opencode plugin's check)."""
    run_extraction_status(host)


@click.command("session-end", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--host", default=None, help=HOST_HELP)
def session_end(host: str | None) -> None:
    """Session-end hook: carry the session's queued calls over to the project's next session."""
    run_buffer_hook("session-end", host)


@click.command("flush-tools", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--json", "as_json", is_flag=True, help='Print {"additional_context": …}.')
@click.option("--host", default=None, help=HOST_HELP)
def flush_tools(as_json: bool, host: str | None) -> None:
    """Prompt hook: print the nudges that apply (extraction, relevant memories, engine
    blocks, unread chat), or nothing. For Cursor (whose prompt hook cannot add context):
    hold them for the session's next buffer-tool and print {"continue": true}."""
    from thatch.frontend.hooks.prompt_hooks import run_flush_tools

    run_flush_tools(as_json, host)


@click.command("reminder", cls=HookCommand, context_settings=HOOK_SETTINGS)
@click.option("--json", "as_json", is_flag=True, help='Print {"additional_context": …}.')
@click.option("--host", default=None, help=HOST_HELP)
def reminder(as_json: bool, host: str | None) -> None:
    """Session-start hook: remind the agent to load memories; report store hygiene."""
    from thatch.frontend.hooks.prompt_hooks import run_reminder

    run_reminder(as_json, host)
