"""``thatch setup``: a thin click adapter over ``thatch.frontend.setup`` (docs/hooks.md §setup)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from thatch.cli.main import CONTEXT_SETTINGS
from thatch.common.version import thatch_version

__all__ = ["setup"]


@click.command("setup", context_settings=CONTEXT_SETTINGS)
@click.option("--claude", is_flag=True, help="Set up Claude Code.")
@click.option("--cursor", is_flag=True, help="Set up Cursor.")
@click.option("--opencode", is_flag=True, help="Set up opencode.")
@click.option("--local", "local", is_flag=True, help="Write into the project (default).")
@click.option("--global", "global_", is_flag=True, help="Write into your user configuration.")
@click.option(
    "--post-tool-use/--post-tool-batch",
    default=None,
    help="Claude Code: buffer tool calls on PostToolUse (for versions without "
    "PostToolBatch), or on PostToolBatch again. Default: as the hooks are (PostToolBatch "
    "on a first setup).",
)
@click.option(
    "--allow-tools/--no-allow-tools",
    default=None,
    help="Claude Code: add the permission rule mcp__thatch, or leave it out (recorded as "
    "permissions.ask: Claude asks before every thatch tool call). Default: as the "
    "settings record (the rule, unless --no-allow-tools was recorded).",
)
@click.option(
    "--engines/--no-engines",
    default=None,
    help="Switch the engines (predictions, behaviors) on or off for this project: the "
    "engine tool, its hook lines and instruction sections. Default: as the entry says.",
)
@click.option(
    "--chat/--no-chat",
    default=None,
    help="Switch chat on or off for this project: the chat tool and its hook lines. "
    "Default: as the entry says.",
)
@click.option(
    "--git-hooks",
    is_flag=True,
    help="Also write optional git hooks (post-checkout, post-merge, post-rewrite, "
    "reference-transaction) that tell thatch a ref moved or history was rewritten; a hook "
    "that is not thatch's is left alone.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show what would change; change nothing. Exits 1 in the same cases as the real "
    "run, so its status predicts the real run's.",
)
def setup(
    claude: bool,
    cursor: bool,
    opencode: bool,
    local: bool,
    global_: bool,
    post_tool_use: bool | None,
    allow_tools: bool | None,
    engines: bool | None,
    chat: bool | None,
    git_hooks: bool,
    dry_run: bool,
) -> None:
    """Install thatch's MCP server, hooks, instructions and skills for agent hosts.

    Rerunning is safe: files already up to date are left alone, and only thatch's own
    entries are replaced. Each host prints one line per file it touched. Exits 1 when
    something needs you (a file it could not update, a command printed for you to run),
    after writing the rest; --dry-run exits 1 in the same cases. A user-level Claude Code
    server you keep running thatch through uvx is printed with the command that replaces
    it, and setup exits 1, on every --global run.
    """
    from thatch.common.environment import project_dir_from_env
    from thatch.frontend.setup import SetupRequest, resolve_bin, run_setup

    hosts = [
        name
        for name, chosen in (("claude", claude), ("cursor", cursor), ("opencode", opencode))
        if chosen
    ]
    if git_hooks:
        write_git_hooks(dry_run)
        if not hosts:
            return
    if not hosts:
        raise click.UsageError("choose at least one host: --claude, --cursor, --opencode.")
    if local and global_:
        raise click.UsageError("--local and --global are mutually exclusive.")
    switches = {
        feature: on for feature, on in (("engines", engines), ("chat", chat)) if on is not None
    }
    if switches and global_ and claude:
        raise click.UsageError(
            "--engines/--chat switch a project: run them without --global for Claude Code."
        )
    env = dict(os.environ)
    request = SetupRequest(
        hosts=hosts,
        project_dir=project_dir_from_env(env) or Path.cwd(),
        env=env,
        bin_path=resolve_bin(sys.argv[0], env),
        version=thatch_version(),
        scope="global" if global_ else "local",
        post_tool_use=post_tool_use,
        allow_tools=allow_tools,
        switches=switches,
        dry_run=dry_run,
    )
    try:
        result = run_setup(request)
    except OSError as error:
        raise click.ClickException(f"setup could not write a file: {error}") from None
    if not dry_run:
        write_mcp_answers(env)  # the sheet of every feature on; a project's own comes later
    for line in result.stdout_lines():
        click.echo(line)
    for detail in result.details():
        click.echo(f"[thatch setup] {detail}", err=True)
    if not global_:
        note = subdirectory_note(request.project_dir)
        if note is not None:
            click.echo(f"[thatch setup] {note}", err=True)
    if result.exit_code:
        click.get_current_context().exit(result.exit_code)


def subdirectory_note(project_dir: Path) -> str | None:
    """A note when the project files went below a git checkout's top level: a host
    started at the top reads the files there, and these would go unseen."""
    from thatch.frontend.project import checkout_git_dir
    from thatch.frontend.untrusted import quoted

    here = Path(os.path.realpath(project_dir))  # "." or a symlink: where it really is
    found = checkout_git_dir(here)
    if found is None or found[0] == here:
        return None
    top = found[0]
    return (
        f"note: {quoted(str(here))} is inside the git checkout {quoted(str(top))}: "
        f"a host started there reads the files there, not these (run thatch setup in "
        f"{quoted(str(top))}, or start the host here)"
    )


def write_git_hooks(dry_run: bool) -> None:
    """``--git-hooks`` in the project's repository (docs/database.md §branch-lifecycle)."""
    from thatch.cli.errors import FixableError
    from thatch.common.environment import project_dir_from_env
    from thatch.frontend.setup.git_hooks import GitHooksError, install_git_hooks

    env = dict(os.environ)
    directory = project_dir_from_env(env) or Path.cwd()
    try:
        outcomes = install_git_hooks(directory, env, dry_run=dry_run)
    except GitHooksError as error:
        raise FixableError(f"--git-hooks: {error}", error.fix) from None
    except OSError as error:
        raise click.ClickException(f"setup could not write a git hook: {error}") from None
    for outcome in outcomes:
        click.echo(("(dry run) " if dry_run else "") + outcome.line())


def write_mcp_answers(env: dict[str, str]) -> None:
    """The answers ``thatch mcp`` gives while it loads (frontend/mcp/answer_sheet.py), so
    that the first host session after setup starts as fast as the next ones."""
    from thatch.frontend.mcp.answer_sheet import write_sheet
    from thatch.frontend.mcp.server import listing_server

    try:
        write_sheet(env, listing_server(env))
    except Exception as error:  # the first server writes them instead, a little later
        click.echo(f"[thatch setup] MCP quick-start answers not written: {error}", err=True)
