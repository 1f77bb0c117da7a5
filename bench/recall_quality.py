"""Recall quality: R@1, R@5 and MRR of dense, lexical and fused ranking (issue 15).

    python bench/recall_quality.py [--model minilm-int8|minilm-fp32] [--size 800]
                                   [--held-out]

The development set is built from the docstrings of third-party packages installed beside
thatch (numpy, click, grpc, huggingface_hub, starlette, pydantic, …; parsed with ``ast``,
never imported): the query is a docstring's summary line, the memory its body, as issue
15 measured. Every memory is saved through ``Store.remember`` into a temp SQLite file (so
the lexical index is the one its triggers build) with its vector from a real embedder
process serving the packaged all-MiniLM-L6-v2. Rankings, over the whole set:
- dense: cosine alone (``Store.search`` without text);
- lexical: BM25 alone (``lexical_hits``); a memory it does not return has no rank;
- fused: ``Store.search(text=query)``, the ranking recall uses;
- a sweep of the lexical weight, computed over all memories with the same formula
  (cosine + weight × BM25 / the query's best BM25), which chose ``LEXICAL_WEIGHT``.
``--held-out`` measures CPython's standard library docstrings instead, with the weight as
chosen (no sweep): the held-out check, run once, not used to choose anything.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import os
import random
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _common import embedder_running, print_table
from embedder import prepare_models
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.store import lexical
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.slugs import slugify

STORE = "dev"
DEV_PACKAGES = [
    "numpy", "click", "grpc", "huggingface_hub", "starlette", "pydantic", "anyio",
    "jsonschema", "pygments", "yaml", "attr", "fsspec", "onnx", "packaging", "tqdm",
    "uvicorn", "mcp", "cryptography", "setuptools", "_pytest", "h11", "referencing",
]  # fmt: skip
WEIGHTS = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4]
EXACT_LIFTS = [0.0, 0.25, 0.5, 1.0]
MAX_BODY = 4000
EMBED_BATCH = 32


@dataclass(frozen=True)
class Pair:
    query: str
    body: str
    origin: str


def split_docstring(doc: str) -> tuple[str, str] | None:
    """(summary line, body) of a docstring with both, else None."""
    text = inspect.cleandoc(doc)
    head, _, body = text.partition("\n\n")
    summary = " ".join(head.split())
    body = body.strip()
    if not 4 <= len(summary.split()) <= 40 or len(body) < 100:
        return None
    return summary, body[:MAX_BODY]


def docstring_pairs(roots: list[Path]) -> list[Pair]:
    """Every usable (summary, body) of the modules under ``roots``; duplicates dropped."""
    pairs: list[Pair] = []
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            if any(part in ("tests", "test", "testing") for part in path.parts):
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
                continue
            for node in ast.walk(tree):
                if not isinstance(
                    node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module
                ):
                    continue
                doc = ast.get_docstring(node, clean=False)
                split = split_docstring(doc) if doc else None
                if split is not None:
                    pairs.append(Pair(split[0], split[1], f"{path}:{getattr(node, 'name', '')}"))
    seen_queries: dict[str, int] = {}
    seen_bodies: dict[str, int] = {}
    for pair in pairs:
        seen_queries[pair.query.lower()] = seen_queries.get(pair.query.lower(), 0) + 1
        seen_bodies[pair.body] = seen_bodies.get(pair.body, 0) + 1
    return [p for p in pairs if seen_queries[p.query.lower()] == 1 and seen_bodies[p.body] == 1]


def dev_roots() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / name for name in DEV_PACKAGES if (site / name).exists()]


def held_out_roots() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "idlelib", "lib2to3", "tkinter"}
    return [p for p in sorted(stdlib.iterdir()) if p.name not in skip and p.suffix in ("", ".py")]


def sample(pairs: list[Pair], size: int, seed: int) -> list[Pair]:
    chosen = random.Random(seed).sample(pairs, min(size, len(pairs)))
    return sorted(chosen, key=lambda p: p.origin)


def embed(client: EmbedderClient, texts: list[str], kind: Kind) -> np.ndarray:
    out = []
    for start in range(0, len(texts), EMBED_BATCH):
        result = client.embed(texts[start : start + EMBED_BATCH], kind, timeout=300)
        out.extend(np.asarray(v, dtype=np.float32) for v in result.vectors)
    return np.stack(out)


def cached_vectors(
    cache: Path, client: EmbedderClient, model: str, pairs: list[Pair]
) -> tuple[np.ndarray, np.ndarray]:
    key = hashlib.sha256(
        "\0".join([model, *(p.query + "\1" + p.body for p in pairs)]).encode()
    ).hexdigest()[:16]
    path = cache / f"recall-quality-{key}.npz"
    if path.exists():
        saved = np.load(path)
        return saved["queries"], saved["memories"]
    queries = embed(client, [p.query for p in pairs], Kind.QUERY)
    memories = embed(client, [p.body for p in pairs], Kind.PASSAGE)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, queries=queries, memories=memories)
    return queries, memories


def label(i: int) -> str:
    return f"doc {i}"  # opaque: only the body carries meaning, as in the set


def metrics(ranks: list[int | None]) -> tuple[float, float, float]:
    """R@1, R@5, MRR over 1-based ranks (None: not found)."""
    n = len(ranks)
    r1 = sum(1 for r in ranks if r == 1) / n
    r5 = sum(1 for r in ranks if r is not None and r <= 5) / n
    mrr = sum(1 / r for r in ranks if r is not None) / n
    return r1, r5, mrr


def rank_of(order: list[str], slug: str) -> int | None:
    return order.index(slug) + 1 if slug in order else None


def swept_ranks(
    cosines: np.ndarray,
    hits: list[dict[tuple[str, str], float]],
    exact: list[set[tuple[str, str]]],
    slugs: list[str],
    weight: float,
    exact_lift: float = lexical.EXACT_LIFT,
) -> list[int]:
    """Each query's target rank over all memories by cosine + weight × normalised BM25."""
    index = {slug: i for i, slug in enumerate(slugs)}
    ranks = []
    for q in range(cosines.shape[0]):
        fused = cosines[q].copy()
        for (_, slug), lift in lexical.lifts(hits[q], exact[q], weight, exact_lift).items():
            fused[index[slug]] += lift
        ranks.append(int((fused > fused[q]).sum()) + 1)
    return ranks


