"""The server's half of the recall scan (``recall_scan``): inside ``thatch mcp``, answer
the prompt hook's request lines from this process's Store and embedder.

One socket per database, bound by the first ``thatch mcp`` for it and served by a daemon
thread (at most ``MAX_CONNECTIONS`` requests at once); its heavy parts (the encoder, the
engines) are imported when a request needs them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from thatch.common.environment import default_db_path
from thatch.embedder.client.socket_trust import directory_problem, tighten_own_directory
from thatch.frontend.hooks.recall_scan import (
    MAX_REQUEST_BYTES,
    ScanError,
    marked_labels,
    read_line,
    socket_path,
)

__all__ = [
    "CONNECTION_TIMEOUT",
    "DUPLICATE_VARIABLE",
    "EMBED_TIMEOUT",
    "INFO_DEADLINE",
    "MAX_CONNECTIONS",
    "MAX_LIMIT",
    "MAX_PROMPT_CHARS",
    "PROBE_TIMEOUT",
    "ContextSearcher",
    "ScanService",
    "Searcher",
    "answer",
    "nudge_threshold",
    "parse_branch",
    "parse_engines",
    "parse_hygiene",
    "parse_request",
    "start_scan_service",
]


MAX_PROMPT_CHARS = 2000
MAX_LIMIT = 100
CONNECTION_TIMEOUT = 2.0
EMBED_TIMEOUT = 1.5
PROBE_TIMEOUT = 0.2
MAX_CONNECTIONS = 8
INFO_DEADLINE = 0.3  # the reminder's wait for the embedder's model id
DUPLICATE_VARIABLE = "THATCH_DUPLICATE_THRESHOLD"

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

    def _kept(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        branch: str | None,
    ) -> tuple[Any, str, list[Any]]:
        """The prompt's vector, its model and the matches at or over the nudge threshold."""
        from thatch.embedder.client.kind import Kind

        result = self.ctx.embedder.embed([prompt], Kind.QUERY, timeout=EMBED_TIMEOUT, start_wait=0)
        vector = result.vectors[0]
        matches = self.ctx.store.search(stores, vector, text=prompt, branch=branch, limit=limit)
        cut = nudge_threshold(threshold, result.model_id)
        return vector, result.model_id, [match for match in matches if match.score >= cut]

    def _blocks(
        self, stores: list[str], vector: Any, model: str, engines: Mapping[str, float | None]
    ) -> list[str]:
        from thatch.frontend.engine_thresholds import resolve
        from thatch.frontend.tools.engine_tools import prompt_blocks

        return prompt_blocks(self.ctx.store, stores, vector, resolve(engines, model))

    def labels(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        *,
        branch: str | None = None,
    ) -> list[str]:
        _, _, kept = self._kept(prompt, stores, limit, threshold, branch)
        return [match.memory.label for match in kept]

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
        vector, model, kept = self._kept(prompt, stores, limit, threshold, branch)
        labels = [match.memory.label for match in kept]
        return labels, self._blocks(stores, vector, model, engines)

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
        vector, model, kept = self._kept(prompt, stores, limit, threshold, branch)
        labels, changed = marked_labels(self.ctx.anchor_check, self.ctx.store, kept)
        return labels, self._blocks(stores, vector, model, engines), changed

    def hygiene(self, project: str, directory: Path, duplicate: str | None) -> str | None:
        """The reminder's hygiene report (``prompt_hooks.reminder_output``'s cold path, from
        this process's store and embedder): the hook's own duplicate threshold applies."""
        from thatch.frontend.tools.active_model import active_model
        from thatch.frontend.tools.hygiene import hygiene_report

        env = {k: v for k, v in self.ctx.env.items() if k != DUPLICATE_VARIABLE}
        if duplicate:
            env[DUPLICATE_VARIABLE] = duplicate
        model = active_model(env, timeout=INFO_DEADLINE, start_if_absent=True)
        if self.ctx.store.pending_count(up_to=0):  # any at all: flat in the backlog's size
            self.ctx.pending_fill.fill_opportunistically()
        return hygiene_report(self.ctx.store, project, directory, model, env=env)


def nudge_threshold(threshold: float | None, model: str) -> float:
    """The hook's override when it sent one, else the default of the model that embedded the
    prompt (the hook cannot know which model this process's embedder serves)."""
    if threshold is not None:
        return threshold
    from thatch.frontend.thresholds import BUILT_IN, defaults_for

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


def parse_hygiene(line: bytes) -> tuple[str, Path, str | None] | None:
    """(project store, project directory, duplicate threshold variable) of a hygiene
    request, None for a recall request; ScanError when malformed."""
    try:
        request = json.loads(line)
    except ValueError:
        return None  # parse_request says why
    if not isinstance(request, dict) or "hygiene" not in request:
        return None
    fields = request["hygiene"]
    if not isinstance(fields, dict):
        raise ScanError('"hygiene" must be an object')
    project, directory, duplicate = (fields.get(k) for k in ("project", "directory", "duplicate"))
    if not isinstance(project, str) or not project:
        raise ScanError('"project" must be a non-empty string')
    if not isinstance(directory, str) or not os.path.isabs(directory):
        raise ScanError('"directory" must be an absolute path')
    if duplicate is not None and not isinstance(duplicate, str):
        raise ScanError('"duplicate" must be a string or null')
    return project, Path(directory), duplicate


def answer(line: bytes, searcher: Searcher) -> dict[str, Any]:
    """The reply object for one request line; every failure becomes ``{"error": ...}``."""
    try:
        hygiene = parse_hygiene(line)
        report = getattr(searcher, "hygiene", None)
        if hygiene is not None and report is not None:
            return {"report": report(*hygiene)}
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


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _prepare_dir(directory: Path) -> None:
    from thatch.embedder.client.autostart import make_private_dir

    make_private_dir(directory)
    tighten_own_directory(directory)  # always thatch's own socket directory
    problem = directory_problem(directory)
    if problem is not None:
        raise PermissionError(problem)


def _bind(path: Path) -> socket.socket:
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
        self._lock_fd: int | None = None
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
            _prepare_dir(self.path.parent)
            fd = os.open(_lock_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                taken = self._take(fd)
            except BaseException:
                os.close(fd)
                raise
            if taken is None:
                os.close(fd)
                return False
            self._sock, self._inode = taken
            self._lock_fd = fd
        _debug(self.env, f"serving {self.path}")
        return True

    def _take(self, fd: int) -> tuple[socket.socket, int] | None:
        """The socket bound at the path and its inode, ``fd``'s lock held for the server's
        life (nobody else claims, binds or unlinks the path meanwhile); None when another
        server has the path."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _debug(self.env, "another thatch mcp already serves this database")
            return None
        reason = _claim(self.path)  # still probes: a server of an older release
        if reason is not None:
            _debug(self.env, reason)
            return None
        try:
            sock = _bind(self.path)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            # A server of an older release (no lock) bound it after the probe: it serves.
            _debug(self.env, "another thatch mcp bound it first")
            return None
        try:
            return sock, self.path.lstat().st_ino
        except BaseException:
            sock.close()
            raise

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
                line = read_line(conn, end, MAX_REQUEST_BYTES)
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
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # after the unlink: the next server may claim now
                self._lock_fd = None
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
