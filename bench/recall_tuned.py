"""all-MiniLM-L6-v2 fine-tuned on code facts (``finetune_encoder.py``) against the shipped
model on issue 24's dev sets, the held-out standard library's docstrings included.

    python bench/recall_tuned.py DIR [DIR ...] [--size 800] [--seed 15]

Each DIR is a trained checkpoint made servable by ``thatch model import`` (its ``onnx/``
holds ``model.onnx`` and ``model_quantized.onnx``, from thatch's own converter and
quantizer). Both files run in process with the embedder's session options; the shipped
all-MiniLM-L6-v2 int8 comes from a real embedder process, as in ``recall_models.py``.
Vectors are cached per file content, so a retrained DIR is embedded again. ``--weights``
chooses each model's fusion weight on half the questions and reports the other half
(``recall_e5.py``'s sweep). ``--queries-only`` pairs each DIR's queries with the shipped
model's memory vectors. ``--ensemble`` adds score ensembles: the mean cosine of every
DIR's int8 file, and the first DIR's beside the shipped model (0.7 / 0.3). The shipped
int8 file also runs in process, as a control.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from _common import add_cache_option
from recall_dense import Prepared, prepare
from recall_e5 import print_weights
from recall_models import (
    OnnxVectors,
    cost_texts,
    prepare_shipped,
    print_cost,
    print_recall,
    shipped_encoder,
)
from recall_sets import all_sets, code_set
from thatch.embedder.client.kind import Kind
from thatch.embedder.models.registry import sha256_file


class Ensemble:
    """Cosine = the weighted mean of the parts' cosines: their unit vectors, each scaled by
    the square root of its weight, side by side."""

    def __init__(self, parts: list[OnnxVectors], weights: list[float]) -> None:
        self.parts, self.weights = parts, weights

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        scaled = [
            np.sqrt(w) * p.get(texts, kind) for p, w in zip(self.parts, self.weights, strict=True)
        ]
        return np.concatenate(scaled, axis=1).astype(np.float32)


class QueriesOnly:
    """Memories embedded by the shipped model, queries by a trained one (a model trained
    with ``finetune_encoder.py --queries-only``: stored vectors stay the shipped model's)."""

    def __init__(self, memories: OnnxVectors, queries: OnnxVectors) -> None:
        self.memories, self.queries = memories, queries

    def pick(self, kind: Kind) -> OnnxVectors:
        return self.queries if kind == Kind.QUERY else self.memories

    def encode(self, texts: list[str], kind: Kind) -> np.ndarray:
        return self.pick(kind).encode(texts, kind)

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        return self.pick(kind).get(texts, kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("models", type=Path, nargs="+", help="imported trained model dirs")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--no-fp32", action="store_true", help="only the int8 files")
    parser.add_argument(
        "--weights", action="store_true", help="also the fusion weight chosen per model"
    )
    parser.add_argument(
        "--queries-only",
        action="store_true",
        help="the DIRs embed queries only; memories keep the shipped model's vectors",
    )
    parser.add_argument("--ensemble", action="store_true", help="also score ensembles")
    add_cache_option(parser)
    args = parser.parse_args()
    devs = [*all_sets(args.size, args.seed, args.cache),
            code_set(args.size, args.seed, held_out=True)]  # fmt: skip
    minilm, shipped = prepare_shipped(devs, args.cache)
    results: dict[str, list[Prepared]] = {"minilm-int8": shipped}
    files = {"minilm-int8": minilm / "onnx" / "model_quantized.onnx"}
    in_process = shipped_encoder(minilm, args.cache)
    # the same file in process: a control for the tuned models' in-process figures
    results["minilm-int8 in process"] = [prepare(dev, in_process) for dev in devs]
    encoders: dict[str, OnnxVectors | QueriesOnly] = {}
    for model in args.models:
        kinds = ["model_quantized.onnx"] + ([] if args.no_fp32 else ["model.onnx"])
        for kind in kinds:
            path = model / "onnx" / kind
            name = f"{model.name}-{'int8' if 'quantized' in kind else 'fp32'}"
            tuned = OnnxVectors(f"tuned-{name}-{sha256_file(path)[:12]}", path,
                                model / "tokenizer.json", 256, 0, args.cache)  # fmt: skip
            encoder = QueriesOnly(in_process, tuned) if args.queries_only else tuned
            if args.queries_only:
                name += " queries"
            results[name] = [prepare(dev, encoder) for dev in devs]
            encoders[name], files[name] = encoder, path
    if args.ensemble:
        int8 = [
            e for n, e in encoders.items() if n.endswith("-int8") and isinstance(e, OnnxVectors)
        ]
        mixes = {
            "mean of the DIRs' int8": Ensemble(int8, [1 / len(int8)] * len(int8)),
            "first DIR 0.7 + shipped 0.3": Ensemble([int8[0], in_process], [0.7, 0.3]),
        }
        for name, mix in mixes.items():
            results[name] = [prepare(dev, mix) for dev in devs]
    print_recall(results)
    if args.weights:
        print_weights(results)
    queries, passages = cost_texts(devs)
    encoders["minilm-int8"] = in_process
    print_cost([(name, encoders[name], files[name]) for name in files], queries, passages)


if __name__ == "__main__":
    main()
