"""Real opencode (1.18.33) as a server: the plugin's direct extraction and chat wake.

``opencode run`` exits when its session goes idle, so the work the plugin does at idle (a
``thatch-extraction`` child session, a chat wake) needs a host that keeps running: one
``opencode serve`` for the module, driven through its HTTP API (``POST /session``,
``POST /session/<id>/message``, which answers when the turn has ended). Each test has
its own session; the plugin's back-off after a failed child is per session.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.hostkit import (
    HOST_TIMEOUT,
    HookCall,
    Sandbox,
    make_sandbox,
    opencode_config,
    opencode_env,
)
from tests.hosts.model_server import (
    Matcher,
    ModelRequest,
    ModelServer,
    Turn,
    after,
    both,
    call,
    fail,
    fresh,
    say,
)
from tests.support.polling import poll

EXTRACTION = "queued for fact extraction"
FETCH = "thatch_get_extraction_payload"
DONE = "thatch_extraction_done"
REMEMBER = "thatch_memory_remember"
WAKE = "[thatch] System notification, not user input: 1 unread chat message(s) from person-"
WAIT = 90  # generous: every wait below ends on a condition


@dataclass
class Served:
    sandbox: Sandbox
    url: str
    server: ModelServer

    def http(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, method=method, data=data, headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=HOST_TIMEOUT) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def new_session(self) -> str:
        return str(self.http("POST", "/session", {})["id"])

    def prompt(self, session: str, text: str) -> Any:
        """One user prompt; answers once the session's turn has ended."""
        body = {"parts": [{"type": "text", "text": text}]}
        return self.http("POST", f"/session/{session}/message", body)

    def children(self, session: str) -> list[dict[str, Any]]:
        return [s for s in self.http("GET", "/session") if s.get("parentID") == session]

    def state_file(self, session: str) -> Path:
        return self.sandbox.queue_dir / f"{session}.state"

    def hooks(self, command: str, session: str, since_ns: int = 0) -> list[HookCall]:
        """Finished runs of a thatch command for ``session`` that started after ``since_ns``
        (the recording shim names each run's files by its start in ns)."""
        found = []
        for path in self.sandbox.hook_log.glob(f"*-{command}.in"):
            started, _, name = path.name[: -len(".in")].split("-", 2)
            if name != command or int(started) <= since_ns:
                continue
            if not path.with_suffix(".rc").exists() or not path.read_text().strip():
                continue
            hook = HookCall(
                command,
                path.read_text(),
                path.with_suffix(".out").read_text(),
                path.with_suffix(".err").read_text(),
            )
            if hook.payload().get("session_id") == session:
                found.append((int(started), hook))
        return [hook for _, hook in sorted(found, key=lambda pair: pair[0])]

    def child_ends(self, session: str) -> list[str]:
        """How the session's extraction children ended, by the plugin's thatch calls."""
        ends = [
            (self.hooks(command, session), command)
            for command in ("extraction-complete", "extraction-requeue")
        ]
        return [command for hooks, command in ends for _ in hooks]

    def queued_tools(self, session: str) -> list[str]:
        return [r["tool"] for r in self.sandbox.queued() if r["sessionID"] == session]


def user(tag: str) -> Matcher:
    """The agent of the session whose prompts carry ``tag`` (title requests have no tools)."""
    return lambda r: bool(r.tool_names()) and any(tag in t for t in r.user_texts())


