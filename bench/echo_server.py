"""The floor for bench/embedder.py: a bare gRPC server running the model in its handler.

    python bench/echo_server.py MODEL unix:///path/to/socket

One generic unary method (``/bench.Echo/Embed``): the request is a UTF-8 query, the
handler tokenizes and encodes it with the same ``OnnxEncoder`` settings as the embedder
and answers with the model time in µs (8 bytes, little-endian) followed by the vector.
No validation, queueing, batching or protobuf: what is left of a round trip after its
model time is what gRPC in Python costs on this machine, next to the same model.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from thatch.embedder.client.kind import Kind
from thatch.embedder.models.resolve import create_encoder, resolve_model

METHOD = "/bench.Echo/Embed"


def main() -> None:
    model, address = sys.argv[1], sys.argv[2]
    encoder = create_encoder(resolve_model(model, env=dict(os.environ)))
    encoder.load()

    def embed(request: bytes, context: grpc.ServicerContext) -> bytes:
        start = time.perf_counter()
        vectors = encoder.encode([encoder.tokenize(request.decode(), Kind.QUERY)])
        model_us = int((time.perf_counter() - start) * 1e6)
        return model_us.to_bytes(8, "little") + vectors.tobytes()

    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    handler = grpc.unary_unary_rpc_method_handler(embed)
    service, method = METHOD.strip("/").split("/")
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {method: handler}),)
    )
    server.add_insecure_port(address)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
