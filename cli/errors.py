"""Translate library errors into click errors at the CLI's edge."""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

T = TypeVar("T")


class FixableError(click.ClickException):
    """``Error: <message>`` plus a ``Fix: <action>`` line, exit 1."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix

    def show(self, file: object = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)
        if self.fix:
            click.echo(f"Fix: {self.fix}", err=True)


@contextmanager
def translate_errors() -> Iterator[None]:
    """Turn thatch's own exceptions into one-line CLI errors (exit 1)."""
    from thatch.embedder.errors import EmbedderUnavailable, ThatchEmbedderError
    from thatch.frontend.errors import StoreError

    try:
        yield
    except click.ClickException:
        raise
    except sqlite3.Error as error:  # one the store layer did not name: name it here
        debug_traceback()
        from thatch.frontend.store.db import default_db_path, store_error

        raise FixableError(str(store_error(error, default_db_path(os.environ)))) from None
    except StoreError as error:
        debug_traceback()
        raise FixableError(str(error)) from None
    except EmbedderUnavailable as error:
        debug_traceback()
        raise FixableError(f"embedding service unavailable: {error.cause}.", error.fix) from None
    except ThatchEmbedderError as error:
        debug_traceback()
        raise FixableError(str(error)) from None


def debug_traceback() -> None:
    if os.environ.get("THATCH_DEBUG") == "1":
        traceback.print_exc(file=sys.stderr)


def run_translated(func: Callable[[], T]) -> T:
    with translate_errors():
        return func()
