"""``thatch-embedder`` (also ``python -m thatch.embedder``): the embedding service."""

from __future__ import annotations

import click

from thatch.embedder.client.probe_cmd import probe
from thatch.embedder.server.serve_cmd import serve


@click.group(name="thatch-embedder", context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """thatch's shared embedding service: one process owns the model, frontends call it."""


main.add_command(serve)
main.add_command(probe)

if __name__ == "__main__":
    main(prog_name="thatch-embedder")
