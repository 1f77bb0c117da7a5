"""find_duplicates clusters and dedup_mark_checked verdicts (docs/tools.md §find_duplicates,
§dedup_mark_checked)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_embedder import FakeEmbedder, rows, tool_context
from thatch.frontend.store.memory import DuplicatePair
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.formatting import clusters
from thatch.frontend.tools.memory_tools import Tools

BASE = "the deploy pipeline pushes images to the registry then rolls out to the cluster"


@pytest.fixture
def fake() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def tools(tmp_path: Path, fake: FakeEmbedder) -> Iterator[Tools]:
    with tool_context(tmp_path, fake) as ctx:
        yield Tools(ctx)


def save(tools: Tools, label: str, content: str, **extra: object) -> None:
    result = tools.call("memory_remember", {"label": label, "content": content, **extra})
    assert not result.is_error, result.text


def test_clusters_are_connected_components_strongest_first() -> None:
    """Pairs sharing a memory form one cluster; clusters rank by their best pair."""
    pairs = [
        DuplicatePair("a", "A", "b", "B", 0.99),
        DuplicatePair("x", "X", "y", "Y", 0.95),
        DuplicatePair("b", "B", "c", "C", 0.90),
    ]
    found = clusters(pairs)
    assert [cluster.size for cluster in found] == [3, 2]
    assert [pair.score for pair in found[0].pairs] == [0.99, 0.90]


def test_find_duplicates_output(tools: Tools) -> None:
    """Near-duplicates print as 'Cluster of N:' blocks with scored pairs; none → message."""
    save(tools, "Deploy", BASE)
    save(tools, "Deploy pipeline", BASE + " quickly")
    save(tools, "Unrelated", "tabs versus spaces in the editor configuration")
    text = tools.call("find_duplicates", {}).text
    assert re.fullmatch(
        r'Cluster of 2:\n  \[score:0\.\d{3}\] "Deploy" ↔ "Deploy pipeline"', text
    ), text
    assert tools.call("find_duplicates", {"threshold": 1}).text == (
        'No duplicate candidates found in "o/r" above threshold 1.'
    )
    assert tools.call("find_duplicates", {"store": "global", "threshold": "0.9"}).text == (
        'No duplicate candidates found in "global" above threshold 0.9.'
    )


def test_mark_checked_hides_the_pair(tools: Tools, tmp_path: Path) -> None:
    """A verdict is recorded under stored labels and the pair stops being reported."""
    save(tools, "Deploy", BASE)
    save(tools, "Deploy pipeline", BASE + " quickly")
    result = tools.call(
        "dedup_mark_checked",
        {"label_a": "deploy pipeline", "label_b": "DEPLOY", "status": "supplement"},
    )
    assert (result.is_error, result.text) == (
        False,
        '[checked] o/r :: "Deploy pipeline" ↔ "Deploy" → supplement',
    )
    assert rows(
        tmp_path / "thatch.db", "SELECT store, slug_a, slug_b, status FROM dedup_pairs"
    ) == [("o/r", "deploy", "deploy-pipeline", "supplement")]
    assert tools.call("find_duplicates", {}).text.startswith("No duplicate candidates")


def test_mark_checked_refusals_record_nothing(tools: Tools, tmp_path: Path) -> None:
    """Same slug, missing labels (one or both) → isError and no verdict row."""
    save(tools, "Deploy", BASE)
    same = tools.call(
        "dedup_mark_checked", {"label_a": "Deploy", "label_b": "deploy!", "status": "unrelated"}
    )
    assert (same.is_error, same.text) == (
        True,
        'label_a and label_b name the same memory ("deploy")',
    )
    one = tools.call(
        "dedup_mark_checked", {"label_a": "Deploy", "label_b": "Gone", "status": "duplicate"}
    )
    assert (one.is_error, one.text) == (
        True,
        'Not recorded: no memory labeled "Gone" in store "o/r".',
    )
    both = tools.call("dedup_mark_checked", {"label_a": "P", "label_b": "Q", "status": "duplicate"})
    assert both.text == (
        'Not recorded: no memory labeled "P" in store "o/r" and '
        'no memory labeled "Q" in store "o/r".'
    )
    assert rows(tmp_path / "thatch.db", "SELECT * FROM dedup_pairs") == []


def test_find_duplicates_fills_pending_first(tools: Tools, fake: FakeEmbedder) -> None:
    """Pending memories are embedded before the scan; embedder down then → isError."""
    fake.unavailable = "nothing is listening at unix:///x.sock"
    save(tools, "Deploy", BASE)
    save(tools, "Deploy pipeline", BASE + " quickly")
    down = tools.call("find_duplicates", {})
    assert (down.is_error, down.text) == (
        True,
        "Embedding service unavailable: nothing is listening at unix:///x.sock. "
        "Fix: run thatch embedder start",
    )
    fake.unavailable = None
    assert tools.call("find_duplicates", {}).text.startswith("Cluster of 2:")
    assert tools.ctx.store.pending_count("o/r") == 0


def test_find_duplicates_asks_whether_any_is_pending_not_how_many(
    tools: Tools, fake: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Duplicates page and ``thatch dedup`` asks whether the store holds pending
    memories before it fills them: one row read (``up_to=0``), where counting them all
    read every pending row of the backlog at each visit."""
    fake.unavailable = "down"
    save(tools, "Deploy", BASE)
    fake.unavailable = None
    asked: list[object] = []
    counted = Store.pending_count

    def spy(store: Store, name: str | None = None, *, up_to: int | None = None) -> int:
        asked.append(up_to)
        return counted(store, name, up_to=up_to)

    monkeypatch.setattr(Store, "pending_count", spy)
    assert tools.call("find_duplicates", {}).text.startswith("No duplicate")
    assert asked and set(asked) == {0}, asked
    assert tools.ctx.store.pending_count("o/r") == 0


