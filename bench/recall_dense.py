"""Dense-side recall levers of issue 24 (second round): R@1, R@5 and MRR per lever.

    python bench/recall_dense.py [--size 800] [--seed 15] [--model minilm-int8]

Every dev set of bench/recall_quality.py (conversation, facts, docstrings, camelcase and
the two "+ others" stores), each memory saved through ``Store.remember`` so the lexical
hits (column ``camel`` as shipped) are the store's. Each lever changes the dense side
only and is fused exactly as ``Store.search`` fuses (cosine + 0.15 × BM25 / best + exact
lift), over all memories of the set:

- prf: pseudo-relevance feedback (Rocchio) on the query vector,
  q' = unit(q + α · mean of the top-m memories' unit vectors), the top-m taken from the
  shipped fused ranking (``prf``) or the dense one (``prf dense``), then a second scan;
- label: the label embedded alone as a second vector per memory, the dense score
  (cos(q, text) + β · cos(q, label)) / (1 + β) or max of the two; labels as written or
  with their CamelCase split (``lexical.camel_text``); ``code names only``: only memories
  whose label names code (``CODE_NAME``: dotted, slashed, snake_case, CamelCase) get it;
- template: the query embedded inside a sentence (``TEMPLATES``), for every query or only
  for queries that are not questions (``recall_levers.is_question``).

The questions of each set are split in two by a hash of their text: every parameter is
chosen on the ``tune`` half (the best mean of R@5 + MRR over the four base sets) and the
report gives the other half only, beside the shipped ranking on the same questions.
``--misses N`` counts the camelcase questions the shipped ranking leaves outside its top 5
by kind and lists N of them (on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import recall_levers
from _common import add_cache_option, embedder_running, print_table
from embedder import prepare_models
from recall_quality import (
    F64,
    STORE,
    Embeddings,
    Hits,
    Vectors,
    camel_hits,
    linear,
    metrics,
    ranks_by,
    stored_text,
    unit,
)
from recall_sets import DevSet, all_sets
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.frontend.store import lexical
from thatch.frontend.store.memory_store import Store
from thatch.frontend.store.slugs import slugify

BASE_SETS = 4  # conversation, facts, docstrings, camelcase; then the "+ others" stores
PRF_ALPHAS = [0.1, 0.2, 0.3, 0.5, 0.8]
PRF_TOPS = [1, 2, 3, 5, 10]
LABEL_BETAS = [0.1, 0.2, 0.3, 0.5, 1.0]
# A code name in a label: dotted or slashed (click.core, batch/v1), snake_case, CamelCase.
CODE_NAME = re.compile(
    r"[A-Za-z]\w*(?:[./][A-Za-z]\w*)+|\b\w+_\w+|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*"
)
TEMPLATES = [
    "# {q}",
    "{q}.",
    "A note about: {q}",
    "This field {q}",
    "Documentation: {q}",
    "Find the memory that says: {q}",
]


@dataclass
class Prepared:
    dev: DevSet
    targets: list[int]
    index: dict[str, int]
    whole: F64  # unit vectors of the stored texts
    query: F64  # unit vectors of the questions
    hits: list[Hits]
    exact: list[list[str]]
    tune: np.ndarray  # bool per question: in the half parameters are chosen on

    def fused(self, cos: F64) -> F64:
        exact = [set(e) for e in self.exact]
        return linear(cos, self.hits, exact, self.index, lexical.LEXICAL_WEIGHT)


def half(text: str) -> bool:
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0


def prepare(dev: DevSet, vectors: Embeddings) -> Prepared:
    slugs = [slugify(m.label) for m in dev.memories]
    index = {slug: i for i, slug in enumerate(slugs)}
    texts = [stored_text(m.label, m.content) for m in dev.memories]
    questions = [q.text for q in dev.questions]
    memory_vectors = vectors.get(texts, Kind.PASSAGE)
    with (
        tempfile.TemporaryDirectory(prefix="thatch-dense-") as tmp,
        Store.open(Path(tmp) / "thatch.db") as store,
    ):
        for memory, text, vector in zip(dev.memories, texts, memory_vectors, strict=True):
            store.remember(STORE, memory.label, text, vector, "bench")
        hits, exact = camel_hits(store.conn, questions, lexical.CAMEL_WEIGHT)
    return Prepared(
        dev,
        [q.target for q in dev.questions],
        index,
        unit(memory_vectors),
        unit(vectors.get(questions, Kind.QUERY)),
        hits,
        [sorted(e) for e in exact],
        np.asarray([half(q) for q in questions]),
    )


def figures(p: Prepared, scores: F64, tune: bool) -> tuple[float, float, float]:
    ranks = ranks_by(scores, p.targets)
    chosen = [r for r, t in zip(ranks, p.tune, strict=True) if bool(t) == tune]
    return metrics(chosen)


Lever = Callable[[Prepared], F64]


def rocchio(p: Prepared, alpha: float, top: int, *, dense: bool) -> F64:
    cos = p.query @ p.whole.T
    first = cos if dense else p.fused(cos)
    best = np.argsort(-first, axis=1, kind="stable")[:, :top]
    moved = unit(p.query + alpha * p.whole[best].mean(axis=1))
    return p.fused(moved @ p.whole.T)


def names_code(label: str) -> bool:
    """Whether a label holds a code name (dotted, slashed, snake_case or CamelCase)."""
    return bool(CODE_NAME.search(label))


def label_mix(p: Prepared, labels: F64, beta: float | None, *, code_only: bool = False) -> F64:
    """The dense score with the label's cosine mixed in (``beta`` None: the max of the two);
    ``code_only``: only for memories whose label names code, the others keep their cosine."""
    cos = p.query @ p.whole.T
    by_label = p.query @ labels.T
    dense = np.maximum(cos, by_label) if beta is None else (cos + beta * by_label) / (1 + beta)
    if code_only:
        named = np.asarray([names_code(m.label) for m in p.dev.memories])
        dense = np.where(named[None, :], dense, cos)
    return p.fused(dense)


def choose(sets: list[Prepared], levers: dict[str, Lever]) -> tuple[str, list[tuple[str, float]]]:
    """The lever with the best mean R@5 + MRR over the base sets' tune halves."""
    scored = []
    for name, lever in levers.items():
        values = [figures(p, lever(p), tune=True) for p in sets[:BASE_SETS]]
        scored.append((name, float(np.mean([r5 + mrr for _, r5, mrr in values]))))
    scored.sort(key=lambda item: -item[1])
    return scored[0][0], scored


