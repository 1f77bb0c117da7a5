"""get_extraction_payload peeks, extraction_done drains (docs/tools.md §get_extraction_payload,
§extraction_done)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fake_embedder import FakeEmbedder, tool_context
from thatch.frontend import queue
from thatch.frontend.tools.memory_tools import Tools

CALL = {
    "tool_name": "Bash",
    "tool_input": {"command": "make test"},
    "tool_use_id": "t1",
    "tool_response": "42 passed",
}


def test_payload_is_read_only_and_done_drains(tmp_path: Path) -> None:
    """The payload JSON names the stores; reading twice works; done empties the queue."""
    fake = FakeEmbedder()
    with tool_context(tmp_path, fake) as ctx:
        tools = Tools(ctx)
        queue.append_calls(tools.ctx.queue_dir, "sess-1", [CALL])
        first = tools.call("get_extraction_payload", {"session_id": "sess-1"})
        assert not first.is_error
        payload = json.loads(first.text)
        assert payload["projectStore"] == "o/r" and payload["globalStore"] == "global"
        assert payload["interactions"][0]["tool"] == "Bash"
        assert tools.call("get_extraction_payload", {"session_id": "sess-1"}).text == first.text
        assert tools.call("extraction_done", {"session_id": "sess-1"}).text == "[acknowledged]"
        assert tools.call("get_extraction_payload", {"session_id": "sess-1"}).text == (
            "No queued tool interactions found for this session."
        )
        assert fake.calls == []  # neither tool needs the embedder


def test_done_without_id_and_unknown_sessions(tmp_path: Path) -> None:
    """No id (or a blank one) just acknowledges; an unknown id has nothing queued; a path
    is refused (the hooks never queue, so never nudge with, such an id)."""
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        assert tools.call("extraction_done", {}).text == "[acknowledged]"
        assert tools.call("extraction_done", {"session_id": "  "}).text == "[acknowledged]"
        unknown = tools.call("get_extraction_payload", {"session_id": "ses_unknown"})
        assert (unknown.is_error, unknown.text) == (
            False,
            "No queued tool interactions found for this session.",
        )
        hostile = tools.call("get_extraction_payload", {"session_id": "../../etc/passwd"})
        assert (hostile.is_error, hostile.text) == (
            True,
            "Invalid arguments: session_id: must not be a path (no /, \\, . or ..)",
        )
        assert tools.call("get_extraction_payload", {}).text == (
            "Invalid arguments: session_id: required"
        )


def test_done_drains_exactly_what_the_payload_handed_out(tmp_path: Path) -> None:
    """A call queued after get_extraction_payload survives extraction_done (the snapshot
    rule); a second done without a new fetch deletes nothing."""
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        queue.append_calls(tools.ctx.queue_dir, "sess-1", [CALL])
        first = json.loads(tools.call("get_extraction_payload", {"session_id": "sess-1"}).text)
        assert [i["args"] for i in first["interactions"]] == ["make test"]
        later = {**CALL, "tool_use_id": "t2", "tool_input": {"command": "git log"}}
        queue.append_calls(tools.ctx.queue_dir, "sess-1", [later])
        assert tools.call("extraction_done", {"session_id": "sess-1"}).text == "[acknowledged]"
        left = queue.peek_records(tools.ctx.queue_dir, "sess-1")
        assert [r["args"] for r in left] == [{"command": "git log"}]
        assert tools.call("extraction_done", {"session_id": "sess-1"}).text == "[acknowledged]"
        assert len(queue.peek_records(tools.ctx.queue_dir, "sess-1")) == 1
