"""A real ``thatch ui`` server for tests: uvicorn on 127.0.0.1 (ephemeral port) in a thread,
driven over HTTP with the standard library (no test client)."""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from thatch.frontend.tools.context import ToolContext
from thatch.frontend.ui.app import build_app
from thatch.frontend.ui.security import Guard
from thatch.frontend.ui.server import bind, bound_port, make_server, serve

CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass(frozen=True)
class Page:
    status: int
    headers: Mapping[str, str]  # lower-case names; Set-Cookie values joined by "\n"
    body: str

    def csrf(self) -> str:
        found = CSRF_FIELD.search(self.body)
        assert found is not None, self.body[:2000]
        return found.group(1)


@dataclass
class UiClient:
    """Speaks HTTP/1.1 to the server; keeps the cookie the server set (like a browser)."""

    port: int
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def request(
        self,
        method: str,
        path: str,
        *,
        form: Mapping[str, str] | None = None,
        host: str | None = None,
        cookies: bool = True,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> Page:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            sent = {"Host": host if host is not None else self.host}
            if cookies and self.cookies:
                sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            if form is not None:
                body = urlencode(form).encode()
                sent["Content-Type"] = "application/x-www-form-urlencoded"
            sent.update(headers or {})
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            data = response.read().decode("utf-8")
            got: dict[str, str] = {}
            for name, value in response.getheaders():
                key = name.lower()
                got[key] = f"{got[key]}\n{value}" if key in got else value
            for line in response.headers.get_all("set-cookie") or []:
                name, _, rest = line.partition("=")
                self.cookies[name.strip()] = rest.split(";", 1)[0]
            return Page(response.status, got, data)
        finally:
            conn.close()

    def get(self, path: str, **params: str) -> Page:
        query = urlencode(params)
        return self.request("GET", path + ("?" + query if query else ""))

    def post(self, path: str, form: Mapping[str, str]) -> Page:
        return self.request("POST", path, form=form)

    def stream(
        self, path: str, *, cookies: bool = True, last_event_id: str | None = None
    ) -> EventStream:
        """A GET left open, read as server-sent events (as a browser's EventSource)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", self.host)
        conn.putheader("Accept", "text/event-stream")
        if last_event_id is not None:
            conn.putheader("Last-Event-ID", last_event_id)
        if cookies and self.cookies:
            conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        conn.endheaders()
        return EventStream(conn, conn.getresponse())


@dataclass
class EventStream:
    """An open event stream; ``close`` drops the connection (a browser leaving)."""

    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse

    @property
    def status(self) -> int:
        return self.response.status

    def header(self, name: str) -> str | None:
        return self.response.getheader(name)

    def next_block(self) -> dict[str, str]:
        """The next block up to a blank line, as field → value (a comment is ``""``)."""
        fields: dict[str, str] = {}
        while True:
            line = self.response.readline().decode("utf-8")
            if not line:
                raise EOFError("the stream ended")
            line = line.rstrip("\n")
            if not line:
                if fields:
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value

    def next_event(self) -> dict[str, str]:
        """The next block that is an event (skipping ``retry:`` and keep-alive comments)."""
        while True:
            block = self.next_block()
            if "data" in block:
                return block

    def close(self) -> None:
        self.conn.close()


@contextmanager
def running_ui(ctx: ToolContext, token: str | None = None) -> Iterator[tuple[UiClient, Guard]]:
    """The app over ``ctx`` served by uvicorn in a thread; stopped (and joined) on exit.

    The socket listens before the thread starts, so requests simply wait for uvicorn.
    """
    sock = bind("127.0.0.1", 0)
    guard = Guard.for_bind("127.0.0.1", bound_port(sock), token)
    stopping = threading.Event()
    server = make_server(build_app(ctx, guard, stopping), stopping)
    thread = threading.Thread(target=serve, args=(server, sock), daemon=True)
    thread.start()
    try:
        yield UiClient(guard.port), guard
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "the ui server did not stop"


@contextmanager
def run_ui_process(env: Mapping[str, str], *args: str) -> Iterator[tuple[UiClient, str]]:
    """``thatch ui --port 0 --no-browser [args]`` as a process, with the path of its printed
    URL (the token in it); stopped with Ctrl-C, which must end it cleanly."""
    thatch = Path(sys.executable).parent / "thatch"
    process = subprocess.Popen(
        [str(thatch), "ui", "--port", "0", "--no-browser", *args],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the socket listens
        assert line.startswith("thatch ui: http://127.0.0.1:"), (line, process.stderr)
        url = urlsplit(line.split(": ", 1)[1].strip())
        assert url.port is not None
        yield UiClient(url.port), f"{url.path}?{url.query}"
    finally:
        process.send_signal(signal.SIGINT)
        try:
            _out, err = process.communicate(timeout=30)  # also closes the pipes
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert process.returncode == 0, err
