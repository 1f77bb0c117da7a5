"""What every hook command shares: reading a host's payload and options, resolving what a
hook needs from its environment, running its body and reporting a failure.

Standard library only: the tool hooks import this module on every tool call. Nothing
here raises on bad input; problems become one stderr line ``[thatch <command>] <message>``
(docs/hooks.md §rules) and an empty payload.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any, TypeGuard

from thatch.common.environment import HOSTS, host_from_project_vars, known_host
from thatch.common.environment import project_dir_from_env as env_project_dir

__all__ = [
    "CHAT_WAKE_START",
    "HOOK_FALLBACK_HOST",
    "HOSTS",
    "MAX_STDIN_BYTES",
    "REMINDER_STDIN_DEADLINE",
    "STDIN_DEADLINE",
    "Failures",
    "clipped",
    "first_string",
    "hook_options",
    "host_session",
    "project_dir",
    "queue_problem",
    "read_payload",
    "report_failure",
    "resolve_host",
    "run_hook",
    "warn",
    "warn_plain",
]

MAX_STDIN_BYTES = 16 * 1024 * 1024
STDIN_DEADLINE = 2.0
REMINDER_STDIN_DEADLINE = 0.5
# The host a hook assumes when neither --host, THATCH_HOST nor a project-dir variable
# names one: Claude Code's hooks are the ones that run without any of them.
HOOK_FALLBACK_HOST = "claude"
_CHUNK = 1 << 16
# How chat-notify's wake starts: Cursor submits it as the session's next prompt, which
# the prompt hook then must not take for the user's (the opencode plugin skips it itself).
CHAT_WAKE_START = "[thatch] System notification, not user input:"


def first_string(payload: Mapping[str, Any], *names: str) -> str:
    """The first present non-empty string among ``names`` (docs/hooks.md's ``a`` → ``b``).

    The queue reads tool arguments with a helper of its own: ``chat-notify``, which reads a
    payload and never the queue, must not load the queue package for these few lines."""
    for name in names:
        value = payload.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


# The payload fields naming the host's session, by host: Cursor's every event carries
# conversation_id (some add a session_id), opencode's plugin passes session_id (its own
# events say sessionID), Claude Code's say session_id.
_SESSION_FIELDS = {
    "cursor": ("conversation_id", "session_id", "sessionID"),
    "opencode": ("sessionID", "session_id", "conversation_id"),
}
_DEFAULT_SESSION_FIELDS = ("session_id", "conversation_id", "sessionID")


def host_session(payload: Mapping[str, Any], host: str) -> str:
    """The host's session id in a hook payload, the one rule of every hook (the queue's
    and chat's), exactly as given ("" when there is none or it is blank): " a " and "a"
    are two sessions, as the queue's files keep them apart."""
    session = first_string(payload, *_SESSION_FIELDS.get(host, _DEFAULT_SESSION_FIELDS))
    return session if session.strip() else ""


def warn(command: str, message: str, stderr: IO[str] | None = None) -> None:
    """One diagnostic line on stderr; never raises (stderr may be closed)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[thatch {command}] {message}", file=stderr or sys.stderr, flush=True)


def warn_plain(message: str) -> None:
    """A ``[thatch] <message>`` stderr line (the README's wording for settings warnings)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[thatch] {message}", file=sys.stderr, flush=True)


def _read_with_deadline(fd: int, deadline: float, limit: int) -> tuple[bytes, str | None]:
    """Bytes up to EOF, or what arrived before the deadline / size limit plus a problem."""
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + deadline
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0:
            return b"", f"stdin not closed within {deadline:g} s; input ignored"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return b"".join(chunks), None
        size += len(chunk)
        if size > limit:
            return b"", f"stdin larger than {limit // (1024 * 1024)} MiB; input ignored"
        chunks.append(chunk)


def read_payload(
    command: str,
    *,
    deadline: float = STDIN_DEADLINE,
    limit: int = MAX_STDIN_BYTES,
    stdin: IO[bytes] | IO[str] | None = None,
) -> dict[str, Any]:
    """The hook's stdin as a JSON object; ``{}`` for a TTY, nothing, or anything else."""
    stream = sys.stdin if stdin is None else stdin
    if stream is None:
        return {}
    try:
        if stream.isatty():
            return {}
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return {}
    try:
        data, problem = _read_with_deadline(fd, deadline, limit)
    except OSError as error:
        warn(command, f"cannot read stdin: {error.strerror or error}")
        return {}
    if problem:
        warn(command, problem)
        return {}
    if not data.strip():
        return {}
    try:
        value = json.loads(data)
        if _SURROGATE_ESCAPE.search(data):
            value = _without_lone_surrogates(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        warn(command, "stdin is not JSON; input ignored")
        return {}
    if not isinstance(value, dict):
        warn(command, f"stdin is a JSON {type(value).__name__}, not an object; input ignored")
        return {}
    return value


# JavaScript hosts cut long text with ``slice``, which can halve an emoji: JSON.stringify
# then writes a lone ``\ud83d``. Python reads it as a lone surrogate, which no UTF-8 file,
# database or stdout accepts, so one of them anywhere would cost the whole payload.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate (json.loads joins the paired ones) made U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    return value


def resolve_host(option: str | None, env: Mapping[str, str], command: str = "hook") -> str:
    """``--host`` → ``THATCH_HOST`` → cursor/claude by project-dir variables →
    ``HOOK_FALLBACK_HOST``; a value naming no host is ignored with a warning."""
    for source, value in (("--host", option), ("THATCH_HOST", env.get("THATCH_HOST"))):
        if value:
            host = known_host(value)
            if host is not None:
                return host
            from thatch.frontend.untrusted import quoted  # the host's or environment's: data

            warn(command, f"ignoring {source} {quoted(value)}: expected claude, cursor or opencode")
    return host_from_project_vars(env) or HOOK_FALLBACK_HOST


def project_dir(env: Mapping[str, str], payload: Mapping[str, Any]) -> Path:
    """Project directory for hooks (docs/architecture.md): env, then payload ``cwd``, then
    ``workspace_roots[0]``, then the working directory."""
    named = env_project_dir(env)
    if named is not None:
        return named
    cwd = payload.get("cwd")
    if _usable_path(cwd):
        return Path(cwd)
    roots = payload.get("workspace_roots")
    if isinstance(roots, list) and roots and _usable_path(roots[0]):
        return Path(roots[0])
    return Path.cwd()


def _usable_path(value: object) -> TypeGuard[str]:
    # No system call takes a path with a NUL byte: Python raises ValueError, not OSError.
    return isinstance(value, str) and bool(value) and "\x00" not in value


def report_failure(command: str, error: BaseException) -> None:
    Failures(command).report(error)


def _failure_message(error: BaseException) -> str:
    """The one line a hook says about ``error`` (after ``[thatch <command>] ``)."""
    sqlite3 = sys.modules.get("sqlite3")  # only loaded if a database was opened
    if sqlite3 is not None and isinstance(error, sqlite3.Error):
        from thatch.common.environment import default_db_path
        from thatch.frontend.store.db import store_error

        return str(store_error(error, default_db_path(os.environ)))
    errors = sys.modules.get("thatch.frontend.errors")  # loaded with the store
    if errors is not None and isinstance(error, errors.StoreError):
        # A full disk or a busy database is the environment's, not thatch's internal error.
        return str(error).splitlines()[0]
    detail = f"{type(error).__name__}: {error}".splitlines()[0]
    return f"internal error: {clipped(detail)}"


# How much of a failure's own text a hook's stderr line keeps: that text may quote what the
# host sent (an OSError names the path it was given, a 5,000-character cwd included), and
# the host shows the agent every stderr line.
DETAIL_LIMIT = 200


def clipped(text: str, limit: int = DETAIL_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, "…" marking a cut."""
    return text if len(text) <= limit else text[:limit] + "…"


def queue_problem(error: OSError) -> str:
    """The line for a queue the hook could not use (its path is no directory, a file in it
    cannot be read): the system's words, without the path."""
    return f"cannot use the queue: {error.strerror or clipped(str(error))}"


class Failures:
    """One hook run's failure reports: steps that each open the database (the reminder's
    branch sync, hygiene counts and chat line) all meet an unusable one, and the host
    shows the agent every stderr line, so each distinct line is said once."""

    def __init__(self, command: str) -> None:
        self.command = command
        self._said: set[str] = set()

    def report(self, error: BaseException) -> None:
        if os.environ.get("THATCH_DEBUG") == "1":  # every step's, to show where each met it
            import traceback

            traceback.print_exception(error, file=sys.stderr)
        message = _failure_message(error)
        if message not in self._said:
            self._said.add(message)
            warn(self.command, message)


def run_hook(command: str, body: Callable[[], str | None], as_json: bool = False) -> None:
    """Run ``body``; print its text (or the ``--json`` form); swallow every failure."""
    try:
        text = body()
    except Exception as error:  # a hook must never fail its host's turn
        report_failure(command, error)
        text = None
    if as_json:
        print_line(json.dumps({"additional_context": text} if text else {}, ensure_ascii=False))
    elif text:
        print_line(text)


def print_line(line: str) -> None:
    """``line`` and a newline on stdout, flushed; nothing when the host gave no stdout or
    closed it (there is nothing left to tell it)."""
    # With descriptor 1 closed at start, Python's sys.stdout is None.
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def hook_options(command: str, args: list[str]) -> dict[str, Any]:
    """``--json`` and ``--host`` read by hand: hooks never fail on their command line.

    Unknown options are ignored (hosts add options over time); a ``--host`` without a
    value is reported on stderr and ignored.
    """
    options: dict[str, Any] = {"as_json": False, "host": None}
    for i, arg in enumerate(args):
        if arg == "--json" or arg.startswith("--json="):
            options["as_json"] = True
        elif arg == "--host":
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                options["host"] = args[i + 1]
            else:
                warn(command, "ignoring --host without a value")
        elif arg.startswith("--host="):
            options["host"] = arg.split("=", 1)[1]
    return options
