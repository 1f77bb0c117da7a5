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


def _dense(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import recall_dense  # type: ignore[import-not-found]

    return recall_dense


def test_label_names_code_only_for_code_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """The label lever's gate (bench/recall_dense.py): labels naming code get a label
    vector, a conversation turn's label (names, date, turn) does not."""
    recall_dense = _dense(monkeypatch)
    for label in ["click.core invoke", "batch/v1 JobSpec backoffLimit", "db_path notes"]:
        assert recall_dense.names_code(label), label
    for label in ["Maya & Jon 2023-05-08 turn 3 Maya", "deploy notes", "User prefs"]:
        assert not recall_dense.names_code(label), label


def test_dense_levers_at_rest_rank_as_the_store_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Feedback with α 0 and a label vector gated off every memory give the shipped
    ranking, a positive α moves it: the levers' table compares like with like."""
    import numpy as np

    recall_dense = _dense(monkeypatch)
    recall_quality, recall_sets = _bench(monkeypatch)
    rng = np.random.default_rng(3)
    memories = [recall_sets.Memory(f"turn {i} Maya", f"text {i}") for i in range(40)]
    questions = [recall_sets.Question(f"what did Maya say {i}?", i) for i in range(40)]
    dev = recall_sets.DevSet("synthetic", memories, questions)
    slugs = [f"turn-{i}-maya" for i in range(40)]
    prepared = recall_dense.Prepared(
        dev,
        list(range(40)),
        {slug: i for i, slug in enumerate(slugs)},
        recall_quality.unit(rng.normal(size=(40, 8))),
        recall_quality.unit(rng.normal(size=(40, 8))),
        [{slugs[(i + 1) % 40]: 2.0, slugs[i]: 1.0} for i in range(40)],
        [[] for _ in range(40)],
        np.asarray([recall_dense.half(q.text) for q in questions]),
    )
    shipped = prepared.fused(prepared.query @ prepared.whole.T)
    assert np.allclose(recall_dense.rocchio(prepared, 0.0, 3, dense=False), shipped, atol=1e-12)
    assert not np.allclose(recall_dense.rocchio(prepared, 0.5, 3, dense=False), shipped)
    labels = recall_quality.unit(rng.normal(size=(40, 8)))
    gated = recall_dense.label_mix(prepared, labels, 1.0, code_only=True)
    assert np.array_equal(gated, shipped)
    assert not np.allclose(recall_dense.label_mix(prepared, labels, 1.0), shipped)
