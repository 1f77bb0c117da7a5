"""The extraction queue: one JSONL file of recent tool calls per agent session.

Tool hooks append here on every tool call, so this module imports only the standard
library (docs/hooks.md §rules). Layout per session id ``I`` in the queue directory:
``<safe>.jsonl`` (records, oldest first, each with a sequence number ``seq``),
``<safe>.count`` (nudges printed since the last drain), ``<safe>.state`` (the snapshot
handed to an extractor: its cursor and when) and ``<safe>.lock`` (flock target). Every
read-modify-write holds the lock and replaces the file atomically, so readers (which never
lock) see either the old or the new file, never a torn one.

Everything stored is bounded (the ``*_LIMIT`` constants below): hosts pass tool names,
argument names, ids and values as they come, and one 5 MB tool name once made a 10 MB
queue and a 10 MB ``get_extraction_payload``. Records are capped when written and again
when read, so a file written by anyone else is bounded too. A session id the extraction
tools would refuse (``session_id_problem``) gets no queue at all, hence no nudge.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from thatch.frontend.identifiers import SESSION_ID_MAX, session_id_problem

__all__ = [
    "ACCEPTED_TTL_SECONDS",
    "MAX_RECORDS",
    "QueueError",
    "accept",
    "adopt_carried",
    "append_calls",
    "build_payload",
    "call_succeeded",
    "carry_over",
    "classify",
    "cleanup",
    "complete",
    "consume",
    "drain",
    "increment_count",
    "make_record",
    "nudge_records",
    "peek_records",
    "project_key",
    "queue_paths",
    "read_count",
    "requeue",
    "response_text",
    "safe_name",
    "session_id_problem",
]

MAX_RECORDS = 20
ARG_STRING_LIMIT = 500
OUTPUT_LIMIT = 2000
PAYLOAD_OUTPUT_LIMIT = 500
TOOL_NAME_LIMIT = 200  # host-prefixed tool names are well under 100 characters
KEY_LIMIT = 100  # an argument's name
ID_LIMIT = 200  # tool_use_id (hosts send ~40-character ids)
ARG_ITEMS_LIMIT = 50  # entries kept per object or array inside args
ARG_DEPTH_LIMIT = 8  # nesting kept inside args; deeper values become "…"
ARGS_CHARS_LIMIT = 4000  # budget of one record's args (names and strings counted)
TITLE_LIMIT = 200
# One record is at most about the sum of its fields' limits (~7.5k characters), so a
# queue of MAX_RECORDS stays under QUEUE_BYTES_LIMIT; reading never takes more than that
# from the end of a file (a foreign or older file may be larger).
RECORD_CHARS_LIMIT = (
    TOOL_NAME_LIMIT + SESSION_ID_MAX + ARGS_CHARS_LIMIT + TITLE_LIMIT + OUTPUT_LIMIT + ID_LIMIT
)
QUEUE_BYTES_LIMIT = 4 * MAX_RECORDS * RECORD_CHARS_LIMIT  # UTF-8: up to 4 bytes a character
LOCK_TIMEOUT_SECONDS = 2.0
STALE_SECONDS = 7 * 24 * 3600
# How long a handed-out snapshot keeps the extraction nudge quiet: an extractor that died
# (host closed, sub-agent killed) must not strand its records; after this they nudge again.
ACCEPTED_TTL_SECONDS = 600
CLEANUP_INTERVAL_SECONDS = 24 * 3600
CLEANUP_MARKER = ".last-cleanup"

# Bare names of thatch's MCP tools, used to recognise thatch's own calls however a host
# prefixes them. SERVED_TOOLS and DRAINING_TOOLS (the tools whose call drains the queue)
# are copies of what the tool registry (tools/registry.py) says; this hot path imports the
# standard library only, and tests/test_tool_registry.py fails when a copy differs.
SERVED_TOOLS = (
    "memory_remember",
    "memory_recall",
    "memory_list",
    "memory_show",
    "memory_forget",
    "store_list",
    "find_duplicates",
    "dedup_mark_checked",
    "extraction_done",
    "get_extraction_payload",
    "engine",
    "chat",
)
DRAINING_TOOLS = ("memory_remember", "extraction_done")
THATCH_PREFIXES = ("mcp__thatch__", "mcp_thatch_", "thatch_", "thatch:", "thatch.")
# Host meta-tools: queueing them would feed extraction back into itself (an extraction
# sub-agent's dispatch, a skill load) or queue a host's own plumbing (Claude Code's
# ToolSearch loads deferred tool schemas, ListAgents and TaskOutput watch sub-agents).
# Hosts add such tools in every release, so they are known by a rule, not a list: a
# built-in (no server prefix) one of whose words is one of these (or its plural).
META_WORDS = frozenset({"skill", "task", "agent", "tool", "todo"})
# Words of a built-in tool name: runs split at case changes, digits, "_", "-" and spaces.
_NAME_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
# A name from some MCP server or namespace, never a host built-in.
_NAMESPACED = re.compile(r"__|[:./]")
# The first words of a successful call's answer (tools/formatting.py, build_payload): the
# hooks drain (or name a snapshot's holder) only on this evidence, never on a failed or
# unknown call.
SUCCESS_MARKERS = {
    "memory_remember": "[saved]",
    "extraction_done": "[acknowledged]",
    "get_extraction_payload": '{"interactions"',
}
# Stem of a project's carried-over queue: "~" never occurs in a session's safe name.
CARRY_PREFIX = "~carry-"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_LAST_SEGMENT = re.compile(r"(?:__|[:./])")
# A pattern string, not a compiled object: only aggregator calls need it, and compiling it
# costs more than the rest of a tool hook's work (re caches it after the first use). Only
# names with an underscore: "engine" and "chat" are words any input may hold.
_TOOL_WORDS = r"\b(" + "|".join(name for name in SERVED_TOOLS if "_" in name) + r")\b"


class QueueError(Exception):
    """A queue operation could not be done (lock timeout, unsafe path); one-line message."""


# -- locations -------------------------------------------------------------------------


def safe_name(session_id: str) -> str:
    """File stem for a session id: itself when already safe, else sanitised plus a hash."""
    safe = _UNSAFE.sub("_", session_id)
    if safe != session_id or len(session_id) > 128:
        import hashlib  # loads OpenSSL (~3 ms); UUIDs and opencode ids never need it

        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
        safe = safe[:64] + "-" + digest[:16]
    return safe


def queue_paths(directory: Path, session_id: str) -> tuple[Path, Path, Path]:
    """The ``.jsonl``, ``.count`` and ``.lock`` paths of a non-empty session id."""
    if not session_id:
        raise QueueError("empty session id has no queue")
    stem = safe_name(session_id)
    paths = tuple(directory / f"{stem}{suffix}" for suffix in (".jsonl", ".count", ".lock"))
    for path in paths:
        # Belt and braces: the sanitising above already rules out separators and "..".
        if path.parent != directory or path.name in (".", ".."):
            raise QueueError(f"session id {session_id[:40]!r} does not map into the queue")
    return paths  # type: ignore[return-value]


def _ensure_dir(directory: Path) -> None:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)


# -- locking and atomic files ----------------------------------------------------------


@contextlib.contextmanager
def _locked(lock_path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                if time.monotonic() >= deadline:
                    raise QueueError(
                        f"queue lock {lock_path.name} busy for {timeout:g} s; gave up"
                    ) from None
                time.sleep(delay)  # waiting for another hook process; no event to wait on
                delay = min(delay * 2, 0.05)
                continue
            # The cleanup may have unlinked this file while we waited for it: holding an
            # orphan locks nobody out, so only the file still at the path counts.
            if _same_file(fd, lock_path):
                break
            orphan, fd = fd, os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(orphan)
        # Touch the lock so the 7-day cleanup leaves it alone (it also skips held locks).
        os.utime(fd)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file at ``path`` now (not one unlinked or replaced meanwhile)."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


def _remove_idle_lock(path: str, stale_before: float) -> bool:
    """Unlink a stale lock file only while holding it, so no process holds it then.

    A taker that opened it before the unlink finds it gone once it gets the flock and
    retries on the file at the path (``_locked``). True when removed.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False  # gone meanwhile, or not a file we can lock: leave it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held right now
        # Re-check under the flock: a taker may have touched it, or replaced it, meanwhile.
        if os.fstat(fd).st_mtime >= stale_before or not _same_file(fd, Path(path)):
            return False
        os.unlink(path)
        return True
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str) -> None:
    # Not tempfile.mkstemp: importing tempfile costs a tool hook ~3 ms.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The file's records, newest MAX_RECORDS, each capped; at most QUEUE_BYTES_LIMIT read."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > QUEUE_BYTES_LIMIT:
                handle.seek(size - QUEUE_BYTES_LIMIT)  # the first (partial) line is skipped
            data = handle.read(QUEUE_BYTES_LIMIT)
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > QUEUE_BYTES_LIMIT:
        lines = lines[1:]
    records: list[dict[str, Any]] = []
    for line in lines[-MAX_RECORDS * 2 :]:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a foreign or damaged line must not hide the others
        if isinstance(value, dict):
            records.append(_capped(value))
    return records[-MAX_RECORDS:]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# -- classification and records ----------------------------------------------------------


