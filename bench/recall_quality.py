"""Recall quality: R@1, R@5 and MRR per ranking method on the dev sets (issues 15, 24).

    python bench/recall_quality.py [--set conversation|facts|docstrings|camelcase|all]
                                   [--model minilm-int8] [--size 800] [--held-out]

Dev sets (bench/recall_sets.py): ``conversation`` (hand-written conversations, one memory
per turn, 109 questions), ``facts`` (hand-written code facts as agents save them from
tool output, 98 facts, 102 queries an agent would type), ``docstrings`` (docstring facts
of third-party packages, 800 sampled) and ``camelcase`` (JSDoc of the npm package
kubernetes-types: CamelCase names; ``npm pack`` fetches it into ``--cache`` on first use);
with ``all``, also the conversation and facts questions over one store holding the first
three kinds. Every memory is saved through
``Store.remember`` as the memory tool saves it (``# label`` blank line content, vector of
that text from a real embedder process serving the packaged all-MiniLM-L6-v2) into a temp
SQLite file, so the lexical index is the one its triggers build. Methods:

- dense: cosine alone (``Store.search`` without text);
- lexical: BM25 alone (``lexical.evidence``); a memory it does not return has no rank;
- fused (store): ``Store.search(text=query)``, the ranking recall uses now (MRR over its
  top 10); "linear w 0.15 (without camel)" is the same formula over all memories with
  the lexical query of before m017 (on m017's index, so BM25's row lengths include
  column ``camel``: the ranking before issue 24 is ``fused`` measured at a commit before
  m017);
- levers (issue 24), each computed over all memories from the same vectors and hits:
  linear fusion weights, reciprocal-rank fusion, query rewriting for questions
  (``recall_levers.question_core``), long memories split for ranking (chunks scored, the memory
  returned), label-vs-body field weighting (a temp FTS5 table with two columns),
  CamelCase split for the lexical part (column ``camel`` of m017, two weights).
``--held-out`` measures CPython's standard library docstrings instead of the dev sets:
the held-out check, run once after the choices, not used to choose anything.
"""

from __future__ import annotations

import argparse
import hashlib
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

import recall_levers
from _common import add_cache_option, embedder_running, print_table
from embedder import prepare_models
from recall_sets import DevSet, among, camelcase_set, code_set, conversation_set, facts_set
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.store import lexical
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.slugs import slugify

STORE = "dev"
SETS = ["conversation", "facts", "docstrings", "camelcase"]
EMBED_BATCH = 32
WEIGHTS = [0.0, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]
RRF_KS = [10, 60]
CC_WEIGHTS = [0.15, 0.25, 0.4]
CHUNK_CHARS = [400, 800]
CHUNK_BLEND = 0.25
LABEL_WEIGHTS = [1.0, 3.0]
CAMEL_WEIGHTS = [0.5, 1.0]

F64 = npt.NDArray[np.float64]
Hits = dict[str, float]


def stored_text(label: str, content: str) -> str:
    return f"# {label}\n\n{content}"  # as memory_tools.remember stores and embeds it


def embed(client: EmbedderClient, texts: list[str], kind: Kind) -> np.ndarray:
    out = []
    for start in range(0, len(texts), EMBED_BATCH):
        result = client.embed(texts[start : start + EMBED_BATCH], kind, timeout=600)
        out.extend(np.asarray(v, dtype=np.float32) for v in result.vectors)
    return np.stack(out) if out else np.zeros((0, 384), dtype=np.float32)


class Embeddings(Protocol):
    def get(self, texts: list[str], kind: Kind) -> np.ndarray: ...


class Vectors:
    """Embeddings through the embedder process, cached on disk per text (by model and kind)."""

    def __init__(self, cache: Path, client: EmbedderClient, model: str) -> None:
        self.cache, self.client, self.model = cache, client, model

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        path = self.cache / f"recall-quality-{self.model}-{kind.name.lower()}.npz"
        known: dict[str, np.ndarray] = {}
        if path.exists():
            saved = np.load(path)
            known = dict(zip(saved["keys"].tolist(), saved["vectors"], strict=True))
        keys = [hashlib.sha256(text.encode()).hexdigest()[:24] for text in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in known}.items())
        if missing:
            vectors = embed(self.client, [text for _, text in missing], kind)
            known.update(zip([k for k, _ in missing], vectors, strict=True))
            self.cache.mkdir(parents=True, exist_ok=True)
            np.savez(path, keys=np.asarray(list(known)), vectors=np.stack(list(known.values())))
        return np.stack([known[k] for k in keys])


