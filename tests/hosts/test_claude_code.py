"""Real Claude Code (2.1.197 and the latest, 2.1.332) with thatch set up, driven by the
scripted model server.

Each test is one project and a few ``claude -p`` runs; assertions are about what the host
really sent the model, what thatch's hooks got from the host (the recording shim), what
the queue holds and what the database holds.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.hostkit import (
    CLAUDE_VERSION,
    Sandbox,
    claude_env,
    hook_calls,
    make_sandbox,
    run_host,
    wait_for_hooks,
)
from tests.hosts.model_server import (
    ModelRequest,
    ModelServer,
    Reply,
    Turn,
    after,
    both,
    call,
    calls,
    fresh,
    say,
)
from tests.hosts.recording import FIXTURES, add_claude_recorder, recording, write_fixtures

REMINDER = "[thatch] Before you reply, load what earlier sessions learned"
EXTRACTION = "queued for fact extraction"
FETCH = "mcp__thatch__get_extraction_payload"
DONE = "mcp__thatch__extraction_done"
REMEMBER = "mcp__thatch__memory_remember"
CHAT = "mcp__thatch__chat"
WAKE = "[thatch] System notification, not user input: 1 unread chat message(s) from "
LABEL = "Widgets spin an even number of times"
VERSION_VAR = "THATCH_TEST_CLAUDE_VERSION"  # which Claude Code a sandbox runs (fixtures)
EXTRACTED = "widgets.spin halves its argument"


def main_agent(request: ModelRequest) -> bool:
    """The top-level agent: it has tools (side requests such as titles have none) and the
    user's prompts (every prompt here starts with RUN; a sub-agent only sees its task)."""
    return bool(request.tool_names()) and any("RUN" in t for t in request.user_texts())


def subagent(request: ModelRequest) -> bool:
    return bool(request.tool_names()) and not any("RUN" in t for t in request.user_texts())


@pytest.fixture
def sandbox(
    tmp_path: Path,
    isolated_env: Path,
    claude_bin: Path,
    claude_version: str,
    host_embedder: Any,
    minilm_dir: Path,
    model_server: ModelServer,
) -> Sandbox:
    extra = {
        **claude_env(model_server.url),
        VERSION_VAR: claude_version,
        "THATCH_MODEL": str(minilm_dir),
        "THATCH_EMBEDDER_ADDR": host_embedder.address,
    }
    return make_sandbox(tmp_path, isolated_env, claude_bin, extra)


def claude(
    sandbox: Sandbox, prompt: str, resume: str | None = None, session_id: str | None = None
) -> dict[str, Any]:
    argv = ["claude", "-p", prompt, "--permission-mode", "bypassPermissions"]
    argv += ["--output-format", "json"]
    if resume:
        argv += ["--resume", resume]
    if session_id:
        argv += ["--session-id", session_id]
    result = run_host(sandbox, argv)
    assert result.returncode == 0, (result.stdout, result.stderr)
    wait_for_hooks(sandbox.hook_log)
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict) and not doc.get("is_error"), doc
    return doc


def setup(sandbox: Sandbox, *flags: str) -> None:
    result = sandbox.thatch("setup", "--claude", *flags)
    assert result.returncode == 0, (result.stdout, result.stderr)
    if recording():
        add_claude_recorder(sandbox, post_tool_use="--post-tool-use" in flags)


def record(sandbox: Sandbox) -> None:
    """With THATCH_RECORD_FIXTURES=1, keep this test's payloads as the fixtures (the
    pinned release's at the top, another release's in ``claude-<version>/``)."""
    if recording():
        version = sandbox.env[VERSION_VAR]
        dest = FIXTURES if version == CLAUDE_VERSION else FIXTURES / f"claude-{version}"
        write_fixtures("claude", hook_calls(sandbox.hook_log), sandbox, dest)


def requests_text(requests: list[ModelRequest]) -> str:
    return "\n".join(r.all_text() for r in requests)


def completion(request: ModelRequest) -> bool:
    """A background agent's completion, delivered to the main agent as a new prompt."""
    return "<task-notification>" in request.last_user_text()