def content_words(text: str) -> set[str]:
    """Lowercase words of ``text`` (CamelCase split), less stopwords and single letters."""
    split = lexical.camel_text(text).lower()
    return {w for w in re.findall(r"[a-z0-9]+", split) if w not in lexical.STOPWORDS and len(w) > 1}


def miss_kinds(p: Prepared) -> None:
    """How many of the shipped ranking's misses (target outside the top 5) are of each
    kind (docs/database.md, dense levers)."""
    scores = p.fused(p.query @ p.whole.T)
    ranks = ranks_by(scores, p.targets)
    names = [m.label.split()[-1].lower() for m in p.dev.memories]
    missed = [q for q, rank in enumerate(ranks) if rank is None or rank > 5]
    disjoint = [
        q
        for q, target in enumerate(p.targets)
        if not content_words(p.dev.questions[q].text)
        & content_words(p.dev.memories[target].content)
    ]
    kinds = {
        "share no content word with the target": sum(1 for q in missed if q in disjoint),
        "share a word with the target's type or field name": sum(
            1
            for q in missed
            if content_words(p.dev.questions[q].text)
            & content_words(" ".join(p.dev.memories[p.targets[q]].label.split()[1:]))
        ),
        "have the target's field name in another memory of their top 5": sum(
            1
            for q in missed
            if names[p.targets[q]] in [names[int(i)] for i in np.argsort(-scores[q])[:5]]
        ),
        "ask for a type, not a field": sum(
            1 for q in missed if len(p.dev.memories[p.targets[q]].label.split()) == 2
        ),
        "have 8 words or fewer": sum(
            1 for q in missed if len(p.dev.questions[q].text.split()) <= 8
        ),
    }
    print(f"{p.dev.name}: {len(missed)} of {len(ranks)} questions outside the top 5; "
          f"{len(disjoint)} questions share no content word with their target",
          file=sys.stderr)  # fmt: skip
    short = sum(1 for q in p.dev.questions if len(q.text.split()) <= 8)
    print(f"  of all questions, {short} have 8 words or fewer", file=sys.stderr)
    for kind, count in kinds.items():
        print(f"  {count} misses {kind}", file=sys.stderr)