def classify(tool_name: str, tool_input: Any = None) -> tuple[str, str | None]:
    """``("thatch", bare)``, ``("meta", None)`` or ``("other", None)`` per docs/hooks.md
    §classification."""
    name = tool_name.strip().lower()
    for prefix in THATCH_PREFIXES:
        if name.startswith(prefix):
            return "thatch", name[len(prefix) :]
    if name.startswith("mcp:") and name[4:] in SERVED_TOOLS:
        return "thatch", name[4:]
    if name in SERVED_TOOLS:
        return "thatch", name
    if is_meta_tool(tool_name):
        return "meta", None
    if _LAST_SEGMENT.split(name)[-1] == "execute":
        found = re.findall(_TOOL_WORDS, _compact(tool_input if tool_input is not None else {}))
        if found:
            if any(word in DRAINING_TOOLS for word in found):
                return "thatch", "memory_remember"
            return "thatch", found[0]
    return "other", None


def is_meta_tool(tool_name: str) -> bool:
    """A host built-in about agents, tasks, skills, todos or tools (docs/hooks.md
    §classification): ``Agent``, ``ListAgents``, ``TaskOutput``, ``ToolSearch``, ``skill``."""
    name = tool_name.strip()
    if _NAMESPACED.search(name):
        return False
    for word in _NAME_WORDS.findall(name):
        word = word.lower()
        if word in META_WORDS or (word.endswith("s") and word[:-1] in META_WORDS):
            return True
    return False