def test_claude_code_end_to_end(
    sandbox: Sandbox, model_server: ModelServer, claude_version: str
) -> None:
    setup(sandbox)
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                calls(
                    (
                        REMEMBER,
                        {
                            "label": LABEL,
                            "content": "In acme/widgets, widgets.spin(n) "
                            "must be called with an even n (its docstring says so).",
                            "confidence": 9,
                        },
                    ),
                    ("Read", {"file_path": str(sandbox.project / "widgets.py")}),
                    ("Bash", {"command": "git log --oneline", "description": "Show history"}),
                ),
                name="work",
            ),
            Turn(both(main_agent, after("Bash")), say("Noted."), name="answer"),
        ]
    )
    first = claude(sandbox, "RUN1: remember that widgets spin evenly, then read widgets.py.")
    session = str(first["session_id"])
    requests = model_server.requests()
    assert model_server.matched() == ["work", "answer"]
    assert REMINDER in main_requests(requests)[0].all_text()

    rows = sandbox.memories()
    assert [(r["label"], r["model"], r["embedding_bytes"]) for r in rows] == [
        (LABEL, "sentence-transformers/all-MiniLM-L6-v2", 384 * 4)
    ]
    queued = sandbox.queued()
    assert sorted(r["tool"] for r in queued) == ["Bash", "Read"]
    assert {r["sessionID"] for r in queued} == {session}
    batch = [c for c in hook_calls(sandbox.hook_log) if c.command == "buffer-batch"]
    assert len(batch) == 1
    names = [c["tool_name"] for c in batch[0].payload()["tool_calls"]]
    assert sorted(names) == sorted([REMEMBER, "Read", "Bash"])

    # Run 2, same session: the extraction nudge and the recall nudge reach the model; the
    # sub-agent it dispatches drains the queue and saves what it extracted.
    def nudged(request: ModelRequest) -> bool:
        return main_agent(request) and fresh(request) and EXTRACTION in request.all_text()

    model_server.run(
        [
            Turn(
                nudged,
                call(
                    "Agent",
                    description="thatch fact extraction",
                    subagent_type="general-purpose",
                    prompt=f'Call {FETCH} with session_id "{session}" to get the '
                    f"queued tool interactions, apply the thatch-fact-extractor "
                    f'skill to them, then call {DONE} with session_id "{session}".',
                ),
                name="dispatch",
            ),
            Turn(both(subagent, fresh), call(FETCH, session_id=session), name="fetch"),
            Turn(
                both(subagent, after(FETCH)),
                call(
                    REMEMBER,
                    label="spin halves",
                    content=f"In acme/widgets, {EXTRACTED}.",
                    confidence=7,
                ),
                name="extract",
            ),
            Turn(both(subagent, after(REMEMBER)), call(DONE, session_id=session), name="done"),
            Turn(both(subagent, after(DONE)), say("Saved 1 fact."), name="sub-answer"),
            Turn(both(main_agent, after("Agent")), say("Widgets spin evenly."), name="answer"),
            # 2.1.332 runs every Agent call in the background: the main agent answers at
            # once and gets one more turn when the sub-agent's completion arrives.
            Turn(both(main_agent, fresh, completion), say("Noted."), name="completed"),
        ]
    )
    claude(sandbox, "RUN2: how do widgets spin?", resume=session)
    requests = model_server.requests()
    prompt_text = main_requests(requests)[0].all_text()
    assert EXTRACTION in prompt_text and f'session_id "{session}"' in prompt_text
    matched = model_server.matched()
    sub_agent = ["fetch", "extract", "done", "sub-answer"]
    assert [name for name in matched if name in sub_agent] == sub_agent, model_server.describe()
    assert matched[0] == "dispatch" and "answer" in matched, model_server.describe()
    asynchronous = "completed" in matched
    assert asynchronous == (claude_version != CLAUDE_VERSION), model_server.describe()
    if not asynchronous:  # 2.1.197: the Agent call returns when the sub-agent is done
        assert matched == ["dispatch", *sub_agent, "answer"], model_server.describe()
    labels = sorted(r["label"] for r in sandbox.memories())
    assert labels == sorted([LABEL, "spin halves"])
    assert sandbox.queued() == []

    # Run 3: nothing queued any more, so a related prompt gets the recall nudge.
    model_server.run([])
    claude(sandbox, "RUN3: which numbers can I pass when widgets spin?", resume=session)
    prompt_text = main_requests(model_server.requests())[0].all_text()
    assert f'memory relates to this prompt ("{LABEL}")' in prompt_text
    assert EXTRACTION not in prompt_text.split("RUN3")[-1]
    record(sandbox)


