"""thatch's own version, for ``--version``, ``doctor``, ``setup`` and the MCP handshake."""

from __future__ import annotations

__all__ = ["thatch_version"]


def thatch_version() -> str:
    """The installed distribution's version; ``0.0.0`` in a source tree without install."""
    # Imported here: importlib.metadata costs ~25 ms, and tool hooks run on every call.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("thatch")
    except PackageNotFoundError:
        return "0.0.0"
