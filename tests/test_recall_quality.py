"""Recall ranking on the conversational dev set (issue 24, docs/database.md §ranking): the
real MiniLM and the shipped fusion reach the issue's target, and fusion beats either half."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))  # the bench imports its siblings by name
    import recall_quality  # type: ignore[import-not-found]
    import recall_sets  # type: ignore[import-not-found]

    return recall_quality, recall_sets


def test_conversational_recall_reaches_the_target(
    tmp_path: Path, minilm_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from thatch.embedder.client.embedder_client import EmbedderClient

    recall_quality, recall_sets = _bench(monkeypatch)
    dev = recall_sets.conversation_set()
    assert len(dev.questions) >= 100
    address = minilm_server.address  # type: ignore[attr-defined]
    with EmbedderClient(address, autostart=False) as client:
        rows = recall_quality.measure(dev, recall_quality.Vectors(tmp_path, client, "minilm"))
    figures = {name: (float(r1), float(r5), float(mrr)) for _, name, r1, r5, mrr in rows}
    dense = figures["dense (cosine)"]
    lexical = figures["lexical (BM25), without column camel"]
    fused = next(value for name, value in figures.items() if name.startswith("fused, store"))
    assert fused[1] >= 0.85  # issue 24's conversational R@5 target
    assert fused[0] > max(dense[0], lexical[0])
    assert fused[2] > max(dense[2], lexical[2])


def test_every_question_answers_one_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    _, recall_sets = _bench(monkeypatch)
    dev = recall_sets.conversation_set()
    assert len({memory.label for memory in dev.memories}) == len(dev.memories)
    targets = [question.target for question in dev.questions]
    assert len(set(targets)) == len(targets)  # one question per answering turn
    assert all(0 <= target < len(dev.memories) for target in targets)


def test_camelcase_set_reads_jsdoc_of_types_and_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The camelcase dev set's parser: a memory per documented type and field (label: API
    file, type, field), the first sentence the query, without the field name it starts
    with; a description without a second sentence is no fact."""
    _, recall_sets = _bench(monkeypatch)
    api = tmp_path / "package" / "batch"
    api.mkdir(parents=True)
    (api / "v1.d.ts").write_text(
        "/**\n * JobSpec describes how the job execution will look like.\n *\n"
        " * It holds the pod template and the policies that decide when the job is done.\n"
        " */\nexport interface JobSpec {\n"
        "    /** backoffLimitPerIndex specifies the limit for the number of retries within an"
        " index before marking this index as failed. When enabled the number of failures per"
        " index is kept in the pod's annotation. */\n"
        "    backoffLimitPerIndex?: number;\n"
        "    /** Only one sentence here. */\n    parallelism?: number;\n}\n",
        encoding="utf-8",
    )
    pairs = recall_sets.jsdoc_pairs(tmp_path / "package")
    assert [(p.name, p.query) for p in pairs] == [
        ("batch/v1 JobSpec", "JobSpec describes how the job execution will look like."),
        (
            "batch/v1 JobSpec backoffLimitPerIndex",
            "specifies the limit for the number of retries within an index before marking "
            "this index as failed.",
        ),
    ]
    assert pairs[1].body.startswith("When enabled the number of failures")
