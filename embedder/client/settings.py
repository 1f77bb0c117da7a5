"""Environment-derived settings shared by the embedder and its clients.

Everything here is a pure function of an environment mapping so tests pass their own dict;
nothing is cached at module level. Paths (HOME, XDG, the default socket) come from
``thatch.common.environment``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, NamedTuple

from thatch.common.control_chars import double_quoted
from thatch.common.environment import (
    ConfigError,
    Env,
    Setting,
    config_file,
    default_socket_path,
    env_get,
    setting,
)
from thatch.embedder.client.errors import AddressError, ModelError

__all__ = [
    "DEFAULT_EXIT_SECONDS",
    "DEFAULT_IDLE_SECONDS",
    "DEFAULT_MODEL",
    "MAX_SOCKET_PATH_BYTES",
    "Address",
    "configured_address",
    "configured_model",
    "default_address",
    "int_setting",
    "model_setting",
    "parse_address",
]

DEFAULT_MODEL = "Xenova/bge-small-en-v1.5"
DEFAULT_IDLE_SECONDS = 600
DEFAULT_EXIT_SECONDS = 3600
MAX_SOCKET_PATH_BYTES = 107


def default_address(env: Env) -> str:
    return f"unix://{default_socket_path(env)}"


def model_setting(env: Env) -> Setting:
    """The model to use and where that came from: THATCH_MODEL, else the config file's
    ``model`` (``thatch model use``), else the default. ModelError when the config file
    is unreadable or malformed (and THATCH_MODEL is unset)."""
    try:
        chosen = setting(env, "model")
    except ConfigError as error:
        raise ModelError(
            str(error), fix=f"correct or remove {config_file(env)}, or set THATCH_MODEL"
        ) from None
    return chosen if chosen.value else Setting(DEFAULT_MODEL, "default")


def configured_model(env: Env) -> str:
    value = model_setting(env).value
    assert value is not None
    return value


def int_setting(env: Env, name: str, default: int) -> int:
    value = env_get(env, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        return default
    return number if number >= 0 else default


# A NamedTuple, not a dataclass: the prompt hook imports this module (dataclasses
# imports inspect, ~5 ms).
class Address(NamedTuple):
    """A parsed embedder address.

    ``target`` is what grpc wants (``unix:///abs``, ``host:port``, ``dns:///host:port``);
    ``path`` is the socket file for unix addresses.
    """

    kind: Literal["unix", "tcp", "dns"]
    target: str
    path: Path | None = None

    @property
    def is_unix(self) -> bool:
        return self.kind == "unix"

    def __str__(self) -> str:
        return self.target


def _bad_address(value: str) -> AddressError:
    # The environment's words, quoted: a line break, an escape sequence or a bidi override
    # in them is shown escaped, and must not pass for an error's next line.
    return AddressError(
        f"invalid THATCH_EMBEDDER_ADDR {double_quoted(value)}: "
        "expected unix:///path, host:port or dns:///host:port"
    )


def _valid_host_port(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return False
    if host.startswith("[") and host.endswith("]"):
        return len(host) > 2
    return bool(host) and "/" not in host and ":" not in host and " " not in host


def parse_address(value: str) -> Address:
    """Parse ``unix:///abs/path``, ``host:port`` or ``dns:///host:port``."""
    value = value.strip()
    if value.startswith("unix://"):
        path = value[len("unix://") :]
        if not path.startswith("/") or path == "/":
            raise _bad_address(value)
        if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
            raise AddressError(
                f"socket path too long ({len(os.fsencode(path))} bytes; "
                f"max {MAX_SOCKET_PATH_BYTES}): set THATCH_EMBEDDER_ADDR to a shorter "
                "unix:/// path"
            )
        return Address("unix", f"unix://{path}", Path(path))
    if value.startswith("dns:///"):
        rest = value[len("dns:///") :]
        if not _valid_host_port(rest):
            raise _bad_address(value)
        return Address("dns", value)
    if _valid_host_port(value):
        return Address("tcp", value)
    raise _bad_address(value)


def configured_address(env: Env) -> Address:
    value = env_get(env, "THATCH_EMBEDDER_ADDR")
    return parse_address(value if value else default_address(env))
