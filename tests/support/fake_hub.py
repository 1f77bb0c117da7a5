"""A local HTTP server standing in for the Hugging Face hub (bound to 127.0.0.1 only).

It answers the calls huggingface_hub 2.x makes for ``HfApi.model_info`` and
``hf_hub_download``:

- ``GET /api/models/<org>/<name>[/revision/<rev>]`` -> ``{"id", "sha", "siblings"}``
- ``HEAD|GET /<org>/<name>/resolve/<rev>/<path>`` -> the file, with ``X-Repo-Commit``,
  ``ETag`` (sha256 of the content) and ``Content-Length``

Unknown repos get 404 with ``X-Error-Code: RepoNotFound``, unknown revisions
``RevisionNotFound``, missing files ``EntryNotFound``, like the real hub. Every request is
recorded as ``(method, path)`` so tests can assert what was (not) downloaded.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, Path], commit: str = COMMIT) -> None:
        self.repos = repos
        self.commit = commit
        self.requests: list[tuple[str, str]] = []
        self.gone: set[str] = set()  # files listed but answering 404 (a broken upload)
        self.failing: dict[str, int] = {}  # files answering this status (a hub in trouble)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}"

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))

    def seen(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.requests)

    def downloaded(self) -> set[str]:
        """Repo-relative names of files fetched with GET."""
        names = set()
        for method, path in self.seen():
            parts = path.split("/", 5)  # '', org, name, 'resolve', rev, file
            if method == "GET" and len(parts) == 6 and parts[3] == "resolve":
                names.add(parts[5])
        return names

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def linked_repo(source: Path, repo: Path, replaced: dict[str, bytes]) -> Path:
    """A repo at ``repo`` of source's files (linked, not copied: models are large), but with
    the files named in ``replaced`` holding the content given (a broken upload)."""
    for path in source.rglob("*"):
        if path.is_file():
            (repo / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (repo / path.relative_to(source)).symlink_to(path)
    for name, content in replaced.items():
        (repo / name).unlink()
        (repo / name).write_bytes(content)
    return repo


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _handler_for(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # keep test output clean

        def do_HEAD(self) -> None:
            self._answer(send_body=False)

        def do_GET(self) -> None:
            self._answer(send_body=True)

        def _answer(self, *, send_body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.record(self.command, path)
            parts = path.strip("/").split("/")
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                repo = "/".join(parts[2:4])
                revision = parts[5] if len(parts) >= 6 and parts[4] == "revision" else "main"
                self._model_info(repo, revision, send_body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                repo = "/".join(parts[:2])
                self._file(repo, parts[3], "/".join(parts[4:]), send_body)
            else:
                self._error(404, "EntryNotFound", send_body)

        def _model_info(self, repo: str, revision: str, send_body: bool) -> None:
            root = hub.repos.get(repo)
            if root is None:
                return self._error(404, "RepoNotFound", send_body)
            if revision not in ("main", hub.commit):
                return self._error(404, "RevisionNotFound", send_body)
            body = json.dumps(
                {
                    "id": repo,
                    "sha": hub.commit,
                    "siblings": [{"rfilename": name} for name in _files(root)],
                }
            ).encode()
            self._send(200, body, {"Content-Type": "application/json"}, send_body)

        def _file(self, repo: str, revision: str, name: str, send_body: bool) -> None:
            root = hub.repos.get(repo)
            if root is None:
                return self._error(404, "RepoNotFound", send_body)
            if revision not in ("main", hub.commit):
                return self._error(404, "RevisionNotFound", send_body)
            if name in hub.failing:
                return self._error(hub.failing[name], "Internal", send_body)
            target = root / name
            if ".." in Path(name).parts or not target.is_file() or name in hub.gone:
                return self._error(404, "EntryNotFound", send_body)
            data = target.read_bytes()
            headers = {
                "X-Repo-Commit": hub.commit,
                "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                "Content-Type": "application/octet-stream",
            }
            self._send(200, data, headers, send_body)

        def _error(self, status: int, code: str, send_body: bool) -> None:
            body = json.dumps({"error": code}).encode()
            headers = {"X-Error-Code": code, "Content-Type": "application/json"}
            self._send(status, body, headers, send_body)

        def _send(self, status: int, body: bytes, headers: dict[str, str], send: bool) -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send:
                self.wfile.write(body)

    return Handler
