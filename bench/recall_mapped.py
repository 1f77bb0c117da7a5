"""MiniLM's query mapped into EmbeddingGemma's space: Gemma's memories at MiniLM's query cost?

    python bench/recall_mapped.py --gemma DIR [--size 800] [--seed 15]

DIR is EmbeddingGemma-300M as ``recall_gemma.py`` takes it. Memories are embedded by Gemma
(a remember could pay that in the background), queries by MiniLM int8 (a recall's cost
stays MiniLM's) and mapped by a linear map (ridge with a bias, ``--lam``) fitted on pairs
of vectors of the same texts: the tune half's questions (MiniLM's query vector → Gemma's
query vector) and, with ``passages``, every memory (MiniLM's → Gemma's document vector).
No relevance judgement enters the fit. Reported on the report half of every set (R@5 and
R@1, dense and fused as ``Store.search`` fuses), beside MiniLM and Gemma alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from _common import add_cache_option, embedder_running, print_table
from embedder import prepare_models
from gemma_onnx import build_file
from recall_dense import Prepared, figures, prepare
from recall_gemma import GemmaVectors
from recall_quality import Vectors
from recall_sets import all_sets
from thatch.embedder.client.embedder_client import EmbedderClient

F64 = np.ndarray


def with_bias(x: F64) -> F64:
    return np.hstack([x, np.ones((len(x), 1))])


def fit(x: F64, y: F64, lam: float) -> F64:
    xb = with_bias(x)
    return np.linalg.solve(xb.T @ xb + lam * np.eye(xb.shape[1]), xb.T @ y)


def mapped(w: F64, x: F64) -> F64:
    out = with_bias(x) @ w
    return np.asarray(out / np.linalg.norm(out, axis=1, keepdims=True))


def cells(p: Prepared, cos: F64) -> str:
    dense, fused = figures(p, cos, False), figures(p, p.fused(cos), False)
    return f"{dense[1]:.3f} / {fused[1]:.3f} / {fused[0]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gemma", type=Path, required=True, help="embeddinggemma-300m dir")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--lam", type=float, nargs="+", default=[0.1, 1.0])
    add_cache_option(parser)
    args = parser.parse_args()
    devs = all_sets(args.size, args.seed, args.cache)
    minilm = prepare_models(args.cache, ["minilm-int8"])["minilm-int8"]
    with (
        embedder_running(str(minilm)) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        small = [prepare(d, Vectors(args.cache, client, "minilm-int8")) for d in devs]
    gemma = GemmaVectors(args.gemma, build_file(args.gemma, args.cache / "gemma" / "model.onnx"),
                         args.cache, 256)  # fmt: skip
    large = [prepare(d, gemma) for d in devs]
    rows = [[m.dev.name, "MiniLM", cells(m, m.query @ m.whole.T)] for m in small]
    rows += [[g.dev.name, "Gemma", cells(g, g.query @ g.whole.T)] for g in large]
    for fitted_on in ("questions", "questions + passages"):
        xs = [m.query[m.tune] for m in small]
        ys = [g.query[g.tune] for g in large]
        if fitted_on != "questions":
            xs += [m.whole for m in small]
            ys += [g.whole for g in large]
        for lam in args.lam:
            w = fit(np.vstack(xs), np.vstack(ys), lam)
            name = f"mapped ({fitted_on}, λ {lam:g})"
            for m, g in zip(small, large, strict=True):
                rows.append([g.dev.name, name, cells(g, mapped(w, m.query) @ g.whole.T)])
    rows.sort(key=lambda row: [d.name for d in devs].index(row[0]))
    print_table(
        "MiniLM queries mapped into Gemma's space (report half of each set)",
        ["set", "queries", "dense R@5 / fused R@5 / fused R@1"],
        rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