def main_requests(requests: list[ModelRequest]) -> list[ModelRequest]:
    return [r for r in requests if main_agent(r)]


def test_failing_hooks_never_reach_the_model(sandbox: Sandbox, model_server: ModelServer) -> None:
    """A directory where the database should be: every hook fails, the host carries on,
    and nothing the hooks said about it reaches the model."""
    setup(sandbox)
    sandbox.db_path.mkdir()
    (sandbox.queue_dir.parent).mkdir(parents=True, exist_ok=True)
    sandbox.queue_dir.write_text("not a directory\n")  # the queue cannot be written either
    model_server.run(
        [
            Turn(both(main_agent, fresh), call("Bash", command="git status"), name="work"),
            Turn(both(main_agent, after("Bash")), say("Clean."), name="answer"),
        ]
    )
    first = claude(sandbox, "RUN1: is the widgets tree clean?")
    model_server.run([])
    claude(sandbox, "RUN2: and how do widgets spin?", resume=str(first["session_id"]))
    calls_made = [c for c in hook_calls(sandbox.hook_log) if c.command != "record"]
    assert sorted({c.command for c in calls_made}) == [
        "buffer-batch",
        "chat-notify",
        "flush-tools",
        "reminder",
        "session-end",
    ]
    said = "\n".join(c.stderr for c in calls_made)
    assert "[thatch reminder]" in said and str(sandbox.db_path) in said  # they failed, and said so
    sent = requests_text(model_server.requests())
    for line in filter(None, map(str.strip, said.splitlines())):
        assert line not in sent
    for hook in calls_made:
        assert hook.stdout == "" or hook.stdout.startswith("[thatch] "), hook
        assert "Error" not in hook.stdout and "Traceback" not in hook.stdout, hook
    assert "Traceback" not in sent and str(sandbox.db_path) not in sent


def test_post_tool_use_setup_queues_the_hosts_calls(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    setup(sandbox, "--post-tool-use")
    settings = json.loads((sandbox.project / ".claude" / "settings.json").read_text())
    assert "PostToolUse" in settings["hooks"] and "PostToolBatch" not in settings["hooks"]
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                calls(
                    ("Read", {"file_path": str(sandbox.project / "README.md")}),
                    ("Bash", {"command": "git log --oneline", "description": "History"}),
                ),
                name="work",
            ),
            Turn(both(main_agent, after("Bash")), say("Read."), name="answer"),
        ]
    )
    first = claude(sandbox, "RUN1: read the README and the history.")
    assert model_server.matched() == ["work", "answer"], model_server.describe()
    payloads = [c.payload() for c in hook_calls(sandbox.hook_log) if c.command == "buffer-batch"]
    assert sorted(p["hook_event_name"] for p in payloads) == ["PostToolUse", "PostToolUse"]
    queued = sandbox.queued()
    assert sorted(r["tool"] for r in queued) == ["Bash", "Read"]
    assert {r["sessionID"] for r in queued} == {first["session_id"]}
    assert "Spin widgets." in next(r["output"] for r in queued if r["tool"] == "Read")

    model_server.run([])
    claude(sandbox, "RUN2: anything else?", resume=str(first["session_id"]))
    assert EXTRACTION in main_requests(model_server.requests())[0].all_text()
    record(sandbox)