def measure(pairs: list[Pair], queries: np.ndarray, memories: np.ndarray, sweep: bool) -> None:
    slugs = [slugify(label(i)) for i in range(len(pairs))]
    with (
        tempfile.TemporaryDirectory(prefix="thatch-quality-") as tmp,
        Store.open(Path(tmp) / "thatch.db") as store,
    ):
        for i, (pair, vector) in enumerate(zip(pairs, memories, strict=True)):
            store.remember(STORE, label(i), pair.body, vector, "bench")
        dense, lex, fused = [], [], []
        hits: list[dict[tuple[str, str], float]] = []
        exact: list[set[tuple[str, str]]] = []
        timings = []
        for i, (pair, vector) in enumerate(zip(pairs, queries, strict=True)):
            order = [m.memory.slug for m in store.search([STORE], vector, limit=len(pairs))]
            dense.append(rank_of(order, slugs[i]))
            found, exactly = lexical.evidence(store.conn, [STORE], pair.query)
            hits.append(found)
            exact.append(exactly)
            lex.append(rank_of([slug for _, slug in found], slugs[i]))
            start = time.perf_counter()
            top = store.search([STORE], vector, text=pair.query, limit=10)
            timings.append(time.perf_counter() - start)
            fused.append(rank_of([m.memory.slug for m in top], slugs[i]))
    rows = []
    for name, ranks in (("dense (cosine)", dense), ("lexical (BM25)", lex), ("fused", fused)):
        r1, r5, mrr = metrics(ranks)
        rows.append([name, f"{r1:.3f}", f"{r5:.3f}", f"{mrr:.3f}"])
    print_table(
        f"{len(pairs)} queries; fused = cosine + {lexical.LEXICAL_WEIGHT} × BM25/best "
        "(Store.search with text; MRR over its top 10)",
        ["ranking", "R@1", "R@5", "MRR"],
        rows,
    )
    d1, d5, _ = metrics(dense)
    f1, f5, _ = metrics(fused)
    print(f"fused − dense: R@1 {f1 - d1:+.3f}, R@5 {f5 - d5:+.3f}")
    lifted = sum(1 for found in exact if found)
    hit = sum(1 for i, found in enumerate(exact) if (STORE, slugs[i]) in found)
    print(f"queries with an exact identifier lift: {lifted} (the target among those lifted: {hit})")
    print(f"Store.search with text, {len(pairs)} memories: p50 {np.median(timings) * 1e3:.2f} ms")
    if not sweep:
        return
    unit = memories / np.linalg.norm(memories, axis=1, keepdims=True)
    qs = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    cosines = qs.astype(np.float64) @ unit.astype(np.float64).T
    sweep_rows = []
    for weight in WEIGHTS:
        r1, r5, mrr = metrics(list(swept_ranks(cosines, hits, exact, slugs, weight)))
        sweep_rows.append([f"{weight:.2f}", f"{r1:.3f}", f"{r5:.3f}", f"{mrr:.3f}"])
    print_table(
        f"Weight sweep (all memories ranked; exact lift {lexical.EXACT_LIFT})",
        ["weight", "R@1", "R@5", "MRR"],
        sweep_rows,
    )
    exact_rows = []
    for lift in EXACT_LIFTS:
        ranks = swept_ranks(cosines, hits, exact, slugs, lexical.LEXICAL_WEIGHT, lift)
        r1, r5, mrr = metrics(list(ranks))
        exact_rows.append([f"{lift:.2f}", f"{r1:.3f}", f"{r5:.3f}", f"{mrr:.3f}"])
    print_table(
        f"Exact-identifier lift sweep (weight {lexical.LEXICAL_WEIGHT})",
        ["exact lift", "R@1", "R@5", "MRR"],
        exact_rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-int8", help="minilm-int8 or minilm-fp32")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--held-out", action="store_true", help="CPython's stdlib docstrings (held out)"
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thatch-bench",
    )
    args = parser.parse_args()
    roots = held_out_roots() if args.held_out else dev_roots()
    pool = docstring_pairs(roots)
    pairs = sample(pool, args.size, args.seed)
    title = "HELD-OUT set: CPython stdlib" if args.held_out else "dev set: third-party packages"
    print(f"{title}: {len(pool)} usable docstrings, {len(pairs)} sampled", file=sys.stderr)
    model_path = str(prepare_models(args.cache, [args.model])[args.model])
    with (
        embedder_running(model_path) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        queries, memories = cached_vectors(args.cache, client, args.model, pairs)
    print(f"\n{title} ({args.model}, {len(pairs)} pairs, seed {args.seed})")
    measure(pairs, queries, memories, sweep=not args.held_out)


if __name__ == "__main__":
    main()
