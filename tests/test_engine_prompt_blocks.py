"""flush-tools' prediction and behavior blocks (docs/hooks.md §7 tier 2, engines.md §4).

Real processes throughout: the hook as a subprocess, the real embedder serving MiniLM,
and for the warm path a real ``thatch mcp`` answering the hook's scan. The prompt is
embedded once per flush, whichever path serves it (counted at the embedder).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.embedder_cleanup import wait_until
from tests.support.embedder_proc import EmbedderProcess, embedder_process
from tests.support.fake_embedder import rows
from tests.support.hookrun import NO_EMBEDDER, hook_env, run_hook
from tests.test_recall_scan import mcp_server, wait_serving
from thatch.frontend.hooks import recall_scan, scan_service
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools

TEST_PROMPT = "Which test framework should I choose for this Python project?"
MIGRATION_PROMPT = "I am about to run the database migration on production now"
M = "choosing a test framework for a Python project"
P = "pytest with plain asserts"
SIT = "about to run a database migration on production"
B = "take a backup first"
PREDICTION_BLOCK = (
    f"[thatch] User decision model\n- [0.58 conf, 1 tests] When {M}: you tend to {P}\n"
)
BEHAVIOR_BLOCK = (
    f"[thatch] Situational behaviors\n- [0.50 conf, 0 tests] When {SIT}: consider {B}\n"
)
NOTHING = ""  # an ordinary prompt: no fixed save reminder (issue 22)


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> Iterator[EmbedderProcess]:
    socket_dir = Path(tempfile.mkdtemp(prefix="thb-", dir="/tmp"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "THATCH_EMBEDDER_EXIT_SECONDS": "0"}
    try:
        with embedder_process(str(minilm_dir), socket_dir=socket_dir, env=env) as proc:
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def env(tmp_path: Path, short_tmp: Path, minilm: EmbedderProcess) -> dict[str, str]:
    project = tmp_path / "acme-app"
    project.mkdir()
    environment = hook_env(
        tmp_path,
        THATCH_EMBEDDER_ADDR=minilm.address,
        THATCH_PROJECT_DIR=str(project),
        XDG_RUNTIME_DIR=str(short_tmp),
    )
    with ToolContext.from_env(environment, autostart=False) as ctx:
        tools = Tools(ctx)
        made = tools.call(
            "engine",
            {
                "action": "prediction_update",
                "matcher": M,
                "prediction": P,
                "signal": "confirm",
                "rationale": "chose it",
            },
        )
        assert not made.is_error, made.text
        codified = tools.call(
            "engine",
            {"action": "behavior_codify", "situation": SIT, "behavior": B, "rationale": "r"},
        )
        assert not codified.is_error, codified.text
    return environment


def flush(env: dict[str, str], prompt: str) -> str:
    result = run_hook(["flush-tools"], {"session_id": "s1", "prompt": prompt}, env)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    return result.stdout.decode()


def test_cold_path_blocks_from_one_embedding(env: dict[str, str], minilm: EmbedderProcess) -> None:
    served = minilm.info().requests_served
    assert flush(env, TEST_PROMPT) == PREDICTION_BLOCK
    assert flush(env, MIGRATION_PROMPT) == BEHAVIOR_BLOCK
    assert minilm.info().requests_served == served + 2  # one Embed per prompt
    assert flush(env, "please continue with the refactoring of the parser") == NOTHING
    # Thresholds come from the environment.
    assert flush({**env, "THATCH_PREDICTION_THRESHOLD": "0.99"}, TEST_PROMPT) == NOTHING
    # THATCH_ENGINES=off (docs/tools.md §switches): the project shows no engine block.
    assert flush({**env, "THATCH_ENGINES": "off"}, TEST_PROMPT) == NOTHING


def test_recall_and_blocks_are_joined_in_order(env: dict[str, str]) -> None:
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.kind import Kind
    from thatch.frontend.store.memory_store import Store

    label = "Test framework choice"
    text = f"# {label}\n\nThe project uses pytest as its test framework for Python."
    with (
        EmbedderClient(env=env, autostart=False) as client,
        Store.open(env["THATCH_DB_PATH"]) as store,
    ):
        result = client.embed([text], Kind.PASSAGE)
        store.remember("acme-app", label, text, result.vectors[0], result.model_id)
    # The same situation for a behavior: both engine blocks fire, after the recall.
    with ToolContext.from_env(env, autostart=False) as ctx:
        Tools(ctx).call(
            "engine",
            {
                "action": "behavior_codify",
                "situation": M,
                "behavior": "read the CI config",
                "rationale": "r",
            },
        )
    out = flush({**env, "THATCH_RECALL_THRESHOLD": "0.3"}, TEST_PROMPT)
    recall, predictions, behaviors = out.split("\n\n")
    assert recall.startswith('[thatch] 1 memory relates to this prompt ("Test framework choice")')
    assert predictions + "\n" == PREDICTION_BLOCK
    assert behaviors == (
        "[thatch] Situational behaviors\n"
        f"- [0.50 conf, 0 tests] When {M}: consider read the CI config\n"
    )


def test_three_spam_signals_stop_a_behavior_firing(env: dict[str, str]) -> None:
    assert flush(env, MIGRATION_PROMPT) == BEHAVIOR_BLOCK
    with ToolContext.from_env(env, autostart=False) as ctx:
        for _ in range(3):
            graded = Tools(ctx).call(
                "engine",
                {
                    "action": "behavior_feedback",
                    "behavior": B,
                    "relevant": False,
                    "context": "not here",
                },
            )
            assert not graded.is_error, graded.text
    assert graded.text == f'[disconfirm] "{B}" confidence=0.31 (0/3)'
    assert flush(env, MIGRATION_PROMPT) == NOTHING


def test_warm_path_carries_the_blocks_and_embeds_once(
    env: dict[str, str], tmp_path: Path, minilm: EmbedderProcess
) -> None:
    """With the hook's own embedder address dead, the running thatch mcp embeds the prompt
    once and answers recall and both blocks; the cold path then gives the same text."""
    db = Path(env["THATCH_DB_PATH"])
    scan = recall_scan.socket_path(db, env)
    assert scan is not None
    log = tmp_path / "mcp.err"
    with mcp_server(env, log) as process:
        wait_serving(process, scan, log)
        # The defaults are seeded in the background: let them land before counting.
        wait_until(
            lambda: rows(db, "SELECT count(*) FROM behaviors WHERE store = 'global'")[0][0] == 9,
            60,
            "the default behaviors",
        )
        served = minilm.info().requests_served
        warm = {**env, "THATCH_EMBEDDER_ADDR": NO_EMBEDDER}
        assert flush(warm, TEST_PROMPT) == PREDICTION_BLOCK
        assert flush(warm, MIGRATION_PROMPT) == BEHAVIOR_BLOCK
        assert minilm.info().requests_served == served + 2
        assert flush({**warm, "THATCH_ENGINES": "off"}, MIGRATION_PROMPT) == NOTHING
    assert flush(env, TEST_PROMPT) == PREDICTION_BLOCK  # cold, same database


class _Searcher:
    def __init__(self) -> None:
        self.asked: list[dict[str, float]] = []

    def labels(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        *,
        branch: str | None = None,
    ) -> list[str]:
        return ["L"]

    def scan(
        self,
        prompt: str,
        stores: list[str],
        limit: int,
        threshold: float | None,
        engines: dict[str, float],
        *,
        branch: str | None = None,
    ) -> tuple[list[str], list[str]]:
        self.asked.append(engines)
        return ["L"], ["[thatch] User decision model\n- x"]


def test_scan_requests_with_engines_are_checked() -> None:
    """The engines field is optional; malformed thresholds get one error reply."""
    import json

    searcher = _Searcher()
    base = {"prompt": "p" * 20, "stores": ["s"], "limit": 5, "threshold": 0.5}

    def ask(**extra: object) -> dict[str, object]:
        return scan_service.answer(json.dumps({**base, **extra}).encode(), searcher)

    assert ask() == {"labels": ["L"]}
    good = {"prediction": 0.6, "behavior": 1}
    assert ask(engines=good) == {"labels": ["L"], "blocks": ["[thatch] User decision model\n- x"]}
    assert searcher.asked == [{"prediction": 0.6, "behavior": 1.0}]
    for bad in (
        {"prediction": 0.6},
        {"prediction": 2, "behavior": 0},
        [0.6, 0.6],
        {"prediction": True, "behavior": 0.5},
        {"prediction": "0.5", "behavior": 0.5},
    ):
        reply = ask(engines=bad)
        assert set(reply) == {"error"} and "engines" in str(reply["error"]), reply
    assert len(searcher.asked) == 1