def test_post_tool_use_queues_bash_output_as_text(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    setup(sandbox, "--post-tool-use")
    model_server.run(
        [
            Turn(both(main_agent, fresh), call("Bash", command="git log --oneline"), name="work"),
            Turn(both(main_agent, after("Bash")), say("Read."), name="answer"),
        ]
    )
    claude(sandbox, "RUN1: show the history.")
    (record,) = sandbox.queued()
    assert record["output"].strip().endswith("widgets"), record
    assert not record["output"].lstrip().startswith("{"), record


def test_failed_remember_keeps_the_queue(sandbox: Sandbox, model_server: ModelServer) -> None:
    setup(sandbox)
    model_server.run(
        [
            Turn(both(main_agent, fresh), call("Bash", command="git log --oneline"), name="work"),
            Turn(both(main_agent, after("Bash")), call(REMEMBER, label=LABEL), name="bad-save"),
            Turn(both(main_agent, after(REMEMBER)), say("Could not save."), name="answer"),
        ]
    )
    claude(sandbox, "RUN1: look at the history and remember it.")
    assert model_server.matched() == ["work", "bad-save", "answer"], model_server.describe()
    ((_, result),) = [r for r in model_server.requests()[-1].last_tool_results()]
    assert "Invalid arguments" in result or "content" in result, result
    assert sandbox.memories() == []
    assert [r["tool"] for r in sandbox.queued()] == ["Bash"]


def loaded_tools(request: ModelRequest) -> list[str]:
    """Tools the model can call now (deferred ones are listed with defer_loading)."""
    tools = request.body.get("tools") or []
    return [str(t.get("name")) for t in tools if not t.get("defer_loading")]


def test_deferred_thatch_tools_load_through_toolsearch(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    """With tool search on (the default against Anthropic's API), the first request offers
    no thatch tool; a ToolSearch select loads memory_remember, which then saves."""
    sandbox.env["ENABLE_TOOL_SEARCH"] = "true"
    setup(sandbox)
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                call("ToolSearch", query=f"select:{REMEMBER}", max_results=1),
                name="search",
            ),
            Turn(
                both(main_agent, after("ToolSearch")),
                call(REMEMBER, label=LABEL, content="In acme/widgets spin(n) needs an even n."),
                name="remember",
            ),
            Turn(both(main_agent, after(REMEMBER)), say("Saved."), name="answer"),
        ]
    )
    claude(sandbox, "RUN1: remember that widgets spin evenly.")
    assert model_server.matched() == ["search", "remember", "answer"], model_server.describe()
    first, second = main_requests(model_server.requests())[:2]
    assert "ToolSearch" in loaded_tools(first)
    assert not [name for name in loaded_tools(first) if name.startswith("mcp__thatch__")]
    assert REMEMBER in second.tool_names()
    assert [r["label"] for r in sandbox.memories()] == [LABEL]


def test_toolsearch_is_never_queued(sandbox: Sandbox, model_server: ModelServer) -> None:
    sandbox.env["ENABLE_TOOL_SEARCH"] = "true"
    setup(sandbox)
    recall = "mcp__thatch__memory_recall"
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                call("ToolSearch", query=f"select:{recall}", max_results=1),
                name="search",
            ),
            Turn(
                both(main_agent, after("ToolSearch")), call(recall, query="widgets"), name="recall"
            ),
            Turn(both(main_agent, after(recall)), say("Nothing yet."), name="answer"),
        ]
    )
    claude(sandbox, "RUN1: what do we know about widgets?")
    assert model_server.matched() == ["search", "recall", "answer"], model_server.describe()
    assert sandbox.queued() == []


def test_extraction_done_keeps_calls_queued_after_the_fetch(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    setup(sandbox)
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                call("Read", file_path=str(sandbox.project / "README.md")),
                name="read",
            ),
            Turn(both(main_agent, after("Read")), say("Read."), name="answer"),
        ]
    )
    first = claude(sandbox, "RUN1: read the README.")
    session = str(first["session_id"])
    assert [r["tool"] for r in sandbox.queued()] == ["Read"]
    model_server.run(
        [
            Turn(
                lambda r: main_agent(r) and fresh(r) and EXTRACTION in r.all_text(),
                call(FETCH, session_id=session),
                name="fetch",
            ),
            Turn(both(main_agent, after(FETCH)), call("Bash", command="git log"), name="log"),
            Turn(both(main_agent, after("Bash")), call(DONE, session_id=session), name="done"),
            Turn(both(main_agent, after(DONE)), say("Done."), name="answer"),
        ]
    )
    claude(sandbox, "RUN2: carry on.", resume=session)
    assert model_server.matched() == ["fetch", "log", "done", "answer"], model_server.describe()
    assert [r["tool"] for r in sandbox.queued()] == ["Bash"]


