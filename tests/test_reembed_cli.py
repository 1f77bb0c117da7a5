"""thatch reembed fills pending memories and migrates other-model rows (docs/database.md
§pending-embeddings)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_proc import EmbedderProcess, tcp_embedder
from tests.support.fake_embedder import rows
from thatch.cli.main import cli
from thatch.embedder.models.mock import mock_vector
from thatch.frontend.store.memory_store import Store


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    path = tmp_path / "thatch.db"
    monkeypatch.setenv("THATCH_DB_PATH", str(path))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    # The model in use is the one the test embedder serves (else reembed refuses it).
    monkeypatch.setenv("THATCH_MODEL", "mock")
    with Store.open(path) as store:
        store.remember("proj", "Pending one", "# Pending one\n\nrun make test", None, None)
        store.remember("global", "Pending two", "# Pending two\n\ntabs not spaces", None, None)
        old = np.ones(384, dtype=np.float32) / np.sqrt(384)
        store.remember("proj", "Old model", "# Old model\n\ndeploy on tags", old, "old/model")
        store.remember("proj", "Current", "# Current\n\nuse structlog", mock_vector("x"), "mock")
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["reembed", *args])


def _embedded(db: Path) -> dict[str, tuple[str | None, bytes | None, str]]:
    return {
        label: (model, blob, updated)
        for label, model, blob, updated in rows(
            db, "SELECT label, model, embedding, updated_at FROM entries"
        )
    }


def test_reembed_fills_pending_and_migrates_other_models(
    db: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """Pending and other-model rows get the embedder's vector and tag; updated_at stays."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    before = _embedded(db)
    result = run()
    assert result.exit_code == 0, result.output
    assert result.stdout == "Re-embedded 3 memories (0 skipped: changed meanwhile).\n"
    after = _embedded(db)
    for label, text in [
        ("Pending one", "# Pending one\n\nrun make test"),
        ("Pending two", "# Pending two\n\ntabs not spaces"),
        ("Old model", "# Old model\n\ndeploy on tags"),
    ]:
        model, blob, updated = after[label]
        assert model == "mock" and updated == before[label][2]
        assert blob is not None
        assert np.allclose(np.frombuffer(blob, "<f4"), mock_vector(text), atol=1e-6)
    assert after["Current"] == before["Current"]


