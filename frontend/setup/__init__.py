"""``thatch setup``: wire thatch into Claude Code, Cursor and opencode (docs/hooks.md §setup).

Modules: ``hosts`` (paths per host and scope, ``<bin>``), ``jsonfiles`` (lossless JSON
edits), ``block`` (instruction block), ``instructions`` (its text), ``hooks`` (hook
entries), ``permissions`` (Claude's tool permission rule), ``declined`` (did the user
decline thatch's server; read by the hook paths), ``skills``, ``opencode_plugin``, ``git_hooks``
(``--git-hooks``), ``installed`` (what the setup files hold), ``choices`` (the Claude Code
choices a rerun keeps), ``check`` (the setup check and doctor's verdict) and ``run``
(orchestration and output).

The names below load on first use: the hook paths import ``thatch.frontend.setup.declined``
on every prompt, and importing a submodule runs this file first.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from thatch.common.environment import HOSTS
    from thatch.frontend.setup.hosts import HOST_NAMES, resolve_bin
    from thatch.frontend.setup.run import Line, SetupRequest, SetupResult, run_setup

__all__ = ["HOSTS", "HOST_NAMES", "Line", "SetupRequest", "SetupResult", "resolve_bin", "run_setup"]

_HOMES = {
    "HOSTS": "thatch.common.environment",
    "HOST_NAMES": "thatch.frontend.setup.hosts",
    "resolve_bin": "thatch.frontend.setup.hosts",
    "Line": "thatch.frontend.setup.run",
    "SetupRequest": "thatch.frontend.setup.run",
    "SetupResult": "thatch.frontend.setup.run",
    "run_setup": "thatch.frontend.setup.run",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(home), name)