def _cut_strings(value: Any) -> Any:
    """``value`` with every string cut to 500 characters and its size bounded (the caps)."""
    return _bounded(value, 0, [ARGS_CHARS_LIMIT])


def _bounded(value: Any, depth: int, budget: list[int]) -> Any:
    if isinstance(value, str):
        value = value[: max(0, min(ARG_STRING_LIMIT, budget[0]))]
        budget[0] -= len(value) + 2
        return value
    if value is None or isinstance(value, bool | float):
        budget[0] -= 5
        return value
    if isinstance(value, int):  # a 5,000-digit integer cannot even be printed as JSON
        budget[0] -= 20
        return value if -(2**63) <= value < 2**63 else "…"
    if isinstance(value, dict | list):
        if depth >= ARG_DEPTH_LIMIT:
            budget[0] -= 3
            return "…"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        out: dict[str, Any] = {}
        for index, (key, item) in enumerate(items):
            if index >= ARG_ITEMS_LIMIT or budget[0] <= 0:
                break
            name = str(key)[:KEY_LIMIT]
            budget[0] -= len(name) + 4 if isinstance(value, dict) else 1
            out[name] = _bounded(item, depth + 1, budget)
        return out if isinstance(value, dict) else list(out.values())
    return _bounded(str(value), depth, budget)


