"""thatch.common.environment: one meaning for every location and default."""

from __future__ import annotations

import ast
import os
import pwd
import sys
from pathlib import Path

import pytest

import thatch.common.environment
from thatch.common.environment import (
    HOSTS,
    cache_home,
    config_home,
    default_db_path,
    default_socket_path,
    embedder_log_file,
    env_get,
    expand_user,
    home,
    host_from_env,
    models_dir,
    project_dir_from_env,
    queue_dir,
    runtime_dir,
    snapshot_dir,
    socket_dir,
)
from thatch.frontend.hooks import hookio

H = {"HOME": "/h"}


def test_empty_counts_as_unset() -> None:
    assert env_get({"X": ""}, "X") is None
    assert env_get({}, "X") is None
    assert env_get({"X": "v"}, "X") == "v"
    empty = {
        "HOME": "/h",
        "XDG_CONFIG_HOME": "",
        "XDG_CACHE_HOME": "",
        "XDG_RUNTIME_DIR": "",
        "THATCH_DB_PATH": "",
        "THATCH_QUEUE_DIR": "",
        "THATCH_PROJECT_DIR": "",
        "THATCH_HOST": "",
    }
    assert default_db_path(empty) == default_db_path(H)
    assert queue_dir(empty) == queue_dir(H)
    assert socket_dir(empty) == socket_dir(H)
    assert project_dir_from_env(empty) is None
    assert host_from_env(empty) is None


def test_home_is_the_mappings_home_else_the_processes() -> None:
    assert home(H) == Path("/h")
    assert home({}) == Path.home()
    assert home({"HOME": ""}) == Path.home()


def test_tilde_expands_against_the_mappings_home_not_the_processes() -> None:
    """The environment passed in decides, even when it differs from os.environ."""
    assert os.environ.get("HOME") != "/h"
    assert expand_user("~", H) == Path("/h")
    assert expand_user("~/a/b", H) == Path("/h/a/b")
    assert expand_user("~//a", H) == Path("/h/a")
    assert expand_user("/abs/~/x", H) == Path("/abs/~/x")
    assert expand_user("rel/x", H) == Path("rel/x")
    assert expand_user("~/x", {}) == Path.home() / "x"
    # ~name is that user's home from the password database; HOME plays no part.
    root = pwd.getpwuid(0)
    assert expand_user(f"~{root.pw_name}/x", H) == Path(root.pw_dir) / "x"
    # Every path variable uses the same expansion.
    tilde = {"HOME": "/h", "THATCH_DB_PATH": "~/d.db", "THATCH_QUEUE_DIR": "~/q"}
    assert default_db_path(tilde) == Path("/h/d.db")
    assert queue_dir(tilde) == Path("/h/q")
    assert cache_home({"HOME": "/h", "XDG_CACHE_HOME": "~/c"}) == Path("/h/c")
    assert socket_dir({"HOME": "/h", "XDG_RUNTIME_DIR": "~/r"}) == Path("/h/r/thatch")


def test_xdg_directories_and_their_defaults() -> None:
    assert config_home(H) == Path("/h/.config")
    assert cache_home(H) == Path("/h/.cache")
    assert runtime_dir(H) is None
    xdg = {
        "HOME": "/h",
        "XDG_CONFIG_HOME": "/x/config",
        "XDG_CACHE_HOME": "/x/cache",
        "XDG_RUNTIME_DIR": "/run/user/7",
    }
    assert config_home(xdg) == Path("/x/config")
    assert cache_home(xdg) == Path("/x/cache")
    assert runtime_dir(xdg) == Path("/run/user/7")


def test_thatchs_files() -> None:
    assert default_db_path(H) == Path("/h/.config/thatch/thatch.db")
    assert default_db_path({**H, "XDG_CONFIG_HOME": "/c"}) == Path("/c/thatch/thatch.db")
    assert default_db_path({**H, "THATCH_DB_PATH": "/x/y.db"}) == Path("/x/y.db")
    assert queue_dir(H) == Path("/h/.cache/thatch/queue")
    assert queue_dir({**H, "THATCH_QUEUE_DIR": "/q"}) == Path("/q")
    assert snapshot_dir(H) == Path("/h/.cache/thatch/vectors")
    assert models_dir(H) == Path("/h/.cache/thatch/models")
    assert embedder_log_file(H) == Path("/h/.cache/thatch/embedder.log")
    assert socket_dir(H) == Path("/h/.cache/thatch")
    assert default_socket_path(H) == Path("/h/.cache/thatch/embedder.sock")
    runtime = {**H, "XDG_RUNTIME_DIR": "/run/u"}
    assert default_socket_path(runtime) == Path("/run/u/thatch/embedder.sock")


def test_project_dir_order() -> None:
    env = {"HOME": "/h", "CLAUDE_PROJECT_DIR": "/c"}
    assert project_dir_from_env(env) == Path("/c")
    env["CURSOR_PROJECT_DIR"] = "/u"
    assert project_dir_from_env(env) == Path("/u")
    env["THATCH_PROJECT_DIR"] = "${workspaceFolder}"  # a host's unexpanded placeholder
    assert project_dir_from_env(env) == Path("/u")
    env["THATCH_PROJECT_DIR"] = "~/p"
    assert project_dir_from_env(env) == Path("/h/p")
    assert project_dir_from_env(H) is None


@pytest.mark.parametrize(
    ("env", "host"),
    [
        ({}, None),
        ({"THATCH_HOST": " Cursor "}, "cursor"),
        ({"THATCH_HOST": "opencode", "CURSOR_PROJECT_DIR": "/u"}, "opencode"),
        ({"THATCH_HOST": "vim", "CLAUDE_PROJECT_DIR": "/c"}, "claude"),
        ({"CURSOR_PROJECT_DIR": "/u", "CLAUDE_PROJECT_DIR": "/c"}, "cursor"),
        ({"CLAUDE_PROJECT_DIR": "/c"}, "claude"),
        ({"THATCH_HOST": "vim"}, None),
    ],
)
def test_host_from_env_is_none_when_unknown(env: dict[str, str], host: str | None) -> None:
    assert host_from_env(env) == host


def test_hooks_name_their_own_fallback(capsys: pytest.CaptureFixture[str]) -> None:
    """A hook always has a host: the environment's, else HOOK_FALLBACK_HOST, with a warning
    for a value that names none."""
    assert hookio.HOOK_FALLBACK_HOST == "claude" and hookio.HOSTS == HOSTS
    assert hookio.resolve_host(None, {}) == "claude"
    assert hookio.resolve_host("opencode", {"THATCH_HOST": "cursor"}) == "opencode"
    assert hookio.resolve_host(None, {"CURSOR_PROJECT_DIR": "/u"}) == "cursor"
    assert capsys.readouterr().err == ""
    assert hookio.resolve_host("vim", {"THATCH_HOST": "nano"}, "reminder") == "claude"
    assert capsys.readouterr().err == (
        '[thatch reminder] ignoring --host "vim": expected claude, cursor or opencode\n'
        '[thatch reminder] ignoring THATCH_HOST "nano": expected claude, cursor or opencode\n'
    )


def test_module_is_stdlib_only() -> None:
    """The tool hooks import it on every call: nothing beyond the standard library."""
    tree = ast.parse(Path(thatch.common.environment.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - {"__future__"} <= sys.stdlib_module_names
