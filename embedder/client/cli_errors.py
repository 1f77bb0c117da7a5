"""The embedder's errors at a command line's edge: one line for people, exit 1.

``thatch-embedder serve`` runs without the frontend and the ``thatch`` CLI, so the part of
the translation that concerns the embedder lives here; ``thatch.cli.errors`` adds the
store's errors on top of it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import click

__all__ = ["FixableError", "debug_traceback", "translate_embedder_errors"]


class FixableError(click.ClickException):
    """``Error: <message>`` plus a ``Fix: <action>`` line, exit 1."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix

    def show(self, file: object = None) -> None:
        click.echo(f"Error: {_one_line(self.format_message())}", err=True)
        if self.fix:
            click.echo(f"Fix: {_one_line(self.fix)}", err=True)


def _one_line(text: str) -> str:
    """An error's words as one line: a message may quote data its raiser left as it was
    (an address from the environment, a model id an embedder gave), which must not start a
    line of its own nor send a terminal escape. Only its control characters are escaped:
    other text (non-ASCII spaces, quotes, backslashes) is shown as it is."""
    from thatch.common.control_chars import escape_controls

    return escape_controls(text)


def debug_traceback() -> None:
    """The traceback on stderr when ``THATCH_DEBUG=1``; people see only the one line."""
    if os.environ.get("THATCH_DEBUG") == "1":
        traceback.print_exc(file=sys.stderr)


@contextmanager
def translate_embedder_errors() -> Iterator[None]:
    """Turn the embedder's exceptions into one-line CLI errors (exit 1)."""
    from thatch.embedder.client.errors import EmbedderUnavailable, ThatchEmbedderError

    try:
        yield
    except click.ClickException:
        raise
    except EmbedderUnavailable as error:
        debug_traceback()
        raise FixableError(f"embedding service unavailable: {error.cause}.", error.fix) from None
    except ThatchEmbedderError as error:
        debug_traceback()
        raise FixableError(str(error), getattr(error, "fix", None)) from None
