"""``serve``: run the embedder in the foreground (docs/cli.md §embedder-and-models, docs/embedder.md
§lifecycle).

Shared by ``thatch-embedder serve`` and ``thatch embedder serve``. The command only reads
options and the environment, sets up logging and calls ``thatch.embedder.server.grpc_server.serve``.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from thatch.common.control_chars import escape_controls
from thatch.common.environment import env_get
from thatch.common.shell_words import shell_quote
from thatch.embedder.client.autostart import FIX_RECORD, STOP_RECORD
from thatch.embedder.client.cli_errors import translate_embedder_errors
from thatch.embedder.client.errors import ModelError, ThatchEmbedderError
from thatch.embedder.client.extra import install_line, missing
from thatch.embedder.client.settings import (
    DEFAULT_IDLE_SECONDS,
    configured_model,
    int_setting,
)

__all__ = ["serve", "setup_logging"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(message)s"
LOG_MAX_BYTES = 5 * 1024 * 1024
# Which other model to choose is the user's call: the prose names the placeholder ID.
MODEL_FIX = (
    "see how the model resolves: thatch model info {model}; or choose another model by its "
    "id, ID (or set THATCH_MODEL to it): thatch model use ID"
)
# THATCH_MODEL chose the model: thatch model use would change nothing while it is set.
OVERRIDE_FIX = (
    "see how the model resolves: thatch model info {model}; THATCH_MODEL is set in this "
    "environment and wins over the saved model: unset THATCH_MODEL; or set it to another "
    "model id, ID: export THATCH_MODEL=ID"
)
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def setup_logging(log_file: Path | None, level: str) -> tuple[logging.Logger, logging.Handler]:
    """The embedder's logger writing to ``log_file`` (rotated) or stderr, never stdout."""
    handler: logging.Handler
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=LOG_MAX_BYTES, backupCount=1, encoding="utf-8"
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(LOG_FORMAT))
    logger = logging.getLogger("thatch.embedder")
    logger.setLevel(LEVELS[level])
    logger.propagate = False
    logger.addHandler(handler)
    return logger, handler


class _OneLineFormatter(logging.Formatter):
    """One log line a record: a message names a model and an address, which come from
    the environment and a model directory's name (its id is ``local:<name>``), and a line
    break or an escape sequence in them must not write a line of the log's own. A
    traceback after a record (an exception's text is anyone's words too) has each of its
    lines indented by two spaces, so none of them starts as a record does."""

    def format(self, record: logging.LogRecord) -> str:
        # Another handler that formatted the record first left its traceback text on it
        # (``exc_text``, not indented), which logging would reuse as is.
        if not record.exc_info:
            return super().format(record)  # its exc_text, if any, is all it has
        cached, record.exc_text = record.exc_text, None
        try:
            return super().format(record)
        finally:
            record.exc_text = cached

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    """Each line of ``text`` indented by two spaces, its control characters escaped (a
    carriage return or a line separator inside it starts no line either)."""
    return "\n".join(f"  {escape_controls(line)}" for line in text.split("\n"))


@contextmanager
def _stop_logged(logger: logging.Logger | None, fix_mark: str | None) -> Iterator[None]:
    """Log an error that stops the server, and its fix: under ``fix_mark`` (auto-start's)
    as records the frontend that started it finds (``STOP_RECORD``, ``FIX_RECORD``), so
    text other code writes to stderr later is never taken for either."""
    try:
        yield
    except ThatchEmbedderError as error:
        if logger is not None:
            fix = getattr(error, "fix", None)
            if fix_mark:
                logger.error("%s%s", STOP_RECORD.format(mark=fix_mark), error)
                if fix:
                    logger.error("%s%s", FIX_RECORD.format(mark=fix_mark), fix)
            else:
                logger.error("%s", error)
        raise


F = TypeVar("F", bound=Callable[..., Any])


def _file_option(name: str, help_text: str) -> Callable[[F], F]:
    return click.option(
        name,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        metavar="FILE",
        help=help_text,
    )


