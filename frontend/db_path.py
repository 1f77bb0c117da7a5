"""Where the database lives (store.md §1), without importing sqlite3.

Hooks need the path before (or instead of) opening the database: the prompt hook keys
its warm recall socket on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DB_FILE_NAME = "thatch.db"


def default_db_path(env: Mapping[str, str] | None = None) -> Path:
    """``$THATCH_DB_PATH``, else ``$XDG_CONFIG_HOME/thatch/thatch.db`` (``~/.config``)."""
    env = os.environ if env is None else env
    explicit = env.get("THATCH_DB_PATH")
    if explicit:
        return Path(os.path.expanduser(explicit))
    config = env.get("XDG_CONFIG_HOME")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base = Path(os.path.expanduser(config)) if config else home / ".config"
    return base / "thatch" / DB_FILE_NAME
