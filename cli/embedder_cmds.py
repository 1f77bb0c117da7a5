"""``thatch embedder serve|start|stop|status`` (docs/cli.md §embedder-and-models).

A thin adapter: ``start`` is ``EmbedderClient.ensure_started`` with the CLI's budget,
``status`` reads health and ``Info``, ``stop`` signals the pid from the pid file.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import click

from thatch.cli.errors import FixableError, translate_errors
from thatch.cli.groups import SuggestingGroup
from thatch.cli.store_access import emit_json
from thatch.common.environment import embedder_log_file
from thatch.embedder.client.autostart import POLL_SECONDS, probe_socket
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.errors import (
    FIX_REMOTE,
    FIX_STARTING,
    EmbedderUnavailable,
    EmbedderUntrusted,
)
from thatch.embedder.client.settings import Address, configured_address
from thatch.embedder.server.instance import looks_like_embedder, process_alive, running_pid
from thatch.embedder.server.serve_cmd import serve
from thatch.embedder.v1 import embedder_pb2
from thatch.frontend.untrusted import inline

__all__ = ["embedder"]


@click.group(cls=SuggestingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def embedder() -> None:
    """Run, start, stop and inspect the shared embedding service."""


embedder.add_command(serve)


def _local_address(env: Mapping[str, str], command: str) -> Address:
    address = configured_address(env)
    if not address.is_unix:
        raise FixableError(
            f"thatch embedder {command} manages a local unix-socket embedder only; "
            f"{inline(str(address))} is remote."
        )
    return address


def _starting_notice() -> None:
    click.echo("Starting embedder…", err=True)


@embedder.command()
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the embedder to serve.",
)
def start(wait: float) -> None:
    """Start a detached embedder on the local socket and wait until it serves."""
    env = dict(os.environ)
    with translate_errors():
        address = _local_address(env, "start")
        shown = inline(str(address))  # the environment's: data
        with EmbedderClient(address.target, env=env, notice=_starting_notice) as client:
            assert address.path is not None
            already = probe_socket(address.path) in ("listening", "busy")
            try:
                client.ensure_started(wait=wait)
            except EmbedderUntrusted:
                raise  # nothing was started, so the log has nothing to add
            except EmbedderUnavailable as error:
                log = embedder_log_file(env)
                if error.fix == FIX_STARTING:
                    message = f"the embedder did not start serving within {wait:g} s; log: {log}"
                else:
                    message = f"{error.cause}; log: {log}"
                raise FixableError(message, error.fix) from None
            if wait <= 0 and client.health() != "SERVING":
                click.echo(f"embedder starting at {shown}; see thatch embedder status")
                return
            info = client.info()
        verb = "already running" if already else "serving"
        click.echo(f"embedder {verb} at {shown} (pid {info.pid}, model {inline(info.model_id)})")


@embedder.command()
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the embedder to exit.",
)
def stop(timeout: float) -> None:
    """Stop the local embedder (SIGTERM) and wait for it to exit."""
    env = dict(os.environ)
    with translate_errors():
        address = _local_address(env, "stop")
        assert address.path is not None
        # From the pid file or the instance lock: found even when its socket was deleted.
        pid = running_pid(address.path)
        if pid is None:  # a server of an earlier release holds no lock: ask it
            with EmbedderClient(address.target, env=env, autostart=False) as client:
                try:
                    pid = client.info(timeout=2.0).pid or None
                except EmbedderUnavailable:
                    pid = None
        # running_pid checked what it found. A pid the server gave itself is of its pid
        # namespace, which need not be this one (a container sharing the socket): here it
        # must be a thatch embedder server too.
        if pid is None or not process_alive(pid) or not looks_like_embedder(pid):
            click.echo("embedder not running")
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            click.echo("embedder not running")
            return
        deadline = time.monotonic() + timeout
        while process_alive(pid):
            if time.monotonic() >= deadline:
                raise FixableError(
                    f"the embedder (pid {pid}) did not exit within {timeout:g} s",
                    f"kill -KILL {pid}",
                )
            time.sleep(POLL_SECONDS)
        click.echo("embedder stopped")


@embedder.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def status(as_json: bool) -> None:
    """Show whether the embedder serves, and its model and runtime facts."""
    env = dict(os.environ)
    with translate_errors():
        address = configured_address(env)
        with EmbedderClient(address.target, env=env, autostart=False) as client:
            health = client.health(timeout=1.0)
            info = None
            if health != "UNREACHABLE":
                try:
                    info = client.info(timeout=2.0)
                except EmbedderUntrusted:
                    raise
                except EmbedderUnavailable:
                    info = None
        if info is None:
            if address.path is not None:
                _explain_silent_server(address.path)
            else:
                _explain_unreachable_remote(address)
            fix = "thatch embedder start" if address.is_unix else FIX_REMOTE
            raise FixableError(f"no embedder answering at {inline(str(address))}.", fix)
    facts = status_facts(str(address), health, info)
    if as_json:
        emit_json(facts)
        return
    for label, value in status_lines(facts):
        click.echo(f"{label + ':':<14} {value}")


def _explain_silent_server(path: Path) -> None:
    """A server that runs but does not answer (its socket deleted, say) is named, not hidden."""
    pid = running_pid(path)
    if pid is None:
        return
    fix = "thatch embedder stop && thatch embedder start"
    if not os.path.lexists(path):
        raise FixableError(
            f"the embedder (pid {pid}) is running but its socket {path} is missing.", fix
        )
    raise FixableError(f"the embedder (pid {pid}) is running but does not answer at {path}.", fix)


def _explain_unreachable_remote(address: Address) -> None:
    """A TLS mismatch (certificate not trusted, client certificate missing...) is named."""
    with EmbedderClient(address.target, autostart=False) as client:
        problem = client.connection_problem()
    if problem is not None:
        raise FixableError(f"{problem.cause}.", problem.fix)


def status_facts(address: str, health: str, info: embedder_pb2.InfoResponse) -> dict[str, object]:
    return {
        "address": address,
        "health": health,
        "pid": info.pid,
        "auto_started": info.auto_started,
        "model_id": info.model_id,
        "model_revision": info.model_revision,
        "dim": info.dim,
        "max_tokens": info.max_tokens,
        "pooling": info.pooling,
        "quantized": info.quantized,
        "loaded": info.loaded,
        "uptime_s": info.uptime_s,
        "requests_served": info.requests_served,
        "idle_release_seconds": info.idle_release_seconds,
        "exit_after_seconds": info.exit_after_seconds,
        "server_version": info.server_version,
    }


LABELS = {
    "address": "address",
    "health": "health",
    "pid": "pid",
    "auto_started": "auto-started",
    "model_id": "model",
    "model_revision": "revision",
    "dim": "dim",
    "max_tokens": "max tokens",
    "pooling": "pooling",
    "quantized": "quantized",
    "loaded": "loaded",
    "uptime_s": "uptime",
    "requests_served": "requests",
    "idle_release_seconds": "idle release",
    "exit_after_seconds": "exit after",
    "server_version": "version",
}
SECONDS = ("uptime_s", "idle_release_seconds", "exit_after_seconds")


def status_lines(facts: Mapping[str, object]) -> list[tuple[str, str]]:
    lines = []
    for key, label in LABELS.items():
        value = facts[key]
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif key in SECONDS:
            text = "never" if value == 0 and key != "uptime_s" else f"{value} s"
        else:
            # The address is the environment's, the model id, revision, pooling and version
            # the embedder's words: a remote one's are anyone's, and a local one's id is
            # its model directory's name. Data, so none can start a line of its own.
            text = inline(str(value)) if value != "" else "-"
        lines.append((label, text))
    return lines
