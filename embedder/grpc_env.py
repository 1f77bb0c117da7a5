"""Imported by the frontends' gRPC client before grpc itself, for this one effect.

gRPC's C core logs to stderr (``Got goaway ...`` when an embedder restarts, handshake
failures), and a frontend's stderr is read by agents and their hosts. The core reads
``GRPC_VERBOSITY`` once, when grpc loads, so it is set here, before that import; a user's
own ``GRPC_VERBOSITY`` wins. The embedder itself does not import this module, and one a
frontend auto-starts does not inherit the setting: its log keeps the core's lines.
"""

from __future__ import annotations

import os

__all__ = ["QUIETED", "child_environment"]

# Set only the first time: ``QUIETED`` marks a value of ours, which an embedder this
# process starts must not inherit.
QUIETED = "THATCH_GRPC_QUIETED"
if "GRPC_VERBOSITY" not in os.environ:
    os.environ["GRPC_VERBOSITY"] = "NONE"
    os.environ[QUIETED] = "1"


def child_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the quiet setting this module made (the user's own value stays)."""
    if env.pop(QUIETED, None) is not None and env.get("GRPC_VERBOSITY") == "NONE":
        del env["GRPC_VERBOSITY"]
    return env
