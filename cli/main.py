"""The ``thatch`` command: a click group whose subcommands are imported on demand.

Hook commands run on every agent turn, so ``thatch buffer-batch`` must not pay for
importing grpc, numpy or the MCP SDK: each subcommand lives in its own module and is
imported only when invoked (or when ``--help`` lists them).
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from thatch.cli.groups import SuggestingGroup
from thatch.common.version import thatch_version

__all__ = ["COMMANDS", "CONTEXT_SETTINGS", "LazyGroup", "cli", "main"]

# name -> "module:attribute"; modules are imported only when the command runs.
COMMANDS: dict[str, str] = {
    "embedder": "thatch.cli.embedder_cmds:embedder",
    "model": "thatch.cli.model_cmds:model",
    "mcp": "thatch.cli.mcp_cmd:mcp",
    "stores": "thatch.cli.store_cmds:stores",
    "list": "thatch.cli.store_cmds:list_cmd",
    "show": "thatch.cli.store_cmds:show",
    "forget": "thatch.cli.store_cmds:forget",
    "search": "thatch.cli.store_cmds:search",
    "remember": "thatch.cli.store_cmds:remember",
    "dedup": "thatch.cli.store_cmds:dedup",
    "predictions": "thatch.cli.engine_cmds:predictions",
    "behaviors": "thatch.cli.engine_cmds:behaviors",
    "setup": "thatch.cli.setup_cmd:setup",
    "reminder": "thatch.cli.hook_cmds:reminder",
    "buffer-batch": "thatch.cli.hook_cmds:buffer_batch",
    "buffer-tool": "thatch.cli.hook_cmds:buffer_tool",
    "flush-tools": "thatch.cli.hook_cmds:flush_tools",
    "chat-notify": "thatch.cli.chat_cmds:chat_notify",
    "chat": "thatch.cli.chat_cmds:chat",
    "extraction-requeue": "thatch.cli.hook_cmds:extraction_requeue",
    "extraction-complete": "thatch.cli.hook_cmds:extraction_complete",
    "extraction-status": "thatch.cli.hook_cmds:extraction_status",
    "session-end": "thatch.cli.hook_cmds:session_end",
    "hygiene": "thatch.cli.hygiene_cmd:hygiene",
    "restore-branch": "thatch.cli.branch_cmds:restore_branch",
    "reembed": "thatch.cli.reembed_cmd:reembed",
    "doctor": "thatch.cli.doctor_cmd:doctor",
    "demo": "thatch.cli.demo_cmd:demo",
    "ui": "thatch.cli.ui_cmd:ui",
    "team": "thatch.cli.team_cmds:team",
    "hub": "thatch.cli.hub_cmds:hub",
}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class LazyGroup(SuggestingGroup):
    def __init__(self, *args: object, lazy: dict[str, str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(thatch_version())
        ctx.exit(0)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.option(
    "-v",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version and exit.",
)
def cli() -> None:
    """thatch: persistent memory for AI coding agents.

    Agents save what they learn with thatch's MCP tools and recall it by meaning in
    later sessions. This command inspects and edits the store, runs the shared
    embedding service, manages models and wires thatch into agent hosts.

    \b
    Start here:
      thatch demo               thatch end to end in a scratch directory
      thatch setup --claude     wire thatch into Claude Code (or --cursor, --opencode)
      thatch doctor             check the database, embedder, model and setup
    Offline: thatch model import DIR, then thatch model use ID (see thatch model --help).
    """


def main() -> None:
    try:
        cli(prog_name="thatch")
    except OSError as error:
        if os.environ.get("THATCH_DEBUG") == "1":
            raise
        # A full disk or a dead terminal under stdout, or an OSError nothing nearer
        # turned into an error line: one line, never a traceback.
        reason = error.strerror or str(error) or type(error).__name__
        if _writing_output(error):
            # What stdout still buffers would fail again at exit (exit status 120).
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            click.echo(f"Error: cannot write the output: {reason}", err=True)
        else:
            where = f": {error.filename}" if error.filename else ""
            click.echo(f"Error: {reason}{where}", err=True)
        sys.exit(1)


def _writing_output(error: OSError) -> bool:
    """Whether ``error`` came from writing to stdout (the innermost frame is click's echo
    or a write to stdout), not from a file or socket of the command's own."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    last = frames[-1] if frames else None
    return last is not None and (last.name in {"echo", "secho"} or "stdout" in (last.line or ""))