def extractor(session: str) -> Matcher:
    """The plugin's extraction child working for ``session``."""
    marker = f'{EXTRACTION} from session "{session}"'
    return lambda r: bool(r.tool_names()) and any(marker in t for t in r.user_texts())


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    host_bin: Path,
    host_embedder: Any,
    minilm_dir: Path,
    model_server: ModelServer,
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("opencode-serve")
    home = tmp / "home"
    home.mkdir()
    extra = {
        **opencode_env(),
        "THATCH_MODEL": str(minilm_dir),
        "THATCH_EMBEDDER_ADDR": host_embedder.address,
    }
    sandbox = make_sandbox(tmp, home, host_bin, extra)
    setup = sandbox.thatch("setup", "--opencode")
    assert setup.returncode == 0, (setup.stdout, setup.stderr)
    opencode_config(sandbox, model_server.url, host_bin)
    model_server.run([])
    log_path = tmp / "opencode-serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            ["opencode", "serve", "--hostname", "127.0.0.1", "--port", "0"],
            cwd=sandbox.project,
            env=sandbox.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        url = ""

        def listening() -> bool:
            nonlocal url
            for word in log_path.read_text().split():
                if word.startswith("http://127.0.0.1:"):
                    url = word.rstrip("/")
                    return True
            return proc.poll() is not None

        assert poll(listening, WAIT) and url, log_path.read_text()[-4000:]
        result = Served(sandbox, url, model_server)

        def answers() -> bool:
            try:
                result.http("GET", "/session")
            except (urllib.error.URLError, ConnectionError):
                return False
            return True

        assert poll(answers, WAIT), log_path.read_text()[-4000:]
        yield result
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_an_idle_session_is_extracted_by_a_child_while_it_works_on(served: Served) -> None:
    sandbox, server = served.sandbox, served.server
    session = served.new_session()
    seen_children: list[dict[str, Any]] = []
    run4_at = [0]

    def parent_idle_handled(request: ModelRequest) -> bool:
        """The parent's idle after RUN4 was handled while this child still ran (its
        chat-notify runs after the plugin saw the job and started no second child)."""
        return poll(lambda: bool(served.hooks("chat-notify", session, run4_at[0])), WAIT)

    child = extractor(session)
    server.run(
        [
            Turn(
                both(user("S1-RUN1"), fresh),
                call("bash", command="cat widgets.py", description="Show widgets"),
                name="work1",
            ),
            Turn(both(user("S1-RUN1"), after("bash")), say("Done."), name="answer1"),
            Turn(both(child, fresh), call(FETCH, session_id=session), name="fetch"),
            Turn(
                both(child, after(FETCH)),
                call(
                    REMEMBER,
                    label="spin needs an even n",
                    content="In acme/widgets, widgets.spin(n) needs an even n.",
                    confidence=7,
                ),
                name="extract",
                after_turn="answer4",
            ),
            Turn(
                both(child, after(REMEMBER), parent_idle_handled),
                call(DONE, session_id=session),
                name="done",
            ),
            Turn(both(child, after(DONE)), say("Extraction complete."), name="child-answer"),
            Turn(
                both(user("S1-RUN4"), fresh),
                call("bash", command="git log --oneline", description="Show history"),
                name="work4",
            ),
            Turn(both(user("S1-RUN4"), after("bash")), say("Done 4."), name="answer4"),
        ]
    )
    served.prompt(session, "S1-RUN1: look at widgets.py.")

    def fetched() -> bool:
        seen_children.extend(served.children(session))
        return "fetch" in server.matched() and served.state_file(session).exists()

    assert poll(fetched, WAIT), server.describe()
    run4_at[0] = time.time_ns()
    served.prompt(session, "S1-RUN4: show the history.")
    assert poll(
        lambda: "child-answer" in server.matched() and not served.children(session), WAIT
    ), server.describe()
    assert poll(lambda: served.child_ends(session), WAIT)
    assert served.child_ends(session) == ["extraction-complete"]

    assert [(c["parentID"], c["title"]) for c in seen_children[:1]] == [
        (session, "thatch-extraction")
    ], seen_children
    matched = server.matched()
    assert sorted(matched) == sorted(
        ["work1", "answer1", "fetch", "extract", "work4", "answer4", "done", "child-answer"]
    ), server.describe()
    assert matched.index("fetch") < matched.index("work4") < matched.index("done"), matched
    rows = [r for r in sandbox.memories() if r["label"] == "spin needs an even n"]
    assert [(r["model"], r["embedding_bytes"]) for r in rows] == [
        ("sentence-transformers/all-MiniLM-L6-v2", 384 * 4)
    ]
    queued = [r for r in sandbox.queued() if r["sessionID"] == session]
    assert [(r["tool"], r["title"]) for r in queued] == [("bash", "git log --oneline")]
    assert not served.state_file(session).exists()