def test_find_duplicates_pages_are_bounded_and_name_the_next_offset(tools: Tools) -> None:
    """25 pairs and one cluster of 30 near-copies: the first page holds 20 clusters and
    names offset 20; the big cluster shows 20 pairs and how many more it has; the next
    page holds the other 6 clusters and no further offset (issue 21 §2)."""
    import numpy as np

    rng = np.random.default_rng(0)
    store = tools.ctx.store
    for c in range(25):
        base = rng.normal(size=32)
        for k in range(2):
            vector = (base + rng.normal(size=32) * 0.01).astype(np.float32)
            store.remember("o/r", f"pair {c} {k}", "# x", vector, "m")
    base = rng.normal(size=32) * 3
    for k in range(30):
        store.remember("o/r", f"copy {k}", "# x", (base + rng.normal(size=32) * 0.01), "m")
    first = tools.call("find_duplicates", {"threshold": 0.9}).text
    blocks = first.split("\n\n")
    assert blocks[-1] == "Clusters 1–20 of 26; next page: offset 20."
    assert len(blocks) == 21 and all(b.startswith("Cluster of ") for b in blocks[:-1])
    big = next(b for b in blocks if b.startswith("Cluster of 30:"))
    lines = big.splitlines()
    assert len(lines) == 22 and re.fullmatch(r"  … \d+ more pairs in this cluster .*", lines[-1])
    second = tools.call("find_duplicates", {"threshold": 0.9, "offset": 20}).text
    assert second.count("Cluster of ") == 6 and "next page" not in second
    labels = set(re.findall(r'"([^"]+)"', first + second))
    assert {f"pair {c} {k}" for c in range(25) for k in range(2)} <= labels
    assert tools.call("find_duplicates", {"threshold": 0.9, "offset": 26}).text == (
        "No clusters from offset 26 (26 in all)."
    )
    assert tools.call("find_duplicates", {"offset": -1}).is_error
