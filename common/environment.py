"""Where thatch's files live and what the environment says, for every part of thatch.

The one place that reads HOME, the XDG base directories and thatch's own path variables,
so the embedder, the frontends, the hooks and setup agree on every location. The same
rules hold throughout:

- Every function takes the environment mapping explicitly (``os.environ`` or a test's
  dict); nothing is read at import and nothing is cached.
- A variable set to the empty string counts as unset.
- HOME is the mapping's ``HOME``, else ``Path.home()`` (the process's home).
- ``~`` and ``~/…`` expand against that same HOME, never the process's when the two
  differ; ``~name/…`` is the named user's home (the password database, as the shell does).

Standard library only, importing nothing from thatch: the tool hooks import this module
on every tool call, and the embedder server uses it without the frontend.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "HOSTS",
    "ConfigError",
    "Env",
    "Setting",
    "cache_home",
    "config_file",
    "config_home",
    "default_db_path",
    "default_socket_path",
    "demo_db_path",
    "embedder_log_file",
    "env_get",
    "expand_user",
    "home",
    "host_from_env",
    "host_from_project_vars",
    "known_host",
    "models_dir",
    "project_dir_from_env",
    "queue_dir",
    "read_config",
    "runtime_dir",
    "setting",
    "snapshot_dir",
    "socket_dir",
    "thatch_cache_dir",
    "write_config",
]

Env = Mapping[str, str]

HOSTS: tuple[str, ...] = ("claude", "cursor", "opencode")
DB_FILE_NAME = "thatch.db"
CONFIG_FILE_NAME = "config.json"
# The settings the config file may hold, each also a variable that wins over it.
CONFIG_KEYS = {"model": "THATCH_MODEL"}
EMBEDDER_SOCKET_NAME = "embedder.sock"
# Checked in this order; a THATCH_PROJECT_DIR still holding "${" is a host's unexpanded
# placeholder (Cursor's ${workspaceFolder}) and is skipped.
PROJECT_DIR_VARIABLES = ("THATCH_PROJECT_DIR", "CURSOR_PROJECT_DIR", "CLAUDE_PROJECT_DIR")


def env_get(env: Env, name: str) -> str | None:
    """The variable's value, or None when unset or empty (empty counts as unset)."""
    value = env.get(name)
    return value if value else None


# -- HOME and ~ ----------------------------------------------------------------------------


def home(env: Env) -> Path:
    """``$HOME`` of the mapping, else the process's home directory."""
    value = env_get(env, "HOME")
    return Path(value) if value else Path.home()


def expand_user(path: str, env: Env) -> Path:
    """``path`` with a leading ``~`` expanded against ``home(env)`` (see the module doc)."""
    if path == "~" or path.startswith("~/"):
        return home(env) / path[1:].lstrip("/")
    if path.startswith("~"):
        return Path(os.path.expanduser(path))  # ~name: that user's home, not HOME
    return Path(path)


def _dir_setting(env: Env, name: str, default: Path) -> Path:
    value = env_get(env, name)
    return expand_user(value, env) if value else default


# -- XDG base directories ------------------------------------------------------------------


def config_home(env: Env) -> Path:
    """``$XDG_CONFIG_HOME``, else ``~/.config``."""
    return _dir_setting(env, "XDG_CONFIG_HOME", home(env) / ".config")


def cache_home(env: Env) -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``."""
    return _dir_setting(env, "XDG_CACHE_HOME", home(env) / ".cache")


def runtime_dir(env: Env) -> Path | None:
    """``$XDG_RUNTIME_DIR``; None when unset (the XDG spec gives it no default)."""
    value = env_get(env, "XDG_RUNTIME_DIR")
    return expand_user(value, env) if value else None


# -- thatch's files ------------------------------------------------------------------------


def default_db_path(env: Env) -> Path:
    """``$THATCH_DB_PATH``, else ``$XDG_CONFIG_HOME/thatch/thatch.db``."""
    return _dir_setting(env, "THATCH_DB_PATH", config_home(env) / "thatch" / DB_FILE_NAME)


def config_file(env: Env) -> Path:
    """``$XDG_CONFIG_HOME/thatch/config.json``: settings persisted by ``thatch model use``."""
    return config_home(env) / "thatch" / CONFIG_FILE_NAME


def thatch_cache_dir(env: Env) -> Path:
    """``$XDG_CACHE_HOME/thatch``: models, the embedder's log, queue, vector snapshots."""
    return cache_home(env) / "thatch"


def demo_db_path(env: Env) -> Path:
    """Where ``thatch demo`` leaves its database for ``thatch ui --demo`` (replaced each run)."""
    return thatch_cache_dir(env) / "demo" / "thatch.db"


def queue_dir(env: Env) -> Path:
    """``$THATCH_QUEUE_DIR``, else ``$XDG_CACHE_HOME/thatch/queue``: the hooks' tool queue."""
    return _dir_setting(env, "THATCH_QUEUE_DIR", thatch_cache_dir(env) / "queue")