@click.command("serve")
@click.option(
    "--listen",
    metavar="ADDR",
    help="unix:///path, host:port or :port (127.0.0.1). "
    "Default: THATCH_EMBEDDER_ADDR if unix, else the default socket.",
)
@click.option(
    "--model", metavar="M", help="Model: short name, hub id or directory [env THATCH_MODEL]."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    help="onnxruntime intra-op threads (default: CPUs, ≤8).",
)
@click.option(
    "--idle-seconds",
    type=click.IntRange(min=0),
    help="Release the model after N s without Embed; 0 never "
    f"[env THATCH_EMBEDDER_IDLE_SECONDS, default {DEFAULT_IDLE_SECONDS}].",
)
@click.option(
    "--exit-after",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Exit after N s without Embed or Info calls; 0 never.",
)
@_file_option("--tls-cert", "Serve TLS with this certificate (PEM); needs --tls-key.")
@_file_option("--tls-key", "Private key (PEM) of --tls-cert.")
@_file_option("--tls-client-ca", "Require client certificates signed by this CA (PEM).")
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Log here (rotated at 5 MB, one backup) instead of stderr.",
)
@click.option(
    "--log-level",
    type=click.Choice(list(LEVELS)),
    default="info",
    show_default=True,
    help="debug also logs every request.",
)
@click.option("--auto-started", is_flag=True, hidden=True)
@click.option("--fix-mark", metavar="MARK", hidden=True)
def serve(
    listen: str | None,
    model: str | None,
    threads: int | None,
    idle_seconds: int | None,
    exit_after: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    log_file: Path | None,
    log_level: str,
    auto_started: bool,
    fix_mark: str | None,
) -> None:
    """Run the embedding service in the foreground until SIGTERM or Ctrl-C."""
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key must be given together")
    if tls_client_ca is not None and tls_cert is None:
        raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key")
    from thatch.embedder.server import grpc_server as server

    env = dict(os.environ)
    tls = None
    if tls_cert is not None and tls_key is not None:
        tls = server.TlsFiles(tls_cert, tls_key, tls_client_ca)
    # THATCH_MODEL chose the model only without --model, which wins over it.
    overridden = model is None and env_get(env, "THATCH_MODEL") is not None
    try:
        logger, handler = setup_logging(log_file, log_level)
    except OSError as error:  # one line, as every other reason not to start
        raise click.ClickException(
            f"cannot write the log file {escape_controls(str(log_file))}: {error.strerror or error}"
        ) from None
    try:
        # A malformed config file, a missing extra, a model that cannot load: one line,
        # no traceback; the log (when there is one) says why it stopped, and its fix.
        with translate_embedder_errors(), _stop_logged(logger if log_file else None, fix_mark):
            chosen = model or configured_model(env)
            absent = missing() if chosen != "mock" else []
            if absent:  # a frontend-only install: say so, not an ImportError from deep inside
                raise ModelError(
                    f"the embedder extra is not installed ({', '.join(absent)} missing)",
                    fix=install_line(),
                )
            options = server.ServeOptions(
                model=chosen,
                model_by_variable=overridden,
                listen=listen,
                threads=threads,
                idle_seconds=(
                    idle_seconds
                    if idle_seconds is not None
                    else int_setting(env, "THATCH_EMBEDDER_IDLE_SECONDS", DEFAULT_IDLE_SECONDS)
                ),
                exit_after=exit_after,
                tls=tls,
                auto_started=auto_started,
            )
            try:
                status = server.serve(options, env=env, logger=logger)
            except ModelError as error:
                if not error.fix:  # never "start the embedder" again: it would fail the same way
                    template = OVERRIDE_FIX if overridden else MODEL_FIX
                    error.fix = template.format(model=shell_quote(options.model))
                raise
    finally:
        logger.removeHandler(handler)
        handler.close()
    sys.exit(status)
