"""Imported by the frontends' gRPC client before grpc itself, for this one effect.

gRPC's C core logs to stderr (``Got goaway ...`` when an embedder restarts, handshake
failures), and a frontend's stderr is read by agents and their hosts. The core reads
``GRPC_VERBOSITY`` once, when grpc loads, so it is set here, before that import; a user's
own ``GRPC_VERBOSITY`` wins. The embedder itself does not import this module: its log
keeps the core's lines.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