def test_global_setup_in_a_set_up_project_writes_the_user_entry(sandbox: Sandbox) -> None:
    setup(sandbox)
    setup(sandbox, "--global")
    outside = sandbox.home / "elsewhere"
    outside.mkdir()
    known = subprocess.run(
        ["claude", "mcp", "get", "thatch"],
        cwd=outside,
        env={**sandbox.env, "PWD": str(outside)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert known.returncode == 0, (known.stdout, known.stderr)


def test_a_task_notification_is_not_a_user_prompt(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    setup(sandbox)
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                call(
                    "Agent",
                    description="look around",
                    subagent_type="general-purpose",
                    prompt="List the files.",
                    run_in_background=True,
                ),
                name="start",
            ),
            # The background agent finishes only after the main turn has ended, so its
            # completion comes back as a prompt of its own.
            Turn(both(subagent, fresh), say("Two files."), name="background", after_turn="end"),
            Turn(both(main_agent, after("Agent")), say("Started."), name="end"),
        ]
    )
    claude(sandbox, "RUN1: look around in the background.")
    record(sandbox)
    prompts = [c for c in hook_calls(sandbox.hook_log) if c.command == "flush-tools"]
    notified = [c for c in prompts if "<task-notification>" in c.payload().get("prompt", "")]
    assert len(notified) == 1, model_server.describe()
    assert notified[0].stdout == ""


