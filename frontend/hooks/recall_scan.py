"""The prompt hook's recall tier served warm by ``thatch mcp`` over a unix socket.

A fresh ``flush-tools`` process spends most of its budget importing numpy and grpc and
loading the vectors; ``thatch mcp`` already holds all three. Each MCP process offers a
"recall scan" socket per database (``scan-<sha256 of the DB path>.sock`` beside the
embedder's socket): the hook sends one JSON line
``{"prompt", "stores", "limit", "threshold"[, "engines"][, "branch"]}`` and reads one back,
``{"labels": [...]}`` (plus ``"blocks": [...]``, the engines' prompt-time blocks from the
same embedding, when ``engines`` gives their thresholds, and ``"branch"``, the branch the
labels were searched on, when the request named one) or ``{"error": "..."}``. Any
failure on the hook's side means "use the cold path"; so does a reply that does not echo
the branch asked for (a ``thatch mcp`` started before branches were sent would have
searched every branch).

The client half (``socket_path``, ``request_labels``) imports only the standard library,
``thatch.common.environment`` and ``thatch.embedder.settings``; the server half imports its
heavy parts lazily.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from thatch.common.environment import default_db_path, socket_dir
from thatch.embedder.settings import MAX_SOCKET_PATH_BYTES
from thatch.embedder.socket_trust import (
    check_path,
    directory_problem,
    peer_credentials,
    peer_problem,
    tighten_own_directory,
)

MAX_REQUEST_BYTES = 64 * 1024
MAX_PROMPT_CHARS = 2000
MAX_LIMIT = 100
CONNECT_TIMEOUT = 0.2
CLIENT_DEADLINE = 1.5
CONNECTION_TIMEOUT = 2.0
EMBED_TIMEOUT = 1.5
PROBE_TIMEOUT = 0.2
MAX_CONNECTIONS = 8


class ScanError(ValueError):
    """A request the scan cannot answer; its text is the one-line error reply."""


# -- where ---------------------------------------------------------------------------------


def socket_path(db: Path | str, env: Mapping[str, str]) -> Path | None:
    """The scan socket for database ``db``; None when the path would not fit in sun_path."""
    digest = hashlib.sha256(os.fsencode(os.path.realpath(db))).hexdigest()[:16]
    path = socket_dir(env) / f"scan-{digest}.sock"
    return None if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES else path


# -- client (the hook) ---------------------------------------------------------------------


def request_labels(
    path: Path,
    prompt: str,
    stores: Sequence[str],
    limit: int,
    threshold: float | None,
    *,
    deadline: float = CLIENT_DEADLINE,
) -> list[str] | None:
    """The labels the serving MCP process found, or None on any failure (use the cold path)."""
    request = {"prompt": prompt, "stores": list(stores), "limit": limit, "threshold": threshold}
    answer = _request(path, request, deadline)
    labels = answer.get("labels") if answer is not None else None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        return None
    return labels


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
            reply = _read_line(sock, end, MAX_REQUEST_BYTES)
    except (OSError, ValueError):
        return None
    try:
        answer = json.loads(reply)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _read_line(sock: socket.socket, end: float, limit: int) -> bytes:
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


# -- answering -----------------------------------------------------------------------------


class Searcher(Protocol):
    """What answering needs: embed a query and search the stores (``ToolContext`` parts)."""

    def labels(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        *,
        branch: str | None = None,
    ) -> list[str]:
        """Labels scoring ≥ threshold (None: the embedding model's default), best first,
        of ``branch`` and unscoped memories when given; raises with a one-line message on
        failure."""
        ...


class ContextSearcher:
    """``Searcher`` over a ToolContext's Store and embedder: no telemetry, archived excluded."""

    # Plain classes, not dataclasses, here: building those costs the hook milliseconds.
    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx  # a ToolContext; typed loosely so the hook never imports it

    def labels(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        *,
        branch: str | None = None,
    ) -> list[str]:
        from thatch.embedder.encoder import Kind

        result = self.ctx.embedder.embed([prompt], Kind.QUERY, timeout=EMBED_TIMEOUT, start_wait=0)
        vector = result.vectors[0]
        matches = self.ctx.store.search(stores, vector, text=prompt, branch=branch, limit=limit)
        cut = nudge_threshold(threshold, result.model_id)
        return [match.memory.label for match in matches if match.score >= cut]

    def scan(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        engines: Mapping[str, float | None],
        *,
        branch: str | None = None,
    ) -> tuple[list[str], list[str]]:
        """Labels as ``labels``, plus the engines' prompt-time blocks from the same vector."""
        from thatch.embedder.encoder import Kind
        from thatch.frontend.engine_thresholds import resolve
        from thatch.frontend.tools.engine_tools import prompt_blocks

        result = self.ctx.embedder.embed([prompt], Kind.QUERY, timeout=EMBED_TIMEOUT, start_wait=0)
        vector = result.vectors[0]
        matches = self.ctx.store.search(stores, vector, text=prompt, branch=branch, limit=limit)
        cut = nudge_threshold(threshold, result.model_id)
        labels = [match.memory.label for match in matches if match.score >= cut]
        blocks = prompt_blocks(self.ctx.store, stores, vector, resolve(engines, result.model_id))
        return labels, blocks

    def scan_marked(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        engines: Mapping[str, float | None],
        *,
        branch: str | None = None,
    ) -> tuple[list[str], list[str], dict[str, list[str]]]:
        """``scan`` with the labels' anchors checked (docs/tools.md §code-anchors): the
        labels whose code changed come after the others, with their changed paths."""
        from thatch.embedder.encoder import Kind
        from thatch.frontend.engine_thresholds import resolve
        from thatch.frontend.tools.engine_tools import prompt_blocks

        result = self.ctx.embedder.embed([prompt], Kind.QUERY, timeout=EMBED_TIMEOUT, start_wait=0)
        vector = result.vectors[0]
        matches = self.ctx.store.search(stores, vector, text=prompt, branch=branch, limit=limit)
        cut = nudge_threshold(threshold, result.model_id)
        kept = [match for match in matches if match.score >= cut]
        labels, changed = marked_labels(self.ctx.anchor_check, self.ctx.store, kept)
        blocks = prompt_blocks(self.ctx.store, stores, vector, resolve(engines, result.model_id))
        return labels, blocks, changed


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


def nudge_threshold(threshold: float | None, model: str) -> float:
    """The hook's override when it sent one, else the default of the model that embedded the
    prompt (the hook cannot know which model this process's embedder serves)."""
    if threshold is not None:
        return threshold
    from thatch.embedder.models.thresholds import BUILT_IN, defaults_for

    return (defaults_for(model) or BUILT_IN).recall_nudge


def parse_engines(line: bytes) -> dict[str, float | None] | None:
    """The request's engine thresholds (``{"prediction": t, "behavior": t}``, a null t for
    the embedding model's default), None when it asks for no engine blocks; ScanError when
    malformed."""
    request = json.loads(line)  # parse_request has accepted the line already
    engines = request.get("engines")
    if engines is None:
        return None
    if not isinstance(engines, dict) or set(engines) != {"prediction", "behavior"}:
        raise ScanError('"engines" must map prediction and behavior to thresholds')
    for value in engines.values():
        if value is not None and (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or math.isnan(value)
            or not 0.0 <= value <= 1.0
        ):
            raise ScanError('"engines" thresholds must be numbers from 0 to 1')
    return {name: None if value is None else float(value) for name, value in engines.items()}


def parse_branch(line: bytes) -> str | None:
    """The request's branch (search it plus unscoped memories), None for every branch;
    ScanError when malformed."""
    branch = json.loads(line).get("branch")  # parse_request has accepted the line already
    if branch is None:
        return None
    if not isinstance(branch, str) or not branch:
        raise ScanError('"branch" must be a non-empty string or null')
    return branch


def parse_request(line: bytes) -> tuple[str, list[str], int, float | None]:
    """(prompt, stores, limit, threshold) from one request line, or ScanError saying why."""
    try:
        request = json.loads(line)
    except ValueError:
        raise ScanError("request is not valid JSON") from None
    if not isinstance(request, dict):
        raise ScanError("request must be a JSON object")
    prompt = request.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ScanError('"prompt" must be a non-empty string')
    stores = request.get("stores")
    if (
        not isinstance(stores, list)
        or not stores
        or not all(isinstance(name, str) and name for name in stores)
    ):
        raise ScanError('"stores" must be a non-empty list of store names')
    limit = request.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ScanError(f'"limit" must be an integer from 1 to {MAX_LIMIT}')
    threshold = request.get("threshold")
    if threshold is None:  # the embedding model's default
        return prompt[:MAX_PROMPT_CHARS], list(dict.fromkeys(stores)), limit, None
    if (
        not isinstance(threshold, int | float)
        or isinstance(threshold, bool)
        or math.isnan(threshold)
        or not 0.0 <= threshold <= 1.0
    ):
        raise ScanError('"threshold" must be a number from 0 to 1')
    return prompt[:MAX_PROMPT_CHARS], list(dict.fromkeys(stores)), limit, float(threshold)


def answer(line: bytes, searcher: Searcher) -> dict[str, Any]:
    """The reply object for one request line; every failure becomes ``{"error": ...}``."""
    try:
        prompt, stores, limit, threshold = parse_request(line)
        engines = parse_engines(line)
        branch = parse_branch(line)
        scope = {} if branch is None else {"branch": branch}  # echoed: the hook checks it
        marked = getattr(searcher, "scan_marked", None)
        if engines is not None and marked is not None:
            labels, blocks, changed = marked(
                prompt, stores, limit, threshold, engines, branch=branch
            )
            return {"labels": labels, "blocks": blocks, "changed": changed, **scope}
        scan = getattr(searcher, "scan", None)
        if engines is not None and scan is not None:
            labels, blocks = scan(prompt, stores, limit, threshold, engines, branch=branch)
            return {"labels": labels, "blocks": blocks, **scope}
        return {"labels": searcher.labels(prompt, stores, limit, threshold, branch=branch), **scope}
    except Exception as error:  # one bad request must not take the service down
        text = " ".join(str(error).split()) or type(error).__name__
        return {"error": text}


# -- server (inside ``thatch mcp``) ---------------------------------------------------------


def _warn(message: str) -> None:
    print(f"[thatch] recall scan not served: {message}", file=sys.stderr, flush=True)


def _debug(env: Mapping[str, str], message: str) -> None:
    if env.get("THATCH_DEBUG") == "1":
        print(f"[thatch] recall scan: {message}", file=sys.stderr, flush=True)


def _claim(path: Path) -> str | None:
    """Clear ``path`` for binding; a reason (not to bind) when something live holds it."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISSOCK(mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(PROBE_TIMEOUT)
            try:
                probe.connect(os.fspath(path))
                return "another thatch mcp already serves this database"
            except ConnectionRefusedError:
                pass  # a stale socket left by a crash
            except FileNotFoundError:
                return None
            except (TimeoutError, BlockingIOError):
                return f"{path} is busy (not replacing a live socket)"
            except OSError as error:
                if error.errno in (errno.EAGAIN, errno.EINPROGRESS):
                    return f"{path} is busy (not replacing a live socket)"
                raise
    path.unlink(missing_ok=True)
    return None


def _bind(path: Path) -> socket.socket:
    from thatch.embedder.client.autostart import make_private_dir

    make_private_dir(path.parent)
    tighten_own_directory(path.parent)  # always thatch's own socket directory
    problem = directory_problem(path.parent)
    if problem is not None:
        raise PermissionError(problem)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o077)
    try:
        sock.bind(os.fspath(path))
        os.chmod(path, 0o600)
        sock.listen(16)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(previous)
    return sock


class ScanService:
    """One process's scan socket: bound and served by a daemon thread, removed by ``close``."""

    def __init__(self, path: Path, searcher: Searcher, env: Mapping[str, str]) -> None:
        self.path = path
        self.searcher = searcher
        self.env = env
        self.ready = threading.Event()  # set once the socket is bound or given up on
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._closed = False
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="thatch-recall-scan", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        try:
            if not self._open():
                return
        except Exception as error:  # the MCP server goes on without the scan
            _warn(f"{self.path}: {getattr(error, 'strerror', None) or error}")
            return
        finally:
            self.ready.set()
        self._serve()

    def _open(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            reason = _claim(self.path)
            if reason is not None:
                _debug(self.env, reason)
                return False
            self._sock = _bind(self.path)
            self._inode = self.path.stat().st_ino
        _debug(self.env, f"serving {self.path}")
        return True

    def _serve(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._closed:
            try:
                conn, _ = sock.accept()
            except OSError:
                if self._closed:
                    return
                time.sleep(0.05)  # e.g. out of file descriptors: back off, keep serving
                continue
            if not self._slots.acquire(blocking=False):
                self._reply(conn, {"error": "recall scan busy"})
                continue
            threading.Thread(
                target=self._handle, args=(conn,), name="thatch-recall-scan-conn", daemon=True
            ).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            end = time.monotonic() + CONNECTION_TIMEOUT
            try:
                line = _read_line(conn, end, MAX_REQUEST_BYTES)
            except ScanError as error:
                self._reply(conn, {"error": str(error)})
                return
            except OSError:
                conn.close()  # timed out or went away: nobody to answer
                return
            if not line.strip():
                conn.close()  # a liveness probe connects and leaves without asking
                return
            self._reply(conn, answer(line, self.searcher))
        finally:
            self._slots.release()

    @staticmethod
    def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(CONNECTION_TIMEOUT)
            conn.sendall(json.dumps(reply, ensure_ascii=False).encode() + b"\n")

    def close(self) -> None:
        """Stop serving; remove the socket file only while it is still the one we bound."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
            if self._inode is not None:
                with contextlib.suppress(OSError):
                    if self.path.lstat().st_ino == self._inode:
                        self.path.unlink()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() in the serving thread
            sock.close()


def start_scan_service(ctx: Any) -> ScanService | None:
    """Serve the recall scan for ``ctx``'s database in the background; never raises."""
    try:
        db = ctx.store.path or default_db_path(ctx.env)
        path = socket_path(db, ctx.env)
        if path is None:
            _debug(ctx.env, "socket path too long")
            return None
        service = ScanService(path, ContextSearcher(ctx), ctx.env)
        service.start()
    except Exception as error:  # the MCP server matters more than the scan
        _warn(str(error))
        return None
    return service
