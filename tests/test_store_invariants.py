"""The memory-store seed's key invariants 1–7, each proven at the store level."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import thatch.frontend
from thatch.frontend.store.memory_store import RememberOutcome, Store

# The whole store package plus the frontend modules it uses.
STORE_PACKAGE = Path(thatch.frontend.__file__).parent / "store"
STORE_MODULES = [
    "project",
    "errors",
    "timefmt",
    *sorted(f"store/{path.stem}" for path in STORE_PACKAGE.glob("*.py")),
]
EMBEDDING_MODULES = ("thatch.embedder", "onnxruntime", "tokenizers", "grpc", "huggingface_hub")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db") as opened:
        yield opened


def vec(*values: float) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_invariant_1_no_global_mutable_state(tmp_path: Path) -> None:
    """Two stores in one process share nothing: own file, own clock, own cache."""
    first_clock = lambda: datetime(2020, 1, 1, tzinfo=UTC)  # noqa: E731
    second_clock = lambda: datetime(2030, 1, 1, tzinfo=UTC)  # noqa: E731
    with (
        Store.open(tmp_path / "one.db", clock=first_clock) as one,
        Store.open(tmp_path / "two.db", clock=second_clock) as two,
    ):
        one.remember("p", "shared label", "# a", vec(1, 0), "m")
        two.remember("p", "shared label", "# b", vec(0, 1), "m")
        assert [m.memory.content for m in one.search(["p"], vec(1, 0))] == ["# a"]
        assert [m.memory.content for m in two.search(["p"], vec(1, 0))] == ["# b"]
        assert one.show("p", "shared label").created_at == "2020-01-01T00:00:00.000Z"  # type: ignore[union-attr]
        assert two.show("p", "shared label").created_at == "2030-01-01T00:00:00.000Z"  # type: ignore[union-attr]


def test_invariant_2_store_never_embeds() -> None:
    """No store-layer module imports an embedding runtime, and importing the store loads none."""
    root = Path(thatch.frontend.__file__).parent
    for name in STORE_MODULES:
        tree = ast.parse((root / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported = [node.module or ""]
            else:
                continue
            assert not any(m.startswith(EMBEDDING_MODULES) for m in imported), (name, imported)
    code = (
        "import sys, thatch.frontend.store.memory_store, thatch.frontend.project; "
        f"print([m for m in sys.modules if m.startswith({EMBEDDING_MODULES!r})])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_invariant_3_dimension_not_model_tag_discriminates(store: Store) -> None:
    """Same-dimension rows of another model rank normally; other dimensions are skipped."""
    store.remember("p", "tag-a", "# a", vec(1, 0, 0), "model-a")
    store.remember("p", "tag-b", "# b", vec(0.9, 0.1, 0), "model-b")
    store.remember("p", "wide", "# w", vec(1, 0, 0, 0), "model-a")
    found = store.search(["p"], vec(1, 0, 0))
    assert [(m.memory.slug, m.memory.model) for m in found] == [
        ("tag-a", "model-a"),
        ("tag-b", "model-b"),
    ]
    similar = store.find_similar("p", vec(1, 0, 0), threshold=0.5)
    assert [m.memory.slug for m in similar] == ["tag-a", "tag-b"]


def test_invariant_4_store_creation_is_implicit(store: Store) -> None:
    """The first remember into a new store creates it; nothing else is needed."""
    assert not store.store_exists("acme/new")
    assert store.remember("acme/new", "x", "# x", vec(1, 0), "m") is RememberOutcome.SAVED
    assert store.store_exists("acme/new")
    assert store.store_names() == ["acme/new", "global"]


def test_invariant_5_repo_and_global_scope_is_searched_together(store: Store) -> None:
    """Searching [repo, 'global'] returns memories of both; global always exists."""
    assert "global" in store.store_names()
    store.remember("acme/app", "repo fact", "# r", vec(1, 0), "m")
    store.remember("global", "user pref", "# g", vec(0.8, 0.2), "m")
    store.remember("other/app", "elsewhere", "# e", vec(1, 0), "m")
    found = store.search(["acme/app", "global"], vec(1, 0))
    assert [(m.memory.store, m.memory.slug) for m in found] == [
        ("acme/app", "repo-fact"),
        ("global", "user-pref"),
    ]


def test_invariant_6_similarity_warning_never_blocks_save(store: Store) -> None:
    """find_similar reports a near-duplicate, and remember saves regardless."""
    store.remember("p", "deploy steps", "# deploy steps\n\nrun make", vec(1, 0), "m")
    near = store.find_similar("p", vec(1, 0.01), exclude_slug="deploy-process")
    assert [m.memory.slug for m in near] == ["deploy-steps"] and near[0].score >= 0.85
    outcome = store.remember("p", "deploy process", "# deploy process", vec(1, 0.01), "m")
    assert outcome is RememberOutcome.SAVED
    assert [m.slug for m in store.list("p")] == ["deploy-process", "deploy-steps"]


def test_invariant_7_search_records_no_usage_recall_does(store: Store) -> None:
    """search stamps nothing; recall stamps exactly the returned rows, once each."""
    for i, value in enumerate((1.0, 0.9, 0.5, -1.0)):
        store.remember("p", f"m{i}", f"# m{i}", vec(value, 1 - abs(value)), "m")

    def telemetry() -> dict[str, tuple[int, str | None]]:
        return {m.slug: (m.recall_count, m.last_recalled_at) for m in store.list("p")}

    before = telemetry()
    assert len(store.search(["p"], vec(1, 0), limit=2)) == 2
    assert len(store.find_similar("p", vec(1, 0))) >= 1
    store.find_duplicates("p")
    assert telemetry() == before
    returned = {m.memory.slug for m in store.recall(["p"], vec(1, 0), limit=2)}
    after = telemetry()
    for slug, (count, stamp) in after.items():
        if slug in returned:
            assert count == 1 and stamp is not None
        else:
            assert (count, stamp) == before[slug]
    assert len(returned) == 2