def test_local_and_global_setup_put_the_block_in_context_once(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    setup(sandbox)
    setup(sandbox, "--global")
    model_server.run([])
    claude(sandbox, "RUN1: hello.")
    first = main_requests(model_server.requests())[0].all_text()
    assert first.count("# thatch — persistent memory") == 1


def chat_name(sandbox: Sandbox, session_id: str) -> str:
    """The chat name thatch assigned to a host session (rows are keyed by its hash)."""
    listed = sandbox.thatch("chat", "list", "--json")
    row_id = "mcp_" + hashlib.sha256(session_id.encode()).hexdigest()[:12]
    rows = [r for r in json.loads(listed.stdout) if r["session_id"] == row_id]
    assert len(rows) == 1, (listed.stdout, listed.stderr)
    return str(rows[0]["name"])


def test_a_chat_message_wakes_the_other_session_at_its_stop(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    """A's model sends B a message; B's next turn ends, its Stop hook's pointer makes
    Claude take one more turn, and B's model reads the message through chat's read."""
    setup(sandbox)
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    body = "rebase before you touch models.py"
    model_server.run([])
    claude(sandbox, "RUN-B1: hello.", session_id=b)  # the reminder anchors B
    name_b = chat_name(sandbox, b)

    def send(request: ModelRequest) -> Reply:
        # As a model would: its own "as" (name and key) comes from the reminder's chat line.
        me = re.search(
            r'\[thatch\] chat: you are \S+ \(\d+ unread\)\. Pass "as": "([^"]+)"',
            request.all_text(),
        )
        assert me is not None, request.all_text()[-2000:]
        return call(CHAT, action="send", to=name_b, body=body, **{"as": me.group(1)})

    model_server.run(
        [
            Turn(both(main_agent, fresh), send, name="send"),
            Turn(both(main_agent, after(CHAT)), say("Sent."), name="sent"),
        ]
    )
    claude(sandbox, "RUN-A1: tell the other session to rebase.", session_id=a)
    assert model_server.matched() == ["send", "sent"], model_server.describe()
    ((_, sent),) = model_server.requests()[-1].last_tool_results()
    assert sent.startswith(f"[sent] → {name_b}"), sent
    name_a = chat_name(sandbox, a)

    def woken(request: ModelRequest) -> bool:
        return WAKE in request.last_user_text()

    def read(request: ModelRequest) -> Reply:
        # The pointer carries B's own "as": only B's Stop hook could print its key.
        me = re.search(r'chat \{"action": "read", "as": "([^"]+)"\}', request.last_user_text())
        assert me is not None, request.last_user_text()
        return call(CHAT, action="read", **{"as": me.group(1)})

    model_server.run(
        [
            Turn(both(main_agent, fresh, woken), read, name="read"),
            Turn(both(main_agent, fresh), say("Hello again."), name="answer"),
            Turn(both(main_agent, after(CHAT)), say("Read it."), name="done"),
        ]
    )
    claude(sandbox, "RUN-B2: carry on.", resume=b)
    assert model_server.matched() == ["answer", "read", "done"], model_server.describe()
    requests = main_requests(model_server.requests())
    (wake,) = [r for r in requests if woken(r)]
    pointer = wake.last_user_text()
    assert re.search(
        rf'from {name_a}\. Read them with chat \{{"action": "read", "as": '
        rf'"{name_b}:[0-9a-f]{{16}}"\}}',
        pointer,
    ), pointer
    assert body not in wake.all_text()
    ((_, read_result),) = requests[-1].last_tool_results()
    assert "<<<chat message #" in read_result and f"from {name_a} at " in read_result, read_result
    assert body in read_result, read_result
    # Each piece reaches the model once: the resumed session's "(1 unread)" (its reminder
    # says it; the same request's prompt hook does not repeat it) and the pointer (2.1.332
    # repeated a {"decision": "block"} reason as a "Stop hook blocking error").
    told = f"[thatch] chat: you are {name_b} (1 unread)."
    assert requests[-1].all_text().count(told) == 1, requests[-1].all_text()[-3000:]
    assert requests[-1].all_text().count(WAKE) == 1, requests[-1].all_text()[-3000:]
    stops = [c for c in hook_calls(sandbox.hook_log) if c.command == "chat-notify"]
    assert [c.payload()["session_id"] for c in stops] == [b, a, b, b], stops
    assert [bool(c.stdout.strip()) for c in stops] == [False, False, True, False], stops


NUDGE_PROMPT = re.compile(r'with this prompt: "(Call .*? even if nothing was worth saving\.)"')
NUDGED_ID = re.compile(r'session_id ("(?:[^"\\]|\\.)*")')


def nudged_session(text: str) -> str:
    """The session id an extraction nudge (or the prompt it gave a sub-agent) names."""
    found = NUDGED_ID.findall(text)
    assert found, text[-2000:]
    value = json.loads(found[-1])
    assert isinstance(value, str)
    return value


def carry_files(sandbox: Sandbox) -> list[Path]:
    return sorted(sandbox.queue_dir.glob("~carry-*.jsonl")) if sandbox.queue_dir.is_dir() else []


# 2.1.332 runs every Agent call in the background: the main agent answers at once and
# gets one more turn when the sub-agent's completion arrives.
def completed_turn() -> Turn:
    return Turn(both(main_agent, fresh, completion), say("Noted."), name="completed")


def assert_extraction_turns(
    model_server: ModelServer, claude_version: str, sub_agent: list[str]
) -> None:
    """The extraction's turns in order on either Claude Code: the sub-agent's in
    ``sub_agent``'s order after the dispatch; the main answer in line (2.1.197) or beside
    them with a completion turn (a background Agent)."""
    matched = model_server.matched()
    assert [name for name in matched if name in sub_agent] == sub_agent, model_server.describe()
    assert matched[0] == "dispatch" and "answer" in matched, model_server.describe()
    asynchronous = "completed" in matched
    assert asynchronous == (claude_version != CLAUDE_VERSION), model_server.describe()
    if not asynchronous:
        assert matched == ["dispatch", *sub_agent, "answer"], model_server.describe()


def history_and_read(sandbox: Sandbox, model_server: ModelServer, session: str) -> None:
    """Session ``session`` runs Bash and Read in one turn, then answers: two calls queued."""
    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                calls(
                    ("Bash", {"command": "git log --oneline", "description": "History"}),
                    ("Read", {"file_path": str(sandbox.project / "widgets.py")}),
                ),
                name="work",
            ),
            Turn(both(main_agent, after("Read")), say("Read."), name="answer"),
        ]
    )
    claude(sandbox, "RUN1: show the history and read widgets.py.", session_id=session)
    assert model_server.matched() == ["work", "answer"], model_server.describe()


