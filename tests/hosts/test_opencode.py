"""Real opencode (1.18.33) with thatch set up, driven by the scripted model server.

One project, two ``opencode run`` invocations in one session (module-scoped: every test
below reads what those runs recorded): the first saves a memory and reads files, the
second gets the extraction nudge and, as it says, starts a task whose child session
drains the queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.hostkit import (
    HookCall,
    Sandbox,
    hook_calls,
    make_sandbox,
    opencode_config,
    opencode_env,
    opencode_events,
    run_host,
    unfinished_hooks,
    wait_for_hooks,
)
from tests.hosts.model_server import (
    ModelRequest,
    ModelServer,
    Turn,
    after,
    both,
    call,
    calls,
    fresh,
    say,
)
from tests.hosts.recording import add_opencode_recorder, recording, write_fixtures
from tests.support.polling import poll

REMINDER = "[thatch] Before you reply, load what earlier sessions learned"
EXTRACTION = "queued for fact extraction"
FETCH = "thatch_get_extraction_payload"
DONE = "thatch_extraction_done"
REMEMBER = "thatch_memory_remember"
LABEL = "Widgets spin an even number of times"
EXTRACTED = "widgets.spin halves its argument"
OTHER_MCP_TOOL = "other_store_list"  # another MCP server's tool (thatch's, renamed)
PROMPT1 = "RUN1: remember that widgets spin evenly, then read widgets.py."
PROMPT2 = "RUN2: how do widgets spin?"


def main_agent(request: ModelRequest) -> bool:
    """The session's agent (opencode's title requests carry no tools)."""
    return bool(request.tool_names()) and any("RUN" in t for t in request.user_texts())


def child(request: ModelRequest) -> bool:
    """A task's child session: it has tools and only the task's prompt, no user prompt (and
    it is not the plugin's own extraction child, whose prompt names the session it is from)."""
    texts = request.user_texts()
    return (
        bool(request.tool_names())
        and not any("RUN" in t for t in texts)
        and any(f"Call {FETCH}" in t for t in texts)
        and not any("from session" in t for t in texts)
    )


@dataclass
class Run:
    requests: list[ModelRequest]
    matched: list[str]
    described: str
    hooks: list[HookCall]
    queued: list[dict[str, Any]]
    memories: list[dict[str, Any]]
    events: list[dict[str, Any]]

    def main_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if main_agent(r)]

    def child_requests(self) -> list[ModelRequest]:
        return [r for r in self.requests if child(r)]


@dataclass
class Story:
    sandbox: Sandbox
    session: str
    runs: list[Run]


def opencode(sandbox: Sandbox, server: ModelServer, prompt: str, *args: str) -> Run:
    before = len(hook_calls(sandbox.hook_log))
    argv = ["opencode", "run", "--format", "json", *args, prompt]
    result = run_host(sandbox, argv)
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-4000:])
    wait_for_hooks(sandbox.hook_log)
    return Run(
        requests=server.requests(),
        matched=server.matched(),
        described=server.describe(),
        hooks=hook_calls(sandbox.hook_log)[before:],
        queued=sandbox.queued(),
        memories=sandbox.memories() if sandbox.db_path.exists() else [],
        events=opencode_events(result.stdout),
    )


@pytest.fixture(scope="module")
def story(
    tmp_path_factory: pytest.TempPathFactory,
    host_bin: Path,
    host_embedder: Any,
    minilm_dir: Path,
    model_server: ModelServer,
) -> Story:
    tmp = tmp_path_factory.mktemp("opencode")
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
    if recording():
        add_opencode_recorder(sandbox)

    # The remember comes first, alone: opencode runs a step's tools in parallel and its
    # plugin does not await buffer-tool, so a remember's hook could land after (and drain)
    # the calls of its own step. The next step waits until that hook has exited.
    def settled(request: ModelRequest) -> bool:
        return poll(lambda: not unfinished_hooks(sandbox.hook_log), 30)

    model_server.run(
        [
            Turn(
                both(main_agent, fresh),
                call(
                    REMEMBER,
                    label=LABEL,
                    content="In acme/widgets, widgets.spin(n) must be "
                    "called with an even n (its docstring says so).",
                    confidence=9,
                ),
                name="remember",
            ),
            Turn(
                both(main_agent, after(REMEMBER), settled),
                calls(
                    ("read", {"filePath": str(sandbox.project / "widgets.py")}),
                    ("bash", {"command": "git log --oneline", "description": "Show history"}),
                    (OTHER_MCP_TOOL, {}),
                ),
                name="work",
            ),
            Turn(both(main_agent, after("bash")), say("Noted."), name="answer"),
        ]
    )
    first = opencode(sandbox, model_server, PROMPT1)
    sessions = {e.get("sessionID") for e in first.events if e.get("sessionID")}
    assert len(sessions) == 1, first.events
    session = str(sessions.pop())

    task_prompt = (
        f'Call {FETCH} with session_id "{session}" to get the queued tool interactions, '
        f"apply the thatch-fact-extractor skill to them, then call {DONE} with session_id "
        f'"{session}" even if nothing was worth saving.'
    )
    model_server.run(
        [
            Turn(
                lambda r: main_agent(r) and fresh(r) and EXTRACTION in r.all_text(),
                call(
                    "task",
                    description="thatch fact extraction",
                    subagent_type="general",
                    prompt=task_prompt,
                ),
                name="dispatch",
            ),
            Turn(both(child, fresh), call(FETCH, session_id=session), name="fetch"),
            Turn(
                both(child, after(FETCH)),
                call(
                    REMEMBER,
                    label="spin halves",
                    content=f"In acme/widgets, {EXTRACTED}.",
                    confidence=7,
                ),
                name="extract",
            ),
            Turn(both(child, after(REMEMBER)), call(DONE, session_id=session), name="done"),
            Turn(both(child, after(DONE)), say("Saved 1 fact."), name="child-answer"),
            Turn(both(main_agent, after("task")), say("Widgets spin evenly."), name="answer"),
        ]
    )
    second = opencode(sandbox, model_server, PROMPT2, "--session", session)
    if recording():
        write_fixtures("opencode", hook_calls(sandbox.hook_log), sandbox)
    return Story(sandbox, session, [first, second])