def unit(matrix: np.ndarray) -> F64:
    m = matrix.astype(np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def metrics(ranks: list[int | None]) -> tuple[float, float, float]:
    """R@1, R@5, MRR over 1-based ranks (None: not found)."""
    n = len(ranks)
    r1 = sum(1 for r in ranks if r == 1) / n
    r5 = sum(1 for r in ranks if r is not None and r <= 5) / n
    mrr = sum(1 / r for r in ranks if r is not None) / n
    return r1, r5, mrr


def rank_of(order: list[str], slug: str) -> int | None:
    return order.index(slug) + 1 if slug in order else None


def ranks_by(scores: F64, targets: list[int]) -> list[int | None]:
    """Each query's target rank in its row of scores (ties count for the target)."""
    return [int((scores[q] > scores[q, t]).sum()) + 1 for q, t in enumerate(targets)]


def linear(
    cos: F64,
    hits: list[Hits],
    exact: list[set[str]],
    index: dict[str, int],
    weight: float,
    exact_lift: float = lexical.EXACT_LIFT,
) -> F64:
    """cosine + weight × BM25 / the query's best BM25 (+ exact lift): the store's formula."""
    fused = cos.copy()
    for q in range(cos.shape[0]):
        keyed = {(STORE, s): v for s, v in hits[q].items()}
        exactly = {(STORE, s) for s in exact[q]}
        for (_, slug), lift in lexical.lifts(keyed, exactly, weight, exact_lift).items():
            fused[q, index[slug]] += lift
    return fused


def rrf(cos: F64, hits: list[Hits], index: dict[str, int], k: int) -> F64:
    """Reciprocal-rank fusion of the dense order and the BM25 order."""
    order = np.argsort(-cos, axis=1, kind="stable")
    dense_rank = np.empty_like(order)
    rows = np.arange(cos.shape[0])[:, None]
    dense_rank[rows, order] = np.arange(cos.shape[1])[None, :] + 1
    fused = 1.0 / (k + dense_rank.astype(np.float64))
    for q in range(cos.shape[0]):
        for r, slug in enumerate(sorted(hits[q], key=lambda s: -hits[q][s])):
            fused[q, index[slug]] += 1.0 / (k + r + 1)
    return fused


def field_hits(
    dev: DevSet, slugs: list[str], label_weight: float, queries: list[str], *, stem: bool = False
) -> list[Hits]:
    """BM25 hits of a two-column index (label, content) weighted ``label_weight`` : 1, with
    the store's query items (identifiers as phrases of their parts, words), top 50;
    ``stem``: words stemmed (FTS5's porter tokenizer around the store's)."""
    conn = sqlite3.connect(":memory:")  # scratch index for a measurement, not a store
    tokenizer = f"porter {lexical.TOKENIZER}" if stem else lexical.TOKENIZER
    conn.execute(f'CREATE VIRTUAL TABLE f USING fts5(label, body, tokenize="{tokenizer}")')
    conn.executemany(
        "INSERT INTO f (rowid, label, body) VALUES (?, ?, ?)",
        [
            (i + 1, m.label.replace("_", " "), m.content.replace("_", " "))
            for i, m in enumerate(dev.memories)
        ],
    )
    out: list[Hits] = []
    for text in queries:
        identifiers, words = lexical.query_items(text)
        items = [i.parts.removeprefix("parts: ") for i in identifiers[: lexical.MAX_IDENTIFIERS]]
        items += ['"' + w + '"' for w in words[: lexical.MAX_WORDS]]
        if not items:
            out.append({})
            continue
        rows = conn.execute(
            "SELECT rowid, -bm25(f, ?, 1.0) AS s FROM f WHERE f MATCH ? ORDER BY s DESC LIMIT ?",
            (label_weight, " OR ".join(items), lexical.HIT_LIMIT),
        ).fetchall()
        out.append({slugs[rowid - 1]: float(s) for rowid, s in rows if s > 0})
    conn.close()
    return out


def camel_hits(
    store: sqlite3.Connection, queries: list[str], camel_weight: float
) -> tuple[list[Hits], list[set[str]]]:
    """``lexical.evidence`` with column ``camel`` (m017) weighted ``camel_weight``."""
    hits: list[Hits] = []
    exact: list[set[str]] = []
    for text in queries:
        found, exactly = lexical.evidence(
            store, [STORE], text, camel=True, camel_weight=camel_weight
        )
        hits.append({slug: score for (_, slug), score in found.items()})
        exact.append({slug for _, slug in exactly})
    return hits, exact


def chunk_max(
    vectors: Embeddings, dev: DevSet, q: F64, whole: F64, max_chars: int
) -> tuple[F64, int]:
    """Each memory's score as the best of its whole text and its chunks (chunks of at
    most ``max_chars`` of the content, each embedded under the memory's label)."""
    owners: list[int] = []
    texts: list[str] = []
    for i, memory in enumerate(dev.memories):
        pieces = recall_levers.chunks(memory.content, max_chars)
        if len(pieces) > 1:
            owners += [i] * len(pieces)
            texts += [stored_text(memory.label, piece) for piece in pieces]
    best = q @ whole.T
    if texts:
        chunk_cos = q @ unit(vectors.get(texts, Kind.PASSAGE)).T
        owner = np.asarray(owners)
        for column in range(chunk_cos.shape[1]):
            np.maximum(best[:, owner[column]], chunk_cos[:, column], out=best[:, owner[column]])
    return best, len(texts)


def measure(dev: DevSet, vectors: Embeddings) -> list[list[str]]:
    labels = [m.label for m in dev.memories]
    slugs = [slugify(label) for label in labels]
    if len(set(slugs)) != len(slugs):
        raise SystemExit(f"{dev.name}: labels share slugs")
    index = {slug: i for i, slug in enumerate(slugs)}
    texts = [stored_text(m.label, m.content) for m in dev.memories]
    questions = [q.text for q in dev.questions]
    targets = [q.target for q in dev.questions]
    memory_vectors = vectors.get(texts, Kind.PASSAGE)
    query_vectors = vectors.get(questions, Kind.QUERY)
    rewritten = [recall_levers.question_core(text) for text in questions]
    rewritten_vectors = vectors.get(rewritten, Kind.QUERY)

    rows: list[list[str]] = []

    def row(name: str, ranks: list[int | None]) -> None:
        r1, r5, mrr = metrics(ranks)
        rows.append([dev.name, name, f"{r1:.3f}", f"{r5:.3f}", f"{mrr:.3f}"])

    hits: list[Hits] = []
    exact: list[set[str]] = []
    dense, lex, fused, timings = [], [], [], []
    with (
        tempfile.TemporaryDirectory(prefix="thatch-quality-") as tmp,
        Store.open(Path(tmp) / "thatch.db") as store,
    ):
        for label, text, vector in zip(labels, texts, memory_vectors, strict=True):
            store.remember(STORE, label, text, vector, "bench")
        for question, vector, target in zip(questions, query_vectors, targets, strict=True):
            order = [m.memory.slug for m in store.search([STORE], vector, limit=len(slugs))]
            dense.append(rank_of(order, slugs[target]))
            # Without column ``camel``: the lexical part as before issue 24 (m017).
            found, exactly = lexical.evidence(store.conn, [STORE], question, camel=False)
            hits.append({slug: score for (_, slug), score in found.items()})
            exact.append({slug for _, slug in exactly})
            lex.append(rank_of(sorted(hits[-1], key=lambda s: -hits[-1][s]), slugs[target]))
            start = time.perf_counter()
            top = store.search([STORE], vector, text=question, limit=10)
            timings.append(time.perf_counter() - start)
            fused.append(rank_of([m.memory.slug for m in top], slugs[target]))
        split = {w: camel_hits(store.conn, questions, w) for w in CAMEL_WEIGHTS}
    row("dense (cosine)", dense)
    row("lexical (BM25), without column camel", lex)
    row(f"fused, store as shipped (w {lexical.LEXICAL_WEIGHT})", fused)

    q, whole = unit(query_vectors), unit(memory_vectors)
    cos = q @ whole.T
    for camel_weight, (chits, cexact) in split.items():
        name = f"camelCase split (column camel ×{camel_weight})"
        row(f"{name}: lexical", [
            rank_of(sorted(h, key=lambda s: -h[s]), slugs[t])
            for h, t in zip(chits, targets, strict=True)
        ])  # fmt: skip
        fused_split = linear(cos, chits, cexact, index, lexical.LEXICAL_WEIGHT)
        row(f"{name}: linear w {lexical.LEXICAL_WEIGHT}", ranks_by(fused_split, targets))
    for weight in WEIGHTS:
        before = " (without camel)" if weight == lexical.LEXICAL_WEIGHT else ""
        fused_w = linear(cos, hits, exact, index, weight)
        row(f"linear w {weight}{before}", ranks_by(fused_w, targets))
    spread = cos - cos.min(axis=1, keepdims=True)
    cc = spread / spread.max(axis=1, keepdims=True)
    for weight in CC_WEIGHTS:
        fused_cc = linear(cc, hits, exact, index, weight)
        row(f"convex (min-max cosine) w {weight}", ranks_by(fused_cc, targets))
    for k in RRF_KS:
        row(f"RRF k {k}", ranks_by(rrf(cos, hits, index, k), targets))
    rq = unit(rewritten_vectors)
    rcos = rq @ whole.T
    row("rewrite: dense", ranks_by(rcos, targets))
    for weight in (lexical.LEXICAL_WEIGHT, 0.3):
        row(
            f"rewrite: linear w {weight}",
            ranks_by(linear(rcos, hits, exact, index, weight), targets),
        )
    for max_chars in CHUNK_CHARS:
        best, count = chunk_max(vectors, dev, q, whole, max_chars)
        row(f"chunks {max_chars} ({count}): dense", ranks_by(best, targets))
        fused_chunks = linear(best, hits, exact, index, lexical.LEXICAL_WEIGHT)
        row(
            f"chunks {max_chars}: linear w {lexical.LEXICAL_WEIGHT}",
            ranks_by(fused_chunks, targets),
        )
        blend = cos + CHUNK_BLEND * (best - cos)  # best >= cos: the whole text is one of them
        row(
            f"chunks {max_chars}: whole + {CHUNK_BLEND} × gain, linear w {lexical.LEXICAL_WEIGHT}",
            ranks_by(linear(blend, hits, exact, index, lexical.LEXICAL_WEIGHT), targets),
        )
    for label_weight, stem in [(w, False) for w in LABEL_WEIGHTS] + [(1.0, True)]:
        fhits = field_hits(dev, slugs, label_weight, questions, stem=stem)
        fields = f"fields label×{label_weight}{' porter' if stem else ''}"
        lexical_only = [
            rank_of(sorted(h, key=lambda s: -h[s]), slugs[t])
            for h, t in zip(fhits, targets, strict=True)
        ]
        row(f"{fields}: lexical", lexical_only)
        row(
            f"{fields}: linear w {lexical.LEXICAL_WEIGHT}",
            ranks_by(linear(cos, fhits, exact, index, lexical.LEXICAL_WEIGHT), targets),
        )
    print(
        f"{dev.name}: Store.search with text, {len(slugs)} memories: "
        f"p50 {np.median(timings) * 1e3:.2f} ms",
        file=sys.stderr,
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--set", default="all", choices=[*SETS, "all"])
    parser.add_argument("--model", default="minilm-int8", help="minilm-int8 or minilm-fp32")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--held-out", action="store_true", help="CPython's stdlib as the code set")
    add_cache_option(parser)
    args = parser.parse_args()
    builders: list[Callable[[], DevSet]] = []
    docstrings = lambda: code_set(args.size, args.seed, held_out=args.held_out)  # noqa: E731
    if args.held_out:
        builders.append(docstrings)
    else:
        chosen = SETS if args.set == "all" else [args.set]
        camelcase = lambda: camelcase_set(args.size, args.seed, args.cache)  # noqa: E731
        named = {
            "conversation": conversation_set,
            "facts": facts_set,
            "docstrings": docstrings,
            "camelcase": camelcase,
        }
        builders += [named[name] for name in chosen]
        if args.set == "all":
            builders.append(lambda: among(conversation_set(), facts_set(), docstrings()))
            builders.append(lambda: among(facts_set(), conversation_set(), docstrings()))
    model_path = str(prepare_models(args.cache, [args.model])[args.model])
    rows: list[list[str]] = []
    with (
        embedder_running(model_path) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        vectors = Vectors(args.cache, client, args.model)
        for build in builders:
            dev = build()
            print(f"{dev.name}: {len(dev.memories)} memories, {len(dev.questions)} questions",
                  file=sys.stderr)  # fmt: skip
            rows += measure(dev, vectors)
    print_table(
        f"Recall quality ({args.model}; ranks over all memories of the set; "
        "'fused, store' over Store.search's top 10)",
        ["set", "method", "R@1", "R@5", "MRR"],
        rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
