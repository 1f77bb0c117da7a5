"""Member tokens for hubs, kept out of the database: one 0600 file per (hub, team) under
``$XDG_CONFIG_HOME/thatch/team-tokens`` (a 0700 directory). A database is copied, backed
up and attached to bug reports; a token must travel with none of them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from thatch.common.environment import config_home
from thatch.common.shell_words import shell_quote

__all__ = [
    "TOKEN_ENV",
    "TokenMissing",
    "read_token",
    "rejoin_fix",
    "token_dir",
    "token_path",
    "write_token",
]

TOKEN_ENV = "THATCH_HUB_TOKEN"


class TokenMissing(Exception):
    """No token file for a link (or one that cannot be read); ``rejoin_fix`` gives one."""


def rejoin_fix(hub_url: str, store: str) -> str:
    """Join ``store`` through ``hub_url`` again with the token in the variable: a join
    replaces the token of its hub and team, which every store it shares there uses. The
    names shell-quoted: each reaches the join as one argument, and runs nothing."""
    return (
        f"put the token in {TOKEN_ENV} and join again: "
        f"thatch team join {shell_quote(hub_url)} --store {shell_quote(store)}"
    )


def token_dir(env: Mapping[str, str]) -> Path:
    return config_home(env) / "thatch" / "team-tokens"


def token_path(env: Mapping[str, str], hub_url: str, team: str) -> Path:
    key = hashlib.sha256(f"{hub_url}\n{team}".encode()).hexdigest()[:24]
    return token_dir(env) / f"{key}.token"


def write_token(env: Mapping[str, str], hub_url: str, team: str, token: str) -> Path:
    """Write the token readable by this user only (created 0600, never wider)."""
    folder = token_dir(env)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = token_path(env, hub_url, team)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, token.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    return path


def read_token(env: Mapping[str, str], hub_url: str, team: str) -> str:
    path = token_path(env, hub_url, team)
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise TokenMissing(
            f"no token for team {team!r} at {hub_url} on this machine ({path})"
        ) from None
    except OSError as error:
        raise TokenMissing(f"cannot read the token file {path}: {error.strerror}") from None
    return token
