"""The prompt hook's recall tier served warm by ``thatch mcp`` over a unix socket.

A fresh ``flush-tools`` process spends most of its budget importing numpy and grpc and
loading the vectors; ``thatch mcp`` already holds all three. ``reminder`` asks the same
socket for its hygiene report (``{"hygiene": {"project", "directory", "duplicate"}}`` →
``{"report": <text or null>}``): the store and the embedder's model are the server's.
Each MCP process offers a "recall scan" socket per database (``scan-<sha256 of the DB
path>.sock`` beside the embedder's socket): the hook sends one JSON line
``{"prompt", "stores", "limit", "threshold"[, "engines"][, "branch"]}`` and reads one back,
``{"labels": [...]}`` (plus ``"blocks": [...]``, the engines' prompt-time blocks from the
same embedding, when ``engines`` gives their thresholds, and ``"branch"``, the branch the
labels were searched on, when the request named one) or ``{"error": "..."}``. Any
failure on the hook's side means "use the cold path"; so does a reply that does not echo
the branch asked for (a ``thatch mcp`` started before branches were sent would have
searched every branch).

This module is the hook's half (``socket_path``, the requests): it imports only the
standard library, ``thatch.common.environment`` and ``thatch.embedder``'s settings and
socket checks. ``scan_service`` is the server's half.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thatch.common.environment import socket_dir
from thatch.embedder.client.settings import MAX_SOCKET_PATH_BYTES
from thatch.embedder.client.socket_trust import check_path, peer_credentials, peer_problem

__all__ = [
    "CLIENT_DEADLINE",
    "MAX_REQUEST_BYTES",
    "ScanError",
    "marked_labels",
    "read_line",
    "request_hygiene",
    "request_marked_scan",
    "request_scan",
    "socket_path",
]

MAX_REQUEST_BYTES = 64 * 1024  # a request line, and a reply line
CONNECT_TIMEOUT = 0.2
CLIENT_DEADLINE = 1.5


class ScanError(ValueError):
    """A request the scan cannot answer; its text is the one-line error reply."""


# -- where ---------------------------------------------------------------------------------


def socket_path(db: Path | str, env: Mapping[str, str]) -> Path | None:
    """The scan socket for database ``db``; None when the path would not fit in sun_path."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(db))).hexdigest()[:16]
    path = socket_dir(env) / f"scan-{digest}.sock"
    return None if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES else path


# -- client (the hook) ---------------------------------------------------------------------


def request_scan(
    path: Path,
    prompt: str,
    stores: Sequence[str],
    limit: int,
    threshold: float | None,
    engines: Mapping[str, float | None],
    *,
    branch: str | None = None,
    deadline: float = CLIENT_DEADLINE,
) -> tuple[list[str], list[str]] | None:
    """(recall labels, engine blocks) from the serving MCP process, from its one embedding
    of the prompt; labels of ``branch`` and unscoped memories only when it is given (the
    rule of memory_recall's ``branch``). None on any failure, or from a server without
    engines or that did not apply the branch (cold path)."""
    found = request_marked_scan(
        path, prompt, stores, limit, threshold, engines, branch=branch, deadline=deadline
    )
    return None if found is None else (found[0], found[1])


def request_marked_scan(
    path: Path,
    prompt: str,
    stores: Sequence[str],
    limit: int,
    threshold: float | None,
    engines: Mapping[str, float | None],
    *,
    branch: str | None = None,
    deadline: float = CLIENT_DEADLINE,
) -> tuple[list[str], list[str], dict[str, list[str]]] | None:
    """``request_scan`` plus, per label whose anchored code changed since saved, the
    changed paths (``"changed"``; absent from an older server: none)."""
    request: dict[str, Any] = {
        "prompt": prompt,
        "stores": list(stores),
        "limit": limit,
        "threshold": threshold,
        "engines": dict(engines),
    }
    if branch is not None:
        request["branch"] = branch
    answer = _request(path, request, deadline)
    if answer is None:
        return None
    if branch is not None and answer.get("branch") != branch:
        return None
    labels, blocks = answer.get("labels"), answer.get("blocks")
    for values in (labels, blocks):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
    changed = answer.get("changed", {})
    if not isinstance(changed, dict) or not all(
        isinstance(paths, list) and all(isinstance(p, str) for p in paths)
        for paths in changed.values()
    ):
        return None
    return labels, blocks, changed  # type: ignore[return-value]


def request_hygiene(
    path: Path,
    project: str,
    directory: str,
    duplicate: str | None,
    *,
    deadline: float = CLIENT_DEADLINE,
) -> tuple[str | None] | None:
    """The session-start hygiene report for ``project`` (its checkout at ``directory``) as
    the serving MCP process computes it, as a one-tuple (``(None,)``: healthy); None on any
    failure or from a server that predates the request (cold path). ``duplicate``: the
    hook's THATCH_DUPLICATE_THRESHOLD, which the server applies instead of its own."""
    request = {"hygiene": {"project": project, "directory": directory, "duplicate": duplicate}}
    answer = _request(path, request, deadline)
    if answer is None or "report" not in answer:
        return None
    report = answer["report"]
    if report is not None and not isinstance(report, str):
        return None
    return (report,)


def _request(path: Path, request: dict[str, Any], deadline: float) -> dict[str, Any] | None:
    """One request line sent and one reply object read back, or None on any failure."""
    end = time.monotonic() + deadline
    try:
        # Only a server of our own user, in a directory nobody else can write, may see the
        # prompt and answer for our memories (the same check as the embedder's client).
        if check_path(path).problem is not None:
            return None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(os.fspath(path))
            if peer_problem(path, *peer_credentials(sock)) is not None:
                return None
            sock.settimeout(max(end - time.monotonic(), 0.01))
            sock.sendall(json.dumps(request).encode() + b"\n")
            reply = read_line(sock, end, MAX_REQUEST_BYTES)
    except (OSError, ValueError):
        return None
    try:
        answer = json.loads(reply)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def read_line(sock: socket.socket, end: float, limit: int) -> bytes:
    """Bytes up to the first newline (or EOF); ScanError past ``limit``, TimeoutError at ``end``."""
    data = bytearray()
    while b"\n" not in data:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no complete line before the deadline")
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > limit and b"\n" not in data[: limit + 1]:
            raise ScanError(f"request longer than {limit} bytes")
    return bytes(data.split(b"\n", 1)[0])


def marked_labels(
    check: Any, store: Any, matches: Sequence[Any]
) -> tuple[list[str], dict[str, list[str]]]:
    """The matches' labels, those whose anchored code changed last, and their changed
    paths by label; a check that fails marks nothing (the nudge matters more)."""
    labels = [match.memory.label for match in matches]
    if not matches:
        return labels, {}
    keys = [(match.memory.store, match.memory.slug) for match in matches]
    try:
        drift = check.drift(store, keys)
    except Exception:
        return labels, {}
    changed: dict[str, list[str]] = {}
    for match, key in zip(matches, keys, strict=True):
        if key in drift:
            changed[match.memory.label] = list(drift[key].paths)
    labels.sort(key=lambda label: label in changed)
    return labels, changed
