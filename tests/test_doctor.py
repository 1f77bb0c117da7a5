"""`thatch doctor`: every check against real files and a real embedder process; never touches."""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_cleanup import embedder_pids, expected_mock_vector
from tests.support.embedder_proc import EmbedderProcess
from thatch.cli.main import cli
from thatch.common.environment import default_db_path, queue_dir
from thatch.embedder.models.fixes import packaged_checkpoint, unavailable_fix
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.schema import MIGRATIONS


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory without host files, so no setup:<host> check appears."""
    path = tmp_path / "project"
    path.mkdir()
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(path))
    return path


@pytest.fixture
def healthy(project: Path, mock_embedder: EmbedderProcess, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A database with one mock-embedded memory, a queue dir, the embedder, THATCH_MODEL=mock."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    monkeypatch.setenv("THATCH_MODEL", "mock")
    path = default_db_path(os.environ)
    with Store.open(path) as store:
        text = "# Tests\n\nRun pytest."
        store.remember("proj", "Tests", text, expected_mock_vector(text), "mock")
    queue_dir(os.environ).mkdir(parents=True)
    return path


def doctor(*args: str) -> Result:
    return CliRunner().invoke(cli, ["doctor", *args], catch_exceptions=False)


def lines_of(result: Result) -> dict[str, list[str]]:
    """Check name -> its output lines (status line first, then the fix line if any)."""
    checks: dict[str, list[str]] = {}
    name = ""
    for line in result.stdout.splitlines():
        if line.startswith("      fix: "):
            checks[name].append(line)
        else:
            name = line.split("  ")[1]
            checks[name] = [line]
    return checks


def tree(*roots: Path) -> dict[str, tuple[int, int]]:
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for root in roots
        for path in sorted(root.rglob("*"))
    }


def test_healthy_setup_prints_ok_lines_and_exits_0(
    healthy: Path, mock_embedder: EmbedderProcess
) -> None:
    """All checks ok: exact `<status>  <check>  <detail>` lines, exit 0; the thresholds in
    force and where they came from; a machine wired into no host is told how (a warn)."""
    from thatch.frontend.doctor import NOT_WIRED, NOT_WIRED_FIX

    result = doctor()
    assert result.exit_code == 0, result.output
    queue = queue_dir(os.environ)
    pid = mock_embedder.pid
    assert result.stdout.splitlines() == [
        f"ok  database  {healthy} (1 memory in 2 stores)",
        f"ok  queue  {queue} is writable",
        f"ok  embedder  serving at {mock_embedder.address} (model mock, pid {pid})",
        "ok  model  mock (mock; from THATCH_MODEL), served by the embedder; processes "
        "started without THATCH_MODEL use Xenova/bge-small-en-v1.5; save this one with: "
        "thatch model use mock",
        "ok  thresholds  recall nudge 0.55, recall floor 0, duplicate 0.85, prediction 0.6, "
        "behavior 0.6 (built-in defaults: mock is not calibrated)",
        "ok  memories  1 memory, all embedded with mock",
        f"warn  setup  {NOT_WIRED}",
        f"      fix: {NOT_WIRED_FIX}",
    ]


def test_skip_integrity_says_the_file_was_not_read_for_damage(healthy: Path) -> None:
    """`--skip-integrity` (the ui's Status page at each visit) leaves out the read of the
    whole file, and its ok says so: never an ok that reads as "no damage found"."""
    result = doctor("--skip-integrity")
    assert lines_of(result)["database"] == [
        f"ok  database  {healthy} (1 memory in 2 stores); whole file not read for damage "
        "(--skip-integrity)"
    ]
    assert lines_of(doctor())["database"] == [f"ok  database  {healthy} (1 memory in 2 stores)"]


def test_json_is_one_document_of_checks(healthy: Path) -> None:
    """--json prints a list of {status, check, detail, fix} objects, fix null when ok."""
    result = doctor("--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert [item["check"] for item in document] == [
        "database",
        "queue",
        "embedder",
        "model",
        "thresholds",
        "memories",
        "setup",
    ]
    for item in document[:-1]:
        assert set(item) == {"status", "check", "detail", "fix"}
        assert item["status"] == "ok" and item["fix"] is None
        assert isinstance(item["detail"], str) and item["detail"]


def test_no_embedder_fails_without_starting_one(
    healthy: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing listening: FAIL embedder with `thatch embedder start`, exit 1, no server spawned."""
    socket_path = short_tmp / "none.sock"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{socket_path}")
    before = tree(tmp_path, short_tmp)
    result = doctor()
    assert result.exit_code == 1
    assert lines_of(result)["embedder"] == [
        f"FAIL  embedder  nothing is answering at unix://{socket_path}",
        "      fix: thatch embedder start",
    ]
    assert not socket_path.exists()
    assert embedder_pids(str(socket_path)) == []
    assert tree(tmp_path, short_tmp) == before


def test_remote_embedder_unreachable_names_the_address_variable(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote address unanswered: FAIL naming THATCH_EMBEDDER_ADDR; no local-cache model alarm."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "127.0.0.1:9")
    monkeypatch.setenv("THATCH_MODEL", "some-org/some-model")
    result = doctor()
    assert result.exit_code == 1
    assert lines_of(result)["embedder"] == [
        "FAIL  embedder  nothing is answering at 127.0.0.1:9",
        "      fix: check THATCH_EMBEDDER_ADDR",
    ]
    assert lines_of(result)["model"] == [
        "ok  model  some-org/some-model (from THATCH_MODEL; not cached here; "
        "the remote embedder at 127.0.0.1:9 would load it, once it answers)"
    ]


def test_missing_database_is_reported_not_created(project: Path, tmp_path: Path) -> None:
    """No database yet: warn with a fix, and doctor does not create the file or its directory."""
    path = default_db_path(os.environ)
    result = doctor()
    assert lines_of(result)["database"] == [
        f"warn  database  {path} does not exist yet (thatch creates it on first use)",
        "      fix: to create it: thatch stores; or set THATCH_DB_PATH if it lives elsewhere",
    ]
    assert lines_of(result)["memories"] == ["ok  memories  no memories yet"]
    assert not path.exists() and not path.parent.exists()


def test_database_that_cannot_be_created_fails(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database path under a regular file: FAIL database with the permissions fix."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    monkeypatch.setenv("THATCH_DB_PATH", str(blocker / "thatch.db"))
    result = doctor()
    assert result.exit_code == 1
    assert lines_of(result)["database"] == [
        f"FAIL  database  {blocker / 'thatch.db'} does not exist and cannot be created",
        f"      fix: check permissions of {blocker} or set THATCH_DB_PATH",
    ]


def test_corrupt_database_fails_and_is_left_alone(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A garbage database file: FAIL database with its fix; bytes unchanged, memories unchecked."""
    path = tmp_path / "db" / "thatch.db"
    path.parent.mkdir()
    garbage = b"this is not sqlite " * 400
    path.write_bytes(garbage)
    monkeypatch.setenv("THATCH_DB_PATH", str(path))
    result = doctor()
    assert result.exit_code == 1
    database = lines_of(result)["database"]
    # SQLite's own words, and the fix they call for: not a permissions fix.
    assert database[0] == f"FAIL  database  {path} is not a database: file is not a database"
    assert database[1] == (
        f"      fix: move {path} aside (or restore it from a backup); thatch makes a new one"
    )
    assert lines_of(result)["memories"][0].startswith("warn  memories  not checked")
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in path.parent.iterdir()) == ["thatch.db"]


def test_outdated_schema_warns_and_is_not_migrated(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database without thatch's migrations: warn, and doctor runs no migration."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE stores (name TEXT PRIMARY KEY)")
    conn.commit()
    conn.close()
    monkeypatch.setenv("THATCH_DB_PATH", str(path))
    result = doctor()
    assert lines_of(result)["database"] == [
        f"warn  database  {path} has an older schema ({len(MIGRATIONS)} migrations pending)",
        "      fix: migrate it by running one command: thatch stores",
    ]
    conn = sqlite3.connect(path)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert tables == {"stores", "sqlite_autoindex_stores_1"}


def test_pending_memories_warn_with_reembed_missing(healthy: Path) -> None:
    """A memory saved without a vector: warn memories, fix `thatch reembed --missing`."""
    with Store.open(healthy) as store:
        store.remember("proj", "Later", "# Later\n\nNo vector yet.", None, None)
    result = doctor()
    assert result.exit_code == 0
    assert lines_of(result)["memories"] == [
        "warn  memories  1 memory not indexed yet (pending)",
        "      fix: thatch reembed --missing",
    ]


def test_memories_of_another_model_warn_with_reembed(healthy: Path) -> None:
    """A memory tagged with another model than the served one: warn, fix `thatch reembed`."""
    with Store.open(healthy) as store:
        text = "# Old\n\nFrom bge."
        store.remember("proj", "Old", text, expected_mock_vector(text), "Xenova/bge-small-en-v1.5")
    result = doctor()
    assert lines_of(result)["memories"] == [
        "warn  memories  1 memory embedded with another model than mock",
        "      fix: thatch reembed",
    ]


def doctor_with_answering_hub(monkeypatch: pytest.MonkeyPatch, model: str) -> Result:
    """doctor with THATCH_MODEL=model while a hub answers: a listening socket that never
    accepts (the hub is only connected to, nothing downloaded)."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("THATCH_MODEL", model)
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
        return doctor()


def test_model_that_needs_download_warns(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub model not in the cache while the hub answers: warn, fix `thatch model pull ID`;
    the hub is only connected to (a listening socket that never accepts), nothing downloaded."""
    result = doctor_with_answering_hub(monkeypatch, "some-org/some-model")
    assert lines_of(result)["model"] == [
        "warn  model  some-org/some-model (from THATCH_MODEL) is not cached; "
        "the embedder downloads it on first start",
        "      fix: thatch model pull some-org/some-model",
    ]


def test_unreachable_hub_and_missing_model_names_the_offline_fix(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hub not answering (nothing listens on the port): FAIL with import/use, never pull."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("THATCH_MODEL", "some-org/some-model")
    result = doctor()
    assert result.exit_code == 1
    assert lines_of(result)["model"] == [
        "FAIL  model  some-org/some-model (from THATCH_MODEL) is not on this machine and "
        "the hub http://127.0.0.1:9 does not answer",
        "      fix: "
        + unavailable_fix("some-org/some-model", os.environ, hub=False, by_variable=True),
    ]
    assert "model pull" not in result.output


def test_offline_and_missing_model_fails(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 and a hub model not cached: FAIL model with the offline fix, which
    names the packaged checkpoint's exact import command."""
    monkeypatch.setenv("THATCH_MODEL", "some-org/some-model")
    result = doctor()
    assert result.exit_code == 1
    source = packaged_checkpoint()
    assert source is not None
    assert lines_of(result)["model"] == [
        "FAIL  model  some-org/some-model (from THATCH_MODEL) is not on this machine and "
        "HF_HUB_OFFLINE=1",
        # THATCH_MODEL wins over thatch model use: the fix is about the variable first.
        "      fix: THATCH_MODEL=some-org/some-model is set in this environment and wins over "
        "the saved model: import some-org/some-model from a copy of its checkpoint (DIR): thatch "
        "model import DIR --model-id some-org/some-model; or with THATCH_MODEL unset, "
        "import the packaged offline model: "
        f"thatch model import {source} --model-id sentence-transformers/all-MiniLM-L6-v2 "
        "&& thatch model use sentence-transformers/all-MiniLM-L6-v2; or import a "
        "sentence-transformers checkpoint (DIR: its directory) and use the id the import prints "
        "(ID): thatch model import DIR && thatch model use ID",
    ]


def test_adapted_model_not_built_fails_naming_the_pull(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model thatch builds (checkpoint + shipped adapter) is never downloaded by the
    embedder: not built yet is a FAIL, with the pull when the hub answers."""
    result = doctor_with_answering_hub(monkeypatch, "all-MiniLM-L6-v2-code")
    assert result.exit_code == 1
    assert lines_of(result)["model"] == [
        "FAIL  model  thatch/all-MiniLM-L6-v2-code (from THATCH_MODEL) is not built yet "
        "(thatch builds it on this machine from sentence-transformers/all-MiniLM-L6-v2 and "
        "its shipped adapter)",
        "      fix: thatch model pull all-MiniLM-L6-v2-code",
    ]


def test_model_chosen_with_model_use_is_reported_with_its_origin(
    project: Path, minilm_dir: Path
) -> None:
    """No THATCH_MODEL: the model saved by `thatch model use` is the one checked, and doctor
    says it came from the config file."""
    from thatch.common.environment import config_file

    used = CliRunner().invoke(cli, ["model", "use", str(minilm_dir)])
    assert used.exit_code == 0, used.output
    result = doctor()
    assert lines_of(result)["model"] == [
        f"ok  model  sentence-transformers/all-MiniLM-L6-v2 (local dir at {minilm_dir}; "
        f"from config file {config_file(os.environ)})"
    ]


def test_thatch_model_matching_the_saved_choice_needs_no_note(
    healthy: Path, mock_embedder: EmbedderProcess
) -> None:
    """THATCH_MODEL names the model `thatch model use` saved: nothing to add."""
    from thatch.common.environment import config_file

    assert CliRunner().invoke(cli, ["model", "use", "mock"]).exit_code == 0
    result = doctor()
    assert lines_of(result)["model"] == [
        "ok  model  mock (mock; from THATCH_MODEL), served by the embedder"
    ]
    assert config_file(os.environ).is_file()


def test_malformed_config_file_fails_the_model_check_in_one_line(project: Path) -> None:
    from thatch.common.environment import config_file

    path = config_file(os.environ)
    path.parent.mkdir(parents=True)
    path.write_text('{"model": 7}')
    result = doctor()
    assert result.exit_code == 1
    assert lines_of(result)["model"] == [
        f'FAIL  model  the config file {path}: "model" must be a string',
        f"      fix: correct or remove {path}, or set THATCH_MODEL",
    ]
    assert "Traceback" not in result.output


def test_served_model_differs_from_configured_warns(
    healthy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """THATCH_MODEL names another model than the embedder serves: warn with the restart fix."""
    model = tmp_path / "fake-model"
    (model / "onnx").mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "tokenizer.json").write_text("{}")
    (model / "onnx" / "model.onnx").write_bytes(b"onnx")
    (model / "thatch_model.json").write_text('{"model_id": "local:fake"}')
    monkeypatch.setenv("THATCH_MODEL", str(model))
    result = doctor()
    assert lines_of(result)["model"] == [
        "warn  model  the embedder serves mock but the model in use is local:fake "
        "(from THATCH_MODEL)",
        "      fix: thatch embedder stop && thatch embedder start",
    ]
    # The served model is the active one: the mock-embedded memory is not "another model".
    assert lines_of(result)["memories"] == ["ok  memories  1 memory, all embedded with mock"]


def test_detected_host_without_setup_warns(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """THATCH_HOST=claude and no setup: a `setup:claude` warn line with `thatch setup --claude`."""
    monkeypatch.setenv("THATCH_HOST", "claude")
    result = doctor()
    setup = lines_of(result)["setup:claude"]
    assert setup[0].startswith("warn  setup:claude  not installed")
    assert setup[1] == "      fix: thatch setup --claude"
    assert "setup:cursor" not in lines_of(result)


def test_doctor_changes_no_file(
    healthy: Path, tmp_path: Path, mock_embedder: EmbedderProcess
) -> None:
    """Database closed or held open by another connection: doctor adds and changes no file."""
    before = tree(tmp_path)
    assert doctor().exit_code == 0
    assert tree(tmp_path) == before  # no -wal/-shm left behind, no migration, no queue file

    with Store.open(healthy) as store:  # a live connection owns -wal and -shm now
        store.store_names()
        during = tree(tmp_path)
        result = doctor()
        assert result.exit_code == 0, result.output
        assert set(tree(tmp_path)) == set(during)
    assert embedder_pids(str(tmp_path)) == []
    assert re.search(r"\(1 memory in 2 stores\)", result.stdout)


def test_thresholds_line_names_each_source(
    healthy: Path, mock_embedder: EmbedderProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable in force is named; a bad one is a warn saying it is ignored."""
    monkeypatch.setenv("THATCH_RECALL_THRESHOLD", "0.4")
    lines = doctor().stdout.splitlines()
    assert (
        "ok  thresholds  recall nudge 0.4, recall floor 0, duplicate 0.85, prediction 0.6, "
        "behavior 0.6 (built-in defaults: mock is not calibrated; recall nudge from "
        "THATCH_RECALL_THRESHOLD)"
    ) in lines
    monkeypatch.setenv("THATCH_DUPLICATE_THRESHOLD", "high")
    lines = doctor().stdout.splitlines()
    warned = [line for line in lines if line.startswith("warn  thresholds  ")]
    assert len(warned) == 1
    assert 'ignoring THATCH_DUPLICATE_THRESHOLD="high": not a number between 0 and 1' in warned[0]


FORGED = "\nok  forged  all is well\x1b[2K\u202e"
SHOWN = "\\nok  forged  all is well\\u001b[2K\\u202e"


@pytest.mark.parametrize("damaged", [False, True])
def test_paths_are_shown_as_data(
    tmp_path: Path, minilm_dir: Path, monkeypatch: pytest.MonkeyPatch, damaged: bool
) -> None:
    """Directories an agent named (a newline, an ANSI escape, a bidi override in them) are
    shown escaped in the database, queue, model and setup lines and their fixes: every line
    is one of doctor's, none is forged."""
    import shutil

    named = tmp_path / f"x{FORGED}"
    shown = f"{tmp_path}/x{SHOWN}"
    (named / "project").mkdir(parents=True)
    shutil.copytree(minilm_dir, named / "model", copy_function=os.link)
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(named / "project"))
    monkeypatch.setenv("THATCH_DB_PATH", str(named / "db" / "thatch.db"))
    monkeypatch.setenv("THATCH_QUEUE_DIR", str(named / "queue"))
    monkeypatch.setenv("THATCH_MODEL", str(named / "model"))
    monkeypatch.setenv("THATCH_HOST", "claude")
    (named / "db").mkdir()
    if damaged:
        (named / "db" / "thatch.db").write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    result = doctor()
    lines = result.stdout.splitlines()
    assert all(re.match(r"(ok|warn|FAIL)  \S+  |      fix: ", line) for line in lines), lines
    assert not any("forged" in line and shown not in line for line in lines), lines
    checks = lines_of(result)
    assert checks["database"][0].split("  ", 2)[2].startswith(f"{shown}/db/thatch.db ")
    assert checks["queue"] == [f"ok  queue  {shown}/queue (created on first use)"]
    assert f" at {shown}/model;" in checks["model"][0]
    assert f"{shown}/project/CLAUDE.md" in checks["setup:claude"][0]