def test_missing_only_leaves_other_models(
    db: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """--missing fills pending memories only."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    result = run("--missing", "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        '{"reembedded": 2, "skipped": 0, "engine_reembedded": 0, "engine_skipped": 0}\n'
    )
    assert _embedded(db)["Old model"][0] == "old/model"


def test_dry_run_counts_and_changes_nothing(
    db: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """--dry-run reports what would be re-embedded and writes nothing."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    before = _embedded(db)
    result = run("--dry-run")
    assert (result.exit_code, result.stdout) == (0, "Would re-embed 3 memories in 2 stores.\n")
    assert _embedded(db) == before
    one_store = run("--dry-run", "--store", "global")
    assert one_store.stdout == "Would re-embed 1 memory in 1 store.\n"
    assert run("--store", "global").stdout == (
        "Re-embedded 1 memory (0 skipped: changed meanwhile).\n"
    )


def test_unknown_store_is_an_error(db: Path) -> None:
    """A --store that does not exist names the stores that do, exit 1."""
    result = run("--store", "nope")
    assert result.exit_code == 1
    assert result.stderr == 'Error: no store named "nope".\nStores: global, proj\n'
    # A hostile name stays one quoted token: no line of its own passes as thatch's Fix.
    hostile = run("--store", 'x"\nFix: rm -rf ~')
    assert hostile.exit_code == 1
    assert hostile.stderr == (
        'Error: no store named "x\\"\\nFix: rm -rf ~".\nStores: global, proj\n'
    )


def test_bad_batch_is_a_usage_error(db: Path) -> None:
    """--batch outside 1..256 is refused before anything runs (exit 2)."""
    result = run("--batch", "0")
    assert result.exit_code == 2 and "--batch" in result.stderr


def test_embedder_unreachable_loses_nothing(
    db: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No embedder at a remote address: one clear error with a fix, rows untouched."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "127.0.0.1:9")
    before = _embedded(db)
    result = run("--missing")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: embedding service unavailable: ")
    assert "\nFix: " in result.stderr
    assert _embedded(db) == before


def test_unreadable_database_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that is not a database: `Error: cannot open database at …`, exit 1, no traceback."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    monkeypatch.setenv("THATCH_DB_PATH", str(junk))
    result = run("--dry-run")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot open database at {junk}: ")
    assert "Traceback" not in result.output


def test_engine_rows_of_another_model_are_reembedded(
    db: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """Matchers and items of another model (or none) get the embedder's vector and tag."""
    from thatch.frontend.store.engine_store import BEHAVIORS, EngineStore

    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    old = np.ones(384, dtype=np.float32) / np.sqrt(384)
    with Store.open(db) as store:
        engine = EngineStore(store.conn, BEHAVIORS, lock=store.lock)
        engine.record(
            "proj",
            matcher="before a deploy",
            matcher_vector=old,
            statement="run the tests",
            statement_vector=-old,
            model="old/model",
            signal="codify",
            rationale="r",
        )
        store.conn.execute("UPDATE behaviors SET embedding = NULL")
    dry = run("--dry-run")
    assert dry.stdout.splitlines()[-1] == "Would re-embed 2 engine rows."
    result = run()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "Re-embedded 2 engine rows (0 skipped: changed meanwhile)."
    )
    for text, model, blob in rows(
        db,
        "SELECT description, model, embedding FROM behavior_matchers UNION ALL "
        "SELECT statement, model, embedding FROM behaviors",
    ):
        assert model == "mock"
        assert np.allclose(np.frombuffer(blob, "<f4"), mock_vector(text), atol=1e-6)
    assert run("--dry-run").stdout == "Would re-embed 0 memories in 0 stores.\n"


def test_an_embedder_serving_another_model_than_the_one_in_use_is_refused(
    db: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess
) -> None:
    """`thatch model use B` while the running embedder serves A (mock): reembed and its dry
    run counted every memory of A as current and said `0 memories`, so the user thought
    the switch was done. Now both refuse, naming the restart; --missing still fills."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    monkeypatch.delenv("THATCH_MODEL")
    used = CliRunner().invoke(cli, ["model", "use", "some-org/some-model"])
    assert used.exit_code == 0, used.output
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "thatch" / "config.json"
    before = _embedded(db)
    for args in ([], ["--dry-run"], ["--dry-run", "--json"]):
        result = run(*args)
        assert (result.exit_code, result.stdout) == (1, ""), args
        assert result.stderr == (
            "Error: the running embedder serves mock, not the model in use "
            f"some-org/some-model (from config file {config}): re-embedding now would keep "
            "every memory on mock\n"
            "Fix: restart it, then re-embed: thatch embedder stop && thatch embedder start "
            "&& thatch reembed\n"
        ), args
    assert _embedded(db) == before
    filled = run("--missing")
    assert filled.stdout == "Re-embedded 2 memories (0 skipped: changed meanwhile).\n"


def test_a_remote_embedder_serving_another_model_is_refused_with_its_own_fix(
    db: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    """A remote embedder is not restarted from here: the fix names `thatch model use` of
    what it serves, or another address."""
    monkeypatch.setenv("THATCH_MODEL", "some-org/some-model")
    with tcp_embedder(short_tmp) as (_embedder, port):
        monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"127.0.0.1:{port}")
        result = run()
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"Error: the embedder at 127.0.0.1:{port} serves mock, not the model in use "
        "some-org/some-model (from THATCH_MODEL): re-embedding now would keep every memory "
        "on mock\n"
        "Fix: use the model it serves: thatch model use mock; or point THATCH_EMBEDDER_ADDR "
        "at one serving "
        "some-org/some-model\n"
    )


def test_an_embedder_serving_another_model_than_the_default_is_the_active_one(
    db: Path, monkeypatch: pytest.MonkeyPatch, short_tmp: Path
) -> None:
    """Nobody chose a model on this side (no THATCH_MODEL, no config file): a shared
    embedder's model is the active one, and reembed moves every memory to it, as before."""
    monkeypatch.delenv("THATCH_MODEL")
    with tcp_embedder(short_tmp) as (_embedder, port):
        monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"127.0.0.1:{port}")
        result = run()
    assert result.exit_code == 0 and "Error" not in result.stderr, result.stderr
    assert result.stdout == "Re-embedded 3 memories (0 skipped: changed meanwhile).\n"
    assert {model for model, _blob, _updated in _embedded(db).values()} == {"mock"}
