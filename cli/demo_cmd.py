"""``thatch demo [--model M] [--keep]``: thatch end to end in a scratch directory (docs/cli.md
§demo)."""

from __future__ import annotations

import os

import click

from thatch.cli.errors import FixableError, debug_traceback
from thatch.cli.main import CONTEXT_SETTINGS

__all__ = ["demo"]


@click.command("demo", context_settings=CONTEXT_SETTINGS)
@click.option(
    "--model",
    metavar="M",
    help="Model for the demo: short name, hub id, directory or mock "
    "(default: THATCH_MODEL when available, else the packaged offline model).",
)
@click.option("--keep", is_flag=True, help="Keep the scratch directory and print its path.")
def demo(model: str | None, keep: bool) -> None:
    """Save and recall memories in a throwaway setup, without touching your data.

    Starts an embedder on a socket in a temporary directory with its own database and
    queue, saves three memories in store "demo", recalls two questions by meaning, stops
    the embedder and deletes the directory (unless --keep).
    """
    from thatch.cli.demo_model import choose_model
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.frontend.demo import DemoFailed, run_demo
    from thatch.frontend.errors import StoreError

    try:
        run_demo(
            model=model,
            keep=keep,
            env=dict(os.environ),
            out=click.echo,
            log=lambda line: click.echo(f"   {line}", err=True),
            choose_model=choose_model,
        )
    except DemoFailed as error:
        debug_traceback()
        raise FixableError(str(error), error.fix) from None
    except (ThatchEmbedderError, StoreError, OSError) as error:
        debug_traceback()
        raise FixableError(f"the demo failed: {error}", "rerun with THATCH_DEBUG=1") from None