@pytest.mark.parametrize("next_session", ["resumed", "new"])
def test_calls_carried_at_session_end_are_extracted_once(
    sandbox: Sandbox, model_server: ModelServer, next_session: str, claude_version: str
) -> None:
    """issue 28: ``claude -p --session-id S`` runs a Bash and a Read and ends (SessionEnd
    carries its queue to the project's carry file); the next run (``--resume S``, or a new
    session of the project) is nudged with what its sub-agent can fetch with exactly the
    nudge's arguments and complete; then the queue and the carry file are empty, the fact
    is saved and the next prompt is quiet."""
    setup(sandbox)
    session = str(uuid.uuid4())
    following = session if next_session == "resumed" else str(uuid.uuid4())
    history_and_read(sandbox, model_server, session)
    (carry,) = carry_files(sandbox)  # SessionEnd carried the session's calls over
    assert sorted(r["tool"] for r in sandbox.queued()) == ["Bash", "Read"]

    def nudged(request: ModelRequest) -> bool:
        return main_agent(request) and fresh(request) and EXTRACTION in request.all_text()

    def dispatch(request: ModelRequest) -> Reply:
        # As a model would: the sub-agent gets exactly the prompt the nudge gave.
        found = NUDGE_PROMPT.search(request.all_text())
        assert found is not None, request.all_text()[-2000:]
        return call(
            "Agent",
            description="thatch fact extraction",
            subagent_type="general-purpose",
            prompt=found.group(1),
        )

    def fetch(request: ModelRequest) -> Reply:
        return call(FETCH, session_id=nudged_session(request.user_texts()[0]))

    def done(request: ModelRequest) -> Reply:
        return call(DONE, session_id=nudged_session(request.user_texts()[0]))

    model_server.run(
        [
            Turn(nudged, dispatch, name="dispatch"),
            Turn(both(subagent, fresh), fetch, name="fetch"),
            Turn(
                both(subagent, after(FETCH)),
                call(REMEMBER, label="spin halves", content=f"In acme/widgets, {EXTRACTED}."),
                name="extract",
            ),
            Turn(both(subagent, after(REMEMBER)), done, name="done"),
            Turn(both(subagent, after(DONE)), say("Saved 1 fact."), name="sub-answer"),
            Turn(both(main_agent, after("Agent")), say("Nothing else."), name="answer"),
            completed_turn(),
        ]
    )
    if next_session == "resumed":
        claude(sandbox, "RUN2: anything else?", resume=session)
    else:
        claude(sandbox, "RUN2: anything else?", session_id=following)
    assert_extraction_turns(
        model_server, claude_version, ["fetch", "extract", "done", "sub-answer"]
    )
    prompt_text = main_requests(model_server.requests())[0].all_text()
    assert "2 tool interactions are queued" in prompt_text, prompt_text[-2000:]
    assert nudged_session(prompt_text) == following
    results = dict(
        (name, text) for r in model_server.requests() for name, text in r.last_tool_results()
    )
    fetched = json.loads(results[FETCH])
    assert sorted(i["tool"] for i in fetched["interactions"]) == ["Bash", "Read"]
    assert results[DONE].startswith("[acknowledged]")
    assert [r["label"] for r in sandbox.memories()] == ["spin halves"]
    assert sandbox.queued() == [] and not carry.exists()

    model_server.run([])
    claude(sandbox, "RUN3: and now?", resume=following)
    last_prompt = [c for c in hook_calls(sandbox.hook_log) if c.command == "flush-tools"][-1]
    assert "RUN3" in last_prompt.payload()["prompt"]
    assert EXTRACTION not in last_prompt.stdout, last_prompt.stdout
    assert sandbox.queued() == []