def snapshot_dir(env: Env) -> Path:
    """``$XDG_CACHE_HOME/thatch/vectors``: vector snapshots shared between processes."""
    return thatch_cache_dir(env) / "vectors"


def models_dir(env: Env) -> Path:
    """``$XDG_CACHE_HOME/thatch/models``: where ``thatch model import`` writes by default."""
    return thatch_cache_dir(env) / "models"


def embedder_log_file(env: Env) -> Path:
    """``$XDG_CACHE_HOME/thatch/embedder.log``: an auto-started embedder's log."""
    return thatch_cache_dir(env) / "embedder.log"


def socket_dir(env: Env) -> Path:
    """``$XDG_RUNTIME_DIR/thatch``, else ``$XDG_CACHE_HOME/thatch``: thatch's sockets."""
    runtime = runtime_dir(env)
    return runtime / "thatch" if runtime is not None else thatch_cache_dir(env)


def default_socket_path(env: Env) -> Path:
    """The embedder's socket when ``THATCH_EMBEDDER_ADDR`` names none."""
    return socket_dir(env) / EMBEDDER_SOCKET_NAME


# -- the agent's project and host ----------------------------------------------------------


def project_dir_from_env(env: Env) -> Path | None:
    """The project directory the environment names (``PROJECT_DIR_VARIABLES`` order), or
    None: each caller has its own next step (a hook's payload, the working directory)."""
    for name in PROJECT_DIR_VARIABLES:
        value = env_get(env, name)
        if value and not (name == "THATCH_PROJECT_DIR" and "${" in value):
            return expand_user(value, env)
    return None


def known_host(value: str | None) -> str | None:
    """``value`` as one of ``HOSTS`` (case and surrounding blanks ignored), else None."""
    host = (value or "").strip().lower()
    return host if host in HOSTS else None


def host_from_project_vars(env: Env) -> str | None:
    """cursor when ``CURSOR_PROJECT_DIR`` is set, else claude for ``CLAUDE_PROJECT_DIR``."""
    if env_get(env, "CURSOR_PROJECT_DIR"):
        return "cursor"
    if env_get(env, "CLAUDE_PROJECT_DIR"):
        return "claude"
    return None


def host_from_env(env: Env) -> str | None:
    """``THATCH_HOST`` when it names a host, else by project-dir variables; None: unknown."""
    return known_host(env.get("THATCH_HOST")) or host_from_project_vars(env)


# -- the config file -----------------------------------------------------------------------


class ConfigError(Exception):
    """The config file cannot be read or is malformed; ``str`` is one line for people."""


# A NamedTuple, not a dataclass: dataclasses imports inspect (~5 ms), and every hook
# imports this module.
class Setting(NamedTuple):
    """A setting's value (None: unset) and where it came from, for doctor to say."""

    value: str | None
    origin: str  # "THATCH_MODEL", "config file /path", or "default"


def read_config(env: Env) -> dict[str, str]:
    """The config file's settings; {} when it does not exist. ConfigError when unreadable,
    not a JSON object, or holding a known key whose value is not a string.

    One small file read with the standard library: hooks call this only on the paths that
    need the model.
    """
    path = config_file(env)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ConfigError(f"cannot read the config file {path}: {reason}") from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"the config file {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} is not a JSON object")
    settings: dict[str, str] = {}
    for key, value in data.items():
        if key not in CONFIG_KEYS:
            continue  # a newer thatch's setting: not ours to judge
        if not isinstance(value, str):
            raise ConfigError(f'the config file {path}: "{key}" must be a string')
        if value.strip():
            settings[key] = value.strip()
    return settings


def setting(env: Env, key: str) -> Setting:
    """A config key's value: its variable when set (non-empty), else the config file's."""
    variable = CONFIG_KEYS[key]
    value = env_get(env, variable)
    if value is not None:
        return Setting(value, variable)
    stored = read_config(env).get(key)
    if stored is not None:
        return Setting(stored, f"config file {config_file(env)}")
    return Setting(None, "default")


def write_config(env: Env, key: str, value: str | None) -> Path:
    """Set (or, with None, remove) one key of the config file, keeping the others; written
    whole to a temporary file and renamed, so a reader never sees half a file. ConfigError
    when the existing file cannot be read or is malformed: it is left as it is."""
    if key not in CONFIG_KEYS:
        raise ValueError(f"unknown config key {key}")
    path = config_file(env)
    data: dict[str, object] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ConfigError(f"cannot read the config file {path}: {reason}") from None
    if text.strip():
        try:
            loaded = json.loads(text)
        except ValueError as error:
            raise ConfigError(f"the config file {path} is not valid JSON: {error}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"the config file {path} is not a JSON object")
        data = loaded
    if value is None:
        data.pop(key, None)
    else:
        data[key] = value
    # A symlinked file (dotfiles managers keep the real one elsewhere) is written where it
    # points: renaming over the link would cut it off from its target.
    path = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:
        raise ConfigError(
            f"cannot write the config file {path}: {error.strerror or error}"
        ) from None
    return path