def prompt_message(request: ModelRequest, prompt: str) -> str:
    """The text of the user message that carries ``prompt``."""
    for text in request.user_texts():
        if prompt in text:
            return text
    raise AssertionError(f"{prompt!r} not in the request")


def test_the_reminder_reaches_the_model(story: Story) -> None:
    first = story.runs[0]
    assert first.matched == ["remember", "work", "answer"], first.described
    assert REMINDER in prompt_message(first.main_requests()[0], PROMPT1)
    assert [c.command for c in first.hooks if c.command == "reminder"] == ["reminder"]


def test_a_remember_call_saves_an_embedded_memory(story: Story) -> None:
    rows = story.runs[0].memories
    assert [(r["label"], r["model"], r["embedding_bytes"]) for r in rows] == [
        (LABEL, "sentence-transformers/all-MiniLM-L6-v2", 384 * 4)
    ]


def test_the_plugin_queues_the_hosts_tool_calls(story: Story) -> None:
    first = story.runs[0]
    buffered = [c.payload() for c in first.hooks if c.command == "buffer-tool"]
    assert sorted(p["tool_name"] for p in buffered) == sorted(
        [REMEMBER, "bash", "read", OTHER_MCP_TOOL]
    )
    queued = first.queued
    assert sorted(r["tool"] for r in queued) == ["bash", OTHER_MCP_TOOL, "read"]
    assert {r["sessionID"] for r in queued} == {story.session}
    assert "must be even" in next(r["output"] for r in queued if r["tool"] == "read")
    results = first.main_requests()[-1].tool_results()
    assert any(name == OTHER_MCP_TOOL and "acme/widgets" in text for name, text in results)


def test_the_next_prompt_is_nudged_and_the_queue_drains(story: Story) -> None:
    second = story.runs[1]
    assert second.matched == [
        "dispatch",
        "fetch",
        "extract",
        "done",
        "child-answer",
        "answer",
    ], second.described
    nudged = prompt_message(second.main_requests()[0], PROMPT2)
    assert EXTRACTION in nudged and f'session_id "{story.session}"' in nudged
    assert second.queued == []
    assert sorted(r["label"] for r in second.memories) == sorted([LABEL, "spin halves"])


def test_a_resumed_session_gets_no_second_reminder(story: Story) -> None:
    second = story.runs[1]
    assert REMINDER not in prompt_message(second.main_requests()[0], PROMPT2)


def test_thatchs_text_follows_the_users_prompt(story: Story) -> None:
    text = prompt_message(story.runs[0].main_requests()[0], PROMPT1)
    assert text.index(PROMPT1) < text.index(REMINDER)


def test_a_task_child_session_gets_no_reminder_or_nudge(story: Story) -> None:
    first_child = story.runs[1].child_requests()[0]
    assert "Call thatch_get_extraction_payload" in first_child.all_text()
    assert "[thatch]" not in first_child.last_user_text()


def test_doctor_in_an_opencode_project_names_no_cursor_drift(story: Story) -> None:
    doctor = story.sandbox.thatch("doctor")
    assert "setup:opencode" in doctor.stdout, (doctor.stdout, doctor.stderr)
    assert "setup:cursor" not in doctor.stdout, doctor.stdout


def test_an_mcp_tools_result_is_queued_with_its_text(story: Story) -> None:
    (record,) = [r for r in story.runs[0].queued if r["tool"] == OTHER_MCP_TOOL]
    assert "acme/widgets" in record["output"], record
