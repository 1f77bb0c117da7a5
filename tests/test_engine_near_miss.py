"""A paraphrase below the dedup cosine (0.85) with the MiniLM thatch ships: the CLI and the
engine tool name the nearest item as a hint, and neither deletes nor grades it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows
from thatch.cli.main import cli
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools

BACKUP = "take a backup before running a migration"
TESTS = "run the tests before pushing"
PARAPHRASE = "back up the database before migrating"
TABLES = ["behavior_matchers", "behaviors", "behavior_edges", "behavior_provenance"]


def everything(db: Path) -> list[list[object]]:
    return [rows(db, f"SELECT * FROM {table} ORDER BY 1") for table in TABLES] + [
        rows(db, "SELECT * FROM thatch_defaults_off")
    ]


def test_a_minilm_paraphrase_is_named_never_acted_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minilm_server: EmbedderProcess
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    db = tmp_path / "thatch.db"
    monkeypatch.setenv("THATCH_DB_PATH", str(db))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", minilm_server.address)
    embedder = EmbedderClient(env=dict(os.environ), autostart=False)
    try:
        vectors = embedder.embed([BACKUP, TESTS, PARAPHRASE], Kind.PASSAGE).vectors
    finally:
        embedder.close()
    cosine = float(np.dot(vectors[0], vectors[2]))
    assert 0.6 < cosine < 0.85 and float(np.dot(vectors[1], vectors[2])) < cosine
    similarity = f"{math.floor(cosine * 100) / 100:.2f}"

    with ToolContext.from_env() as ctx:
        tools = Tools(ctx)
        for situation, behavior in (("about to migrate", BACKUP), ("about to push", TESTS)):
            args = {"situation": situation, "behavior": behavior, "rationale": "r"}
            assert not tools.call("engine", {"action": "behavior_codify", **args}).is_error
        (item_id,) = rows(db, f"SELECT id FROM behaviors WHERE statement = '{BACKUP}'")[0]
        before = everything(db)
        missed = f'No behavior matching "{PARAPHRASE}" found in "proj" or "global".'
        near = f'"{BACKUP}" in "proj" (similarity {similarity}; a match needs 0.85)'
        deleted = tools.call("engine", {"action": "behavior_delete", "statement": PARAPHRASE})
        assert (deleted.is_error, deleted.text) == (False, f"{missed}\nNearest: {near}")
        graded = tools.call(
            "engine",
            {
                "action": "behavior_feedback",
                "behavior": PARAPHRASE,
                "relevant": False,
                "context": "c",
            },
        )
        assert (graded.is_error, graded.text) == (False, deleted.text)

    for command in ("show", "delete"):
        result = CliRunner().invoke(cli, ["behaviors", command, PARAPHRASE])
        assert (result.exit_code, result.stdout) == (1, ""), result.output
        assert result.stderr == (
            f"Error: {missed}\nNearest: {item_id} {near}\n"
            f"Fix: thatch behaviors {command} {item_id}\n"
        )
    assert everything(db) == before
    # The fix it names does what it says.
    done = CliRunner().invoke(cli, ["behaviors", "delete", item_id])
    assert (done.exit_code, done.stdout) == (0, f'[deleted] "{BACKUP}" from "proj"\n')
    assert rows(db, "SELECT statement FROM behaviors") == [(TESTS,)]
