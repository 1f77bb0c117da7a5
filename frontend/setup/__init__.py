"""``thatch setup``: wire thatch into Claude Code, Cursor and opencode (docs/hooks.md §setup).

Modules: ``hosts`` (paths per host and scope, ``<bin>``), ``jsonfiles`` (lossless JSON
edits), ``block`` (instruction block), ``instructions`` (its text), ``hooks`` (hook
entries), ``skills``, ``opencode_plugin`` and ``run`` (orchestration and output).
"""

from thatch.common.environment import HOSTS
from thatch.frontend.setup.hosts import HOST_NAMES, resolve_bin
from thatch.frontend.setup.run import Line, SetupRequest, SetupResult, run_setup

__all__ = ["HOSTS", "HOST_NAMES", "Line", "SetupRequest", "SetupResult", "resolve_bin", "run_setup"]
