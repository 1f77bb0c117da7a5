"""The ``thatch`` console entry point.

Hook commands run on every tool call, prompt and session start of every agent session,
so they skip click: the tool hooks import only the standard library and the queue
package, the prompt hooks what their tier needs. Every other command (and any hook's
``--help``) goes through the click group.
"""

from __future__ import annotations

import sys

__all__ = ["HOOKS", "main"]

HOOKS = frozenset(
    {
        "buffer-batch",
        "buffer-tool",
        "flush-tools",
        "reminder",
        "extraction-requeue",
        "extraction-complete",
        "extraction-status",
        "session-end",
    }
)


def main() -> None:
    try:
        _dispatch(sys.argv[1:])
    except KeyboardInterrupt:
        # Ctrl-C before click has taken over (while modules are still importing) would
        # otherwise print a traceback. Hooks stay silent and exit 0, as on every failure.
        args = sys.argv[1:]
        if args and (args[0] in HOOKS or args[0] == "chat-notify"):
            sys.exit(0)
        sys.stderr.write("Aborted!\n")
        sys.exit(130)


def _dispatch(args: list[str]) -> None:
    if any(arg.startswith("--off=") for arg in args[1:]):
        # Setup's per-project switches on a hook command (frontend/switches.py): imported
        # only when present, so an ordinary hook pays nothing for them.
        import os

        from thatch.frontend.switches import apply_off_args

        apply_off_args(args[1:], os.environ)
    if args and args[0] == "chat-notify" and not {"-h", "--help"} & set(args[1:]):
        from thatch.frontend.hooks.chat_notify import run_chat_notify

        run_chat_notify(args[1:])
        sys.exit(0)
    if args == ["mcp"]:
        # Hosts snapshot their tools at their first request: answer before click and the
        # MCP SDK have loaded (cli/mcp_start.py).
        from thatch.cli.mcp_start import main as mcp_main

        mcp_main()
        sys.exit(0)
    if args and args[0] in HOOKS and not {"-h", "--help"} & set(args[1:]):
        from thatch.frontend.hooks.runner import run_hook_command

        run_hook_command(args[0], args[1:])
        sys.exit(0)
    from thatch.cli.main import main as click_main

    click_main()


if __name__ == "__main__":
    main()