def test_calls_a_session_end_carried_after_the_nudge_are_still_fetched(
    sandbox: Sandbox, model_server: ModelServer, claude_version: str
) -> None:
    """issue 28's other hand-off: the nudge names S, then another process of S ends (its
    SessionEnd carries S's queue to the project) before S's extractor fetches; the fetch
    with the nudge's exact arguments still gets both calls and completing removes them."""
    setup(sandbox)
    session = str(uuid.uuid4())
    history_and_read(sandbox, model_server, session)

    def nudged(request: ModelRequest) -> bool:
        return main_agent(request) and fresh(request) and "RUN2" in request.last_user_text()

    def dispatch(request: ModelRequest) -> Reply:
        found = NUDGE_PROMPT.search(request.all_text())
        assert found is not None, request.all_text()[-2000:]
        return call(
            "Agent",
            description="thatch fact extraction",
            subagent_type="general-purpose",
            prompt=found.group(1),
        )

    def fetch_after_another_end(request: ModelRequest) -> Reply:
        # Before answering with the fetch: a second process of S runs one prompt and
        # ends; its SessionEnd moves S's queue (what the nudge announced) away.
        claude(sandbox, "RUN3: quick question.", resume=session)
        assert carry_files(sandbox), "the second process's SessionEnd carried nothing"
        return call(FETCH, session_id=nudged_session(request.user_texts()[0]))

    def done(request: ModelRequest) -> Reply:
        return call(DONE, session_id=nudged_session(request.user_texts()[0]))

    model_server.run(
        [
            Turn(
                lambda r: main_agent(r) and fresh(r) and "RUN3" in r.last_user_text(),
                say("Quick answer."),
                name="other-process",
            ),
            Turn(nudged, dispatch, name="dispatch"),
            Turn(both(subagent, fresh), fetch_after_another_end, name="fetch"),
            Turn(
                both(subagent, after(FETCH)),
                call(REMEMBER, label="spin halves", content=f"In acme/widgets, {EXTRACTED}."),
                name="extract",
            ),
            Turn(both(subagent, after(REMEMBER)), done, name="done"),
            Turn(both(subagent, after(DONE)), say("Saved 1 fact."), name="sub-answer"),
            Turn(both(main_agent, after("Agent")), say("Nothing else."), name="answer"),
            completed_turn(),
        ]
    )
    claude(sandbox, "RUN2: anything else?", resume=session)
    assert_extraction_turns(
        model_server,
        claude_version,
        ["other-process", "fetch", "extract", "done", "sub-answer"],
    )
    results = dict(
        (name, text) for r in model_server.requests() for name, text in r.last_tool_results()
    )
    assert results[FETCH] != "No queued tool interactions found for this session."
    fetched = json.loads(results[FETCH])
    assert sorted(i["tool"] for i in fetched["interactions"]) == ["Bash", "Read"]
    assert [r["label"] for r in sandbox.memories()] == ["spin halves"]
    assert sandbox.queued() == [] and carry_files(sandbox) == []

    model_server.run([])
    claude(sandbox, "RUN4: and now?", resume=session)
    last_prompt = [c for c in hook_calls(sandbox.hook_log) if c.command == "flush-tools"][-1]
    assert "RUN4" in last_prompt.payload()["prompt"]
    assert EXTRACTION not in last_prompt.stdout, last_prompt.stdout


def test_the_first_request_offers_thatchs_tools_with_default_settings(
    sandbox: Sandbox, model_server: ModelServer
) -> None:
    """Claude Code connects MCP servers in the background by default and snapshots its
    tools when the first request goes out: ``thatch mcp`` answers before that, in every
    one of 10 sessions (issue 22 §3; a slow start lost the tools in 1-5 of 10)."""
    del sandbox.env["MCP_CONNECTION_NONBLOCKING"]  # the default
    setup(sandbox)
    missing = []
    for run in range(10):
        model_server.run([])
        claude(sandbox, f"RUN{run}: hello.")
        first = main_requests(model_server.requests())[0]
        if not offers(first, REMEMBER):
            missing.append((run, first.tool_names()))
    assert missing == []


def offers(request: ModelRequest, tool: str) -> bool:
    """Whether the request offers ``tool``: loaded, or (2.1.332 defers MCP tools) named on
    a line of its own in the list of tools ToolSearch can load."""
    listed = re.search(rf"(?m)^{re.escape(tool)}$", request.all_text()) is not None
    return tool in request.tool_names() or listed
