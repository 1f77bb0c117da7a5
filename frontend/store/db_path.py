"""Where the database and thatch's cache files live (store.md §1), without importing sqlite3.

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


def thatch_cache_dir(env: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/thatch`` (``~/.cache/thatch`` when unset or empty)."""
    cache = env.get("XDG_CACHE_HOME")
    if cache:
        base = Path(os.path.expanduser(cache))
    else:
        home = env.get("HOME")
        base = (Path(home) if home else Path.home()) / ".cache"
    return base / "thatch"
