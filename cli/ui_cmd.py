"""``thatch ui``: the local web page over the shared database (docs/ui.md)."""

from __future__ import annotations

import os

import click

from thatch.cli.errors import FixableError, translate_errors
from thatch.cli.main import CONTEXT_SETTINGS

__all__ = ["ui"]

UI_START_WAIT = 120.0


@click.command("ui", context_settings=CONTEXT_SETTINGS)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=7788,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
@click.option(
    "--token",
    help="The access token (default: a new random one each run); required with a "
    "non-loopback --host.",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Browse the database the last `thatch demo` left, not yours.",
)
def ui(host: str, port: int, no_browser: bool, token: str | None, demo: bool) -> None:
    """Browse and tend the memories, duplicates, engines and chat in a web page.

    Serves until Ctrl-C. The page needs the token in the printed URL (then a cookie);
    it answers only to this machine unless --host says otherwise. With --demo it opens
    the database the last `thatch demo` left in thatch's cache instead of yours.
    """
    from thatch.frontend.ui.security import is_loopback

    if token is not None and len(token) < 16:
        raise click.UsageError("--token must be at least 16 characters.")
    if not is_loopback(host):
        if token is None:
            raise click.UsageError(
                f"--host {host} is reachable from other machines: pass --token with a "
                "secret of your own (16+ characters), or leave --host at 127.0.0.1."
            )
        click.echo(
            f"warning: serving on {host}: anyone who can reach this address and has the "
            "token can read and delete memories; the page is plain HTTP (no TLS).",
            err=True,
        )
    env = dict(os.environ)
    banner = None
    if demo:
        from thatch.common.environment import demo_db_path

        database = demo_db_path(env)
        if not database.is_file():
            raise FixableError(
                f"no demo database at {database}",
                "run thatch demo first; it leaves its memories there",
            )
        env["THATCH_DB_PATH"] = str(database)
        click.echo(f"thatch ui: showing the demo's database {database}", err=True)
        banner = (
            f"This is the database thatch demo left ({database}), not yours: what you "
            "change here stays in it, and the next thatch demo replaces it."
        )
    with translate_errors():
        _run(host, port, no_browser, token, env, banner)


def _run(
    host: str,
    port: int,
    no_browser: bool,
    token: str | None,
    env: dict[str, str],
    banner: str | None,
) -> None:
    import errno
    import socket
    import threading
    import webbrowser

    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.duplicate_check import DuplicateChecker
    from thatch.frontend.ui.app import build_app
    from thatch.frontend.ui.security import Guard
    from thatch.frontend.ui.server import bind, bound_port, make_server, page_url, serve

    try:
        sock = bind(host, port)
    except socket.gaierror as error:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {error.strerror or error}.\n"
            "Fix: give --host a local address (127.0.0.1, ::1, 0.0.0.0) or a name of "
            "this machine."
        ) from None
    except OSError as error:
        if error.errno == errno.EADDRNOTAVAIL:
            raise click.ClickException(
                f"cannot listen on {host}:{port}: {error.strerror or error}.\n"
                "Fix: give --host an address of this machine (127.0.0.1 is the default)."
            ) from None
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {error.strerror or error}.\n"
            "Fix: pick another port with --port (0: any free port)."
        ) from None
    with sock, ToolContext.from_env(env, start_wait=UI_START_WAIT) as ctx:
        guard = Guard.for_bind(host, bound_port(sock), token)
        address = page_url(host, guard)
        click.echo(f"thatch ui: {address}")
        click.echo("Press Ctrl-C to stop.", err=True)
        if not no_browser:
            webbrowser.open(address)
        # Duplicate candidates for memories no write compared (an upgraded database).
        checker = DuplicateChecker(ctx.store).start()
        try:
            stopping = threading.Event()
            serve(make_server(build_app(ctx, guard, stopping, banner), stopping), sock)
        except KeyboardInterrupt:  # uvicorn stops cleanly first, then re-raises Ctrl-C
            click.echo("thatch ui stopped.", err=True)
        finally:
            checker.close()