def test_a_failing_child_requeues_and_the_nudge_takes_over(served: Served) -> None:
    server = served.server
    session = served.new_session()
    child = extractor(session)
    server.run(
        [
            Turn(
                both(user("S2-RUN1"), fresh),
                call("bash", command="cat README.md", description="Show the README"),
                name="work1",
            ),
            Turn(both(user("S2-RUN1"), after("bash")), say("Done."), name="answer1"),
            Turn(both(child, fresh), call(FETCH, session_id=session), name="fetch"),
            Turn(both(child, after(FETCH)), fail(400), name="fail", repeat=True),
            Turn(both(user("S2-RUN2"), fresh), say("Noted."), name="answer2"),
        ]
    )
    served.prompt(session, "S2-RUN1: read the README.")
    assert poll(lambda: served.child_ends(session), WAIT), server.describe()
    assert served.child_ends(session) == ["extraction-requeue"], server.describe()
    assert poll(lambda: not served.children(session), WAIT)
    assert server.matched()[:4] == ["work1", "answer1", "fetch", "fail"], server.describe()
    assert not served.state_file(session).exists()
    assert served.queued_tools(session) == ["bash"]

    served.prompt(session, "S2-RUN2: anything else?")
    asked = [r for r in server.requests() if user("S2-RUN2")(r)]
    assert asked, server.describe()
    nudged = asked[0].last_user_text()
    assert EXTRACTION in nudged and f'session_id "{session}"' in nudged, nudged
    assert f"{EXTRACTION} from session" not in nudged
    assert served.queued_tools(session) == ["bash"]


def test_a_chat_message_wakes_the_idle_session_once(served: Served) -> None:
    sandbox, server = served.sandbox, served.server
    session = served.new_session()
    body = "rebase before you touch models.py"

    def woken(request: ModelRequest) -> bool:
        return bool(request.tool_names()) and request.last_user_text().startswith(WAKE)

    server.run(
        [
            Turn(both(user("S3-RUN1"), fresh), say("Hello."), name="answer1"),
            Turn(both(user("S3-RUN2"), fresh), say("On it."), name="answer2"),
            Turn(woken, say("I will read it later."), name="wake", repeat=True),
            Turn(both(user("S3-RUN3"), fresh), say("Still on it."), name="answer3"),
        ]
    )
    served.prompt(session, "S3-RUN1: hello.")  # the reminder anchors the session
    # That idle's chat-notify (nothing unread yet) has run: the message sent below waits
    # for the next idle.
    assert poll(lambda: bool(served.hooks("chat-notify", session)), WAIT)
    row_id = "mcp_" + hashlib.sha256(session.encode()).hexdigest()[:12]
    listed = sandbox.thatch("chat", "list", "--json")
    rows = [r for r in json.loads(listed.stdout) if r["session_id"] == row_id]
    assert len(rows) == 1, listed
    sent = sandbox.thatch("chat", "send", rows[0]["name"], body)
    assert sent.returncode == 0, (sent.stdout, sent.stderr)

    served.prompt(session, "S3-RUN2: carry on.")
    assert poll(lambda: "wake" in server.matched(), WAIT), server.describe()
    # The wake's own turn ends too; a third prompt within 15 minutes gets no second one.
    assert poll(lambda: server.matched().count("wake") == 1 and _idle(served, session), WAIT)
    before_run3 = time.time_ns()
    served.prompt(session, "S3-RUN3: and now?")
    assert poll(lambda: bool(served.hooks("chat-notify", session, before_run3)), WAIT)
    assert all(h.stdout == "" for h in served.hooks("chat-notify", session, before_run3))
    assert server.matched().count("wake") == 1, server.describe()

    (wake,) = [r for r in server.requests() if woken(r)]
    pointer = wake.last_user_text()
    assert body not in wake.all_text()
    credential = rf'"as": "{rows[0]["name"]}:[0-9a-f]{{16}}"'
    assert re.search(rf'chat \{{"action": "read", {credential}\}}', pointer), pointer
    assert "[thatch] Before you reply" not in pointer  # a wake gets no reminder
    messages = served.http("GET", f"/session/{session}/message")
    wakes = [
        p
        for m in messages
        for p in m["parts"]
        if p.get("type") == "text" and str(p.get("text", "")).startswith(WAKE)
    ]
    assert len(wakes) == 1 and wakes[0].get("metadata") == {"thatch": "chat-wake"}, wakes


def _idle(served: Served, session: str) -> bool:
    """opencode's status map lists busy sessions; an absent one is idle."""
    statuses = served.http("GET", "/session/status")
    return bool(statuses.get(session, {"type": "idle"})["type"] == "idle")
