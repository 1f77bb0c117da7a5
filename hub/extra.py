"""Whether the ``team`` extra (psycopg and its pool) is installed, asked without loading it:
``thatch hub`` commands say how to install it instead of failing on an ImportError."""

from __future__ import annotations

import importlib.util

from thatch.common.pip_line import pip_install, thatch_requirement

__all__ = ["INSTALL_TEAM", "missing_team_extra"]

INSTALL_TEAM = pip_install(*thatch_requirement("team"))


def missing_team_extra() -> list[str]:
    """The team extra's packages that cannot be imported here."""
    return [name for name in ("psycopg", "psycopg_pool") if importlib.util.find_spec(name) is None]