def misses(p: Prepared, limit: int) -> None:
    """The shipped ranking's misses (target outside the top 5) and what ranks first."""
    miss_kinds(p)
    scores = p.fused(p.query @ p.whole.T)
    ranks = ranks_by(scores, p.targets)
    shown = 0
    for q, (rank, target) in enumerate(zip(ranks, p.targets, strict=True)):
        if rank is None or rank <= 5:
            continue
        first = int(np.argmax(scores[q]))
        memory, top = p.dev.memories[target], p.dev.memories[first]
        print(f"rank {rank}: {p.dev.questions[q].text}\n  want  {memory.label}: "
              f"{memory.content[:120]}\n  first {top.label}: {top.content[:120]}",
              file=sys.stderr)  # fmt: skip
        shown += 1
        if shown >= limit:
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="minilm-int8", help="minilm-int8 or minilm-fp32")
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--misses", type=int, default=0, help="list this many camelcase misses")
    add_cache_option(parser)
    args = parser.parse_args()
    devs = all_sets(args.size, args.seed, args.cache)
    model_path = str(prepare_models(args.cache, [args.model])[args.model])
    with (
        embedder_running(model_path) as (address, _proc),
        EmbedderClient(address, autostart=False) as client,
    ):
        vectors = Vectors(args.cache, client, args.model)
        sets = [prepare(dev, vectors) for dev in devs]
        for p in sets:
            whole = metrics(ranks_by(p.fused(p.query @ p.whole.T), p.targets))
            print(f"{p.dev.name}: shipped over all questions, R@1 / R@5 / MRR "
                  f"{' / '.join(f'{v:.3f}' for v in whole)}", file=sys.stderr)  # fmt: skip
        if args.misses:
            misses(sets[3], args.misses)
        levers: dict[str, dict[str, Lever]] = {"shipped": {"shipped": lambda p: p.fused(
            p.query @ p.whole.T)}}  # fmt: skip
        for dense in (False, True):
            family = "prf dense" if dense else "prf"
            levers[family] = {
                f"{family} α {a} m {m}": (lambda p, a=a, m=m, d=dense: rocchio(p, a, m, dense=d))
                for a in PRF_ALPHAS
                for m in PRF_TOPS
            }
        for split, code_only in ((False, False), (True, False), (True, True)):
            family = "label camel-split" if split else "label"
            family += " (code names only)" if code_only else ""
            label_vectors = {
                id(p): unit(vectors.get(
                    [lexical.camel_text(m.label) if split else m.label for m in p.dev.memories],
                    Kind.PASSAGE,
                ))
                for p in sets
            }  # fmt: skip
            options: list[float | None] = [*LABEL_BETAS, None]
            levers[family] = {
                f"{family} {'max' if b is None else f'β {b}'}": (
                    lambda p, b=b, lv=label_vectors, c=code_only: label_mix(
                        p, lv[id(p)], b, code_only=c
                    )
                )
                for b in options
            }
        for only in (False, True):
            family = "template (non-questions)" if only else "template"
            templated: dict[str, dict[int, F64]] = {}
            for template in TEMPLATES:
                templated[template] = {}
                for p in sets:
                    texts = [
                        q.text
                        if only and recall_levers.is_question(q.text)
                        else template.format(q=q.text)
                        for q in p.dev.questions
                    ]
                    templated[template][id(p)] = unit(vectors.get(texts, Kind.QUERY))
            levers[family] = {
                f"{family} {t!r}": (lambda p, t=t, tq=templated: p.fused(tq[t][id(p)] @ p.whole.T))
                for t in TEMPLATES
            }
    rows: list[list[str]] = []
    picked: list[tuple[str, Lever]] = []
    for family, options in levers.items():
        name, scored = choose(sets, options)
        picked.append((name, options[name]))
        if family != "shipped":
            tops = ", ".join(f"{n.removeprefix(family).strip()} {v:.3f}" for n, v in scored[:3])
            print(f"{family}: tune half, best mean R@5 + MRR: {tops}", file=sys.stderr)
    for p in sets:
        base = figures(p, picked[0][1](p), tune=False)
        count = int((~p.tune).sum())
        for name, lever in picked:
            r1, r5, mrr = figures(p, lever(p), tune=False)
            delta = "" if name == "shipped" else f"{r5 - base[1]:+.3f} / {mrr - base[2]:+.3f}"
            rows.append([f"{p.dev.name} ({count})", name, f"{r1:.3f}", f"{r5:.3f}",
                         f"{mrr:.3f}", delta])  # fmt: skip
    print_table(
        f"Dense levers ({args.model}; report half of each set's questions, parameters chosen "
        "on the other half; all fused as Store.search fuses)",
        ["set (questions)", "lever", "R@1", "R@5", "MRR", "Δ R@5 / MRR"],
        rows,
    )
    print(f"\nload: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