def _cut(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def first_string(args: Mapping[str, Any], *names: str) -> str:
    """The first present non-empty string among ``names`` (docs/hooks.md's ``a`` → ``b``)."""
    for name in names:
        value = args.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _title(tool: str, args: Mapping[str, Any]) -> str:
    name = tool.strip().lower()
    if name in ("read", "edit", "write"):
        return first_string(args, "filePath", "file_path").rsplit("/", 1)[-1]
    if name in ("bash", "shell"):
        return first_string(args, "command")[:80]
    if name in ("grep", "glob"):
        return first_string(args, "pattern")
    return _compact(args)[:80]


def _block_texts(blocks: list[Any], depth: int) -> str:
    parts = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
            elif block.get("type") in ("image", "audio"):
                parts.append(f"[{block['type']}]")
            else:
                parts.append(response_text(block, depth + 1)[0])
        else:
            parts.append(_compact(block))
    return "\n".join(part for part in parts if part)


def response_text(value: Any, depth: int = 0) -> tuple[str, bool]:
    """The meaningful text of a tool response and whether the host marked it an error.

    Hosts hand responses over in several shapes (docs/hooks.md §record): a string; a list
    of MCP content blocks (Claude Code's MCP results); ``{content, isError}`` (opencode's
    MCP results); Claude Code's structured built-in results (Bash ``{stdout, stderr, …}``,
    Read ``{file: {content}}``). Anything else is its compact JSON.
    """
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    if depth >= ARG_DEPTH_LIMIT:
        return _compact(value), False
    if isinstance(value, list):
        return _block_texts(value, depth), False
    if not isinstance(value, dict):
        return _compact(value), False
    error = value.get("isError") is True or value.get("is_error") is True
    content = value.get("content")
    if isinstance(content, list):
        return _block_texts(content, depth), error
    if isinstance(content, str):
        return content, error
    stdout, stderr = value.get("stdout"), value.get("stderr")
    if isinstance(stdout, str) or isinstance(stderr, str):
        parts = [text for text in (stdout, stderr) if isinstance(text, str) and text]
        return "\n".join(parts), error
    file = value.get("file")
    if isinstance(file, dict) and isinstance(file.get("content"), str):
        return file["content"], error
    return _compact(value), error


def make_record(session_id: str, call: Mapping[str, Any], seq: int | None = None) -> dict[str, Any]:
    """The queue record of one call (``tool_name``, ``tool_input``, ``tool_use_id``,
    ``tool_response`` as the hosts send them; ``isError`` beside them when the host passes
    the error flag on its own)."""
    tool = call.get("tool_name")
    tool = (tool if isinstance(tool, str) else str(tool))[:TOOL_NAME_LIMIT]
    raw_input = call.get("tool_input")
    if isinstance(raw_input, dict):
        args: dict[str, Any] = _cut_strings(raw_input)
    elif raw_input is None:
        args = {}
    else:
        args = {"value": _cut_strings(raw_input)}
    output, error = response_text(call.get("tool_response"))
    if error or call.get("isError") is True:
        output = "[error] " + output  # the extractor must not learn a failure as a fact
    record: dict[str, Any] = {
        "tool": tool,
        "sessionID": session_id[:SESSION_ID_MAX],
        "args": args,
        "title": _title(tool, args)[:TITLE_LIMIT],
        "output": output[:OUTPUT_LIMIT],
    }
    use_id = call.get("tool_use_id")
    if isinstance(use_id, str) and use_id:
        record["tool_use_id"] = use_id[:ID_LIMIT]
    ended = call_time(call, "ended_at")
    if ended is not None:
        record["ended_at"] = ended
    if seq is not None:
        record["seq"] = seq
    return record


def call_time(call: Mapping[str, Any], field: str) -> int | None:
    """A call's ``started_at``/``ended_at`` (ms since the epoch, passed by the opencode
    plugin), or None when absent or not a plausible time."""
    value = call.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if 0 < value < 1e14 else None


def _seq(record: Mapping[str, Any]) -> int:
    """A record's sequence number; records of older releases (no ``seq``) count as 0, older
    than anything written since."""
    value = record.get("seq")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def call_succeeded(call: Mapping[str, Any], bare: str, aggregated: bool = False) -> bool:
    """Whether a draining call (``memory_remember``, ``extraction_done``) visibly succeeded:
    its answer starts with the tool's success marker and no error flag is set. A missing,
    failed or unknown answer (``Invalid arguments: …``, a tool the host does not have) is
    not a success, so it drains nothing."""
    marker = SUCCESS_MARKERS.get(bare)
    if marker is None or call.get("isError") is True:
        return False
    response = call.get("tool_response")
    if isinstance(response, str) and response.lstrip()[:1] in ("{", "["):
        # A host that passes the MCP result as JSON text (Cursor's tool_output).
        with contextlib.suppress(ValueError, RecursionError):
            response = json.loads(response)
    text, error = response_text(response)
    if error:
        return False
    if aggregated:  # an aggregator's answer wraps the thatch tool's somewhere inside
        return marker in text
    return text.lstrip().startswith(marker)


def _capped(record: dict[str, Any]) -> dict[str, Any]:
    """A record read back, bounded like one written now (older or foreign files)."""
    capped: dict[str, Any] = {
        "tool": _cut(record.get("tool"), TOOL_NAME_LIMIT),
        "sessionID": _cut(record.get("sessionID"), SESSION_ID_MAX),
        "args": _cut_strings(record.get("args", {})),
        "title": _cut(record.get("title"), TITLE_LIMIT),
        "output": _cut(record.get("output"), OUTPUT_LIMIT),
    }
    use_id = record.get("tool_use_id")
    if isinstance(use_id, str) and use_id:
        capped["tool_use_id"] = use_id[:ID_LIMIT]
    ended = call_time(record, "ended_at")
    if ended is not None:
        capped["ended_at"] = ended
    if _seq(record):
        capped["seq"] = _seq(record)
    held_by = record.get("held_by")
    held_until = record.get("held_until")
    if (
        isinstance(held_by, str)
        and held_by
        and isinstance(held_until, int | float)
        and not isinstance(held_until, bool)
    ):
        capped["held_by"] = held_by[:SESSION_ID_MAX]
        capped["held_until"] = float(held_until)
        agent = record.get("held_agent")
        if isinstance(agent, str) and agent:
            capped["held_agent"] = agent[:ID_LIMIT]
    return capped


# -- state: the snapshot handed to an extractor ----------------------------------------------


def _state_path(jsonl: Path) -> Path:
    return jsonl.with_suffix(".state")


def _read_state(path: Path) -> dict[str, Any]:
    """``{"cursor": int, "accepted_at": float}`` or ``{}`` (missing, damaged, foreign)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    cursor, at = value.get("cursor"), value.get("accepted_at")
    if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
        return {}
    if isinstance(at, bool) or not isinstance(at, int | float):
        return {}
    state: dict[str, Any] = {"cursor": cursor, "accepted_at": float(at)}
    agent = value.get("agent_id")
    if isinstance(agent, str) and agent:
        state["agent_id"] = agent[:ID_LIMIT]
    return state


def _write_records(jsonl: Path, records: list[dict[str, Any]]) -> None:
    kept = records[-MAX_RECORDS:]
    if kept:
        _write_atomic(jsonl, "".join(_compact(record) + "\n" for record in kept))
    else:
        _unlink(jsonl)


# -- operations ------------------------------------------------------------------------


def append_calls(
    directory: Path,
    session_id: str,
    calls: Iterable[Mapping[str, Any]],
    *,
    subagent: bool = False,
    agent_id: str = "",
) -> None:
    """Queue a batch of tool calls for a session (docs/hooks.md §append).

    A *successful* thatch memory write or ``extraction_done`` in the batch drains: the
    session's own agent's memory write consumes the queue, except the calls that ran beside
    it (the rest of the batch, and records that ended after it started); a sub-agent's
    write (``subagent``: Claude's ``agent_id``, an opencode child) and ``extraction_done``
    complete the handed-out snapshot only. A sub-agent's successful
    ``get_extraction_payload`` names ``agent_id`` as the snapshot's holder (so its stop
    can complete it, ``complete``). thatch's own and meta tools are skipped, as are calls
    whose ``tool_use_id`` is already queued. The newest 20 records are kept; each new one
    gets the next sequence number.
    """
    if session_id_problem(session_id) is not None:
        return  # the tools would refuse this id: a queue for it could never be fetched
    calls = list(calls)
    if not calls:
        return
    jsonl, count, lock = queue_paths(directory, session_id)
    state_path = _state_path(jsonl)
    _ensure_dir(directory)
    with _locked(lock):
        existing = _read_lines(jsonl)
        state = _read_state(state_path)
        original = [_seq(record) for record in existing]
        next_seq = max([*original, state.get("cursor", 0)]) + 1
        drained = holder = False
        batch: list[dict[str, Any]] = []  # records this call appends
        for call in calls:
            tool = call.get("tool_name")
            if not isinstance(tool, str) or not tool.strip():
                continue
            kind, bare = classify(tool, call.get("tool_input"))
            if (
                bare == "get_extraction_payload"
                and agent_id
                and "cursor" in state
                and call_succeeded(call, bare)
            ):
                state["agent_id"] = agent_id[:ID_LIMIT]
                holder = True
                continue
            if kind == "thatch" and bare in DRAINING_TOOLS:
                aggregated = bare != classify(tool)[1]
                if not call_succeeded(call, bare, aggregated):
                    continue  # a failed save drains nothing (and is not queued)
                if bare == "memory_remember" and not subagent:
                    # The agent saved what it had learned: the calls it had seen the results
                    # of. Calls of the same step ran beside the save (this batch, or
                    # opencode's siblings that ended after the save started): their results
                    # were not seen, so they stay queued.
                    started = call_time(call, "started_at")
                    existing = [
                        r
                        for r in existing
                        if any(r is new for new in batch)
                        or (started is not None and r.get("ended_at", 0) >= started)
                    ]
                elif "cursor" in state:
                    existing = [r for r in existing if _seq(r) > state["cursor"]]
                else:
                    continue  # no snapshot handed out: nothing to complete
                state = {}
                drained = True
                continue
            if kind != "other":
                continue
            use_id = call.get("tool_use_id")
            use_id = use_id[:ID_LIMIT] if isinstance(use_id, str) else use_id
            if isinstance(use_id, str) and any(
                use_id and record.get("tool_use_id") == use_id for record in existing
            ):
                continue
            batch.append(make_record(session_id, call, next_seq))
            existing.append(batch[-1])
            next_seq += 1
        if drained:
            _unlink(count)
            _unlink(state_path)
        elif holder:
            _write_atomic(state_path, _compact(state))
        if not drained and [_seq(record) for record in existing] == original:
            return  # nothing changed; leave the file (and its mtime) alone
        _write_records(jsonl, existing)


def peek_records(directory: Path, session_id: str) -> list[dict[str, Any]]:
    """The queued records, oldest first, without locking or changing anything."""
    if session_id_problem(session_id) is not None:
        return []
    jsonl, _count, _lock = queue_paths(directory, session_id)
    return _read_lines(jsonl)


def nudge_records(
    directory: Path, session_id: str, *, now: float | None = None
) -> list[dict[str, Any]]:
    """The records the extraction nudge is about: none while a handed-out snapshot is
    fresh (an extractor is working on it), else every queued record."""
    if session_id_problem(session_id) is not None:
        return []
    jsonl, _count, _lock = queue_paths(directory, session_id)
    records = _read_lines(jsonl)
    if not records:
        return []
    state = _read_state(_state_path(jsonl))
    now = time.time() if now is None else now
    if "cursor" in state and 0 <= now - state["accepted_at"] < ACCEPTED_TTL_SECONDS:
        return []
    return records


def accept(
    directory: Path, session_id: str, *, project: str = "", now: float | None = None
) -> list[dict[str, Any]]:
    """Hand the queued records out (``get_extraction_payload``): returns them and records
    the snapshot's cursor (their highest sequence number), which quiets the nudge until
    ``complete``, ``requeue`` or ACCEPTED_TTL_SECONDS. Records stay queued.

    With ``project``, the project's carried-over records are adopted first, as the prompt
    hook does: a nudge names this session, and a ``session-end`` that ran between the
    nudge and the fetch (a late one, ``/clear`` beside a background extractor, another
    process of the session) has moved what it announced to the project's carry file.
    Only a session the queue knows (its lock file exists: it queued calls, was nudged or
    ended) adopts: an id no nudge named (a child session's own) would strand them."""
    if session_id_problem(session_id) is not None:
        return []
    now = time.time() if now is None else now
    jsonl, _count, lock = queue_paths(directory, session_id)
    if project and lock.exists():
        adopt_carried(directory, session_id, project, now=now)
    if not jsonl.exists():
        return []
    with _locked(lock):
        records = _read_lines(jsonl)
        if records:
            cursor = max(_seq(record) for record in records)
            _write_atomic(_state_path(jsonl), _compact({"cursor": cursor, "accepted_at": now}))
    return records


def complete(directory: Path, session_id: str, agent_id: str = "", project: str = "") -> int:
    """The extractor finished (``extraction_done``): delete exactly the handed-out snapshot
    (records up to its cursor) and the nudge count; records queued since survive. Without
    a snapshot nothing is deleted; with ``agent_id`` (a Claude sub-agent stopped) only the
    snapshot that agent fetched is completed. With ``project``, the snapshot's records a
    ``session-end`` carried over while they were held (``carry_over``) are deleted from
    the project's carry file too. Returns the number of records deleted."""
    if session_id_problem(session_id) is not None or not directory.is_dir():
        return 0
    jsonl, count, lock = queue_paths(directory, session_id)
    state_path = _state_path(jsonl)
    with _locked(lock):
        carried = _release_held(directory, session_id, project, agent_id, delete=True)
        state = _read_state(state_path)
        if "cursor" not in state:
            _unlink(state_path)  # a damaged state file hands nothing out
            return carried
        if agent_id and state.get("agent_id") != agent_id[:ID_LIMIT]:
            return carried  # another sub-agent stopped; the extractor may still be working
        records = _read_lines(jsonl)
        kept = [record for record in records if _seq(record) > state["cursor"]]
        if len(kept) != len(records):
            _write_records(jsonl, kept)
        _unlink(count)
        _unlink(state_path)
    return carried + len(records) - len(kept)


def requeue(directory: Path, session_id: str, project: str = "") -> bool:
    """The extractor died: the snapshot's records are pending again (the nudge resumes),
    those a ``session-end`` carried over while held included (with ``project``). Returns
    whether a snapshot was handed out."""
    if session_id_problem(session_id) is not None or not directory.is_dir():
        return False
    jsonl, _count, lock = queue_paths(directory, session_id)
    state_path = _state_path(jsonl)
    with _locked(lock):
        released = _release_held(directory, session_id, project, "", delete=False)
        had = state_path.exists()
        _unlink(state_path)
    return had or released > 0


def consume(directory: Path, session_id: str) -> None:
    """Delete the session's records, nudge count and snapshot state."""
    if not session_id:
        return
    jsonl, count, lock = queue_paths(directory, session_id)
    if not directory.is_dir():
        return
    with _locked(lock):
        _unlink(jsonl)
        _unlink(count)
        _unlink(_state_path(jsonl))


drain = consume  # the name callers of earlier releases use


# -- carry-over: a session's last calls go to the project's next session ----------------------


def project_key(project: str) -> str:
    """Stem of a project's carried-over queue: FNV-1a (64 bit) of its directory (hashlib
    would load OpenSSL on every prompt)."""
    value = 0xCBF29CE484222325
    for byte in project.encode("utf-8", "surrogatepass"):
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{CARRY_PREFIX}{value:016x}"


def _carry_paths(directory: Path, project: str) -> tuple[Path, Path]:
    # The hooks name the project as the host does (CLAUDE_PROJECT_DIR, the payload's cwd),
    # the MCP server by its working directory, where symlinks are resolved: one key for both.
    stem = project_key(os.path.realpath(project))
    return directory / f"{stem}.jsonl", directory / f"{stem}.lock"


def _held(record: Mapping[str, Any], now: float) -> bool:
    """A carried record of a snapshot whose extractor may still be working on it."""
    return "held_by" in record and 0 <= record["held_until"] - now <= ACCEPTED_TTL_SECONDS


def _unheld(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("held_by", "held_until", "held_agent")}


def _release_held(
    directory: Path, session_id: str, project: str, agent_id: str, *, delete: bool
) -> int:
    """Delete (``complete``) or release (``requeue``) the carried records ``session_id``'s
    snapshot holds; with ``agent_id`` only those that agent fetched. The caller holds the
    session's lock; the carry lock is taken second, the order every carry operation uses."""
    if not project:
        return 0
    carry, carry_lock = _carry_paths(directory, project)
    if not carry.exists():
        return 0
    agent = agent_id[:ID_LIMIT]

    def mine(record: Mapping[str, Any]) -> bool:
        if record.get("held_by") != session_id[:SESSION_ID_MAX]:
            return False
        return not agent or record.get("held_agent") == agent

    with _locked(carry_lock):
        carried = _read_lines(carry)
        ours = [record for record in carried if mine(record)]
        if ours:
            if delete:
                _write_records(carry, [r for r in carried if not mine(r)])
            else:
                _write_records(carry, [_unheld(r) if mine(r) else r for r in carried])
    return len(ours)


def _merged(
    records: list[dict[str, Any]], incoming: list[dict[str, Any]], first_seq: int
) -> list[dict[str, Any]]:
    """``incoming`` appended to ``records`` (new sequence numbers, queued ids skipped)."""
    seen = {r.get("tool_use_id") for r in records if r.get("tool_use_id")}
    out = list(records)
    for record in incoming:
        use_id = record.get("tool_use_id")
        if use_id and use_id in seen:
            continue
        out.append({**record, "seq": first_seq})
        first_seq += 1
    return out


def carry_over(
    directory: Path,
    session_id: str,
    project: str,
    *,
    hold: bool = False,
    now: float | None = None,
) -> int:
    """The session ended (Claude's SessionEnd, Cursor's sessionEnd): move its queued records
    to the project's carry-over queue, which the project's next prompting session (or
    fetch, ``accept``) adopts. Returns the records moved.

    A handed-out snapshot's extractor normally ended with the session, so its records are
    pending again. With ``hold`` (the host process lives on: Claude Code's ``/clear`` and
    ``/resume``, whose background sub-agents keep running), a fresh snapshot's records are
    carried *held* (``held_by`` the session, ``held_agent`` its fetcher, ``held_until``
    the snapshot's expiry): the extractor completes them with its ``extraction_done`` or
    stop, and nobody adopts them before then or the expiry, so they are extracted once."""
    if session_id_problem(session_id) is not None or not project or not directory.is_dir():
        return 0
    now = time.time() if now is None else now
    jsonl, count, lock = queue_paths(directory, session_id)
    carry, carry_lock = _carry_paths(directory, project)
    with _locked(lock):
        records = _read_lines(jsonl)
        state = _read_state(_state_path(jsonl))
        fresh = "cursor" in state and 0 <= now - state["accepted_at"] < ACCEPTED_TTL_SECONDS
        if hold and fresh:
            holder: dict[str, Any] = {
                "held_by": session_id[:SESSION_ID_MAX],
                "held_until": state["accepted_at"] + ACCEPTED_TTL_SECONDS,
            }
            if state.get("agent_id"):
                holder["held_agent"] = state["agent_id"]
            records = [
                {**r, **holder} if _seq(r) <= state["cursor"] else _unheld(r) for r in records
            ]
        else:
            records = [_unheld(r) for r in records]
        if records:
            # Session lock first, then the carry lock: the order adopt_carried takes too.
            # The destination is written before the source goes, so a crash between
            # the two duplicates records (tool_use_ids dedupe them) and loses none.
            with _locked(carry_lock):
                carried = _read_lines(carry)
                first = max([0, *(_seq(r) for r in carried)]) + 1
                _write_records(carry, _merged(carried, records, first))
        _unlink(jsonl)
        _unlink(count)
        _unlink(_state_path(jsonl))
    return len(records)


def adopt_carried(
    directory: Path, session_id: str, project: str, *, now: float | None = None
) -> int:
    """Move the project's carried-over records into this session's queue (before its
    extraction nudge, and before a fetch), except those a live snapshot holds
    (``carry_over``). Both locks are held, so of two sessions adopting at once exactly one
    gets each record. Returns the records adopted; a stat when there are none."""
    if session_id_problem(session_id) is not None or not project:
        return 0
    carry, carry_lock = _carry_paths(directory, project)
    if not carry.exists():
        return 0
    now = time.time() if now is None else now
    jsonl, _count, lock = queue_paths(directory, session_id)
    with _locked(lock), _locked(carry_lock):
        carried = _read_lines(carry)
        held = [record for record in carried if _held(record, now)]
        taken = [_unheld(record) for record in carried if not _held(record, now)]
        if taken:
            records = _read_lines(jsonl)
            state = _read_state(_state_path(jsonl))
            first = max([0, state.get("cursor", 0), *(_seq(r) for r in records)]) + 1
            _write_records(jsonl, _merged(records, taken, first))
        if len(held) != len(carried) or not carried:
            _write_records(carry, held)  # none held: the file goes
    return len(taken)


def _parse_count(path: Path) -> int:
    try:
        value = int(path.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 0
    return max(value, 0)


def read_count(directory: Path, session_id: str) -> int:
    """Extraction nudges printed since the last drain (missing or unparsable = 0)."""
    if not session_id:
        return 0
    _jsonl, count, _lock = queue_paths(directory, session_id)
    return _parse_count(count)


def increment_count(directory: Path, session_id: str) -> int:
    """Add one to the session's nudge count; returns the count *before* the increment."""
    _jsonl, count, lock = queue_paths(directory, session_id)
    _ensure_dir(directory)
    with _locked(lock):
        missed = _parse_count(count)
        _write_atomic(count, f"{missed + 1}\n")
    return missed


UNREAD = ".unread"  # marker: this session was told once that its payloads are unreadable


def warn_unreadable_once(directory: Path, session_id: str, warn: Callable[[], None]) -> None:
    """Call ``warn`` unless this session's marker exists, then leave the marker (a session
    whose host sends a shape thatch cannot read hears it once, not on every tool call)."""
    marker = directory / f"{safe_name(session_id or 'no-session')}{UNREAD}"
    if marker.exists():
        return
    warn()
    with contextlib.suppress(OSError):
        _ensure_dir(directory)
        marker.touch()


def cleanup(directory: Path, *, now: float | None = None, force: bool = False) -> int:
    """Delete queue files (carried-over ones too) untouched for 7 days, at most once a
    day; returns files removed. A lock file goes only while this process holds it
    (``_remove_idle_lock``): never one another process holds or is taking."""
    now = time.time() if now is None else now
    if not directory.is_dir():
        return 0
    marker = directory / CLEANUP_MARKER
    try:
        last = marker.stat().st_mtime
    except FileNotFoundError:
        last = 0.0
    if not force and now - last < CLEANUP_INTERVAL_SECONDS:
        return 0
    marker.touch()
    os.utime(marker, (now, now))
    removed = 0
    for entry in os.scandir(directory):
        if entry.name == CLEANUP_MARKER or not entry.is_file(follow_symlinks=False):
            continue
        if not entry.name.endswith((".jsonl", ".count", ".state", ".lock", ".tmp", UNREAD)):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime <= STALE_SECONDS:
                continue
            if entry.name.endswith(".lock"):
                removed += _remove_idle_lock(entry.path, now - STALE_SECONDS)
            else:
                os.unlink(entry.path)
                removed += 1
        except FileNotFoundError:
            continue
    return removed


# -- payload -------------------------------------------------------------------------------


def _summarize_args(tool: str, args: Any) -> str:
    name = tool.strip().lower()
    mapping = args if isinstance(args, dict) else {}
    if name in ("read", "edit", "write"):
        return "file: " + first_string(mapping, "filePath", "file_path")
    if name in ("bash", "shell"):
        return first_string(mapping, "command")[:120]
    if name in ("grep", "glob"):
        return "pattern: " + first_string(mapping, "pattern")
    return _compact(args)[:120]


def build_payload(records: list[dict[str, Any]], project_store: str) -> str | None:
    """The ``get_extraction_payload`` JSON (docs/hooks.md §payload), or None when nothing is
    queued."""
    if not records:
        return None
    interactions = []
    for record in records:
        tool = record.get("tool")
        tool = tool if isinstance(tool, str) else ""
        output = record.get("output")
        output = output if isinstance(output, str) else _compact(output)
        if len(output) > PAYLOAD_OUTPUT_LIMIT:
            output = output[:PAYLOAD_OUTPUT_LIMIT] + "..."
        title = record.get("title")
        interactions.append(
            {
                "tool": tool,
                "title": title if isinstance(title, str) else "",
                "args": _summarize_args(tool, record.get("args", {})),
                "output": output,
            }
        )
    return _compact(
        {"interactions": interactions, "projectStore": project_store, "globalStore": "global"}
    )
