"""``thatch-embedder probe``: a grpc.health.v1 check for container health checks."""

from __future__ import annotations

import click

__all__ = ["probe"]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--addr",
    envvar="THATCH_EMBEDDER_ADDR",
    required=True,
    help="Embedder address: unix:///path, host:port or dns:///host:port.",
)
@click.option("--timeout", type=click.FloatRange(0.05, 60), default=2.0, show_default=True)
def probe(addr: str, timeout: float) -> None:
    """Exit 0 when the embedder at ADDR reports SERVING, else print why and exit 1.

    For container and orchestrator health checks; it never starts anything.
    """
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import ThatchEmbedderError

    try:
        with EmbedderClient(addr, autostart=False) as client:
            status = client.health(timeout=timeout)
            problem = client.connection_problem() if status == "UNREACHABLE" else None
    except ThatchEmbedderError as error:
        raise click.ClickException(str(error)) from None
    if problem is not None:  # a TLS mismatch, named
        raise click.ClickException(f"embedder at {addr} is {status}: {problem}")
    if status != "SERVING":
        raise click.ClickException(f"embedder at {addr} is {status}")
    click.echo("SERVING")
