"""The running embedder reproduces an independent sentence-transformers run over gRPC."""

from __future__ import annotations

import numpy as np

from tests.support.embedder_proc import EmbedderProcess
from thatch.embedder.v1 import embedder_pb2 as pb


def test_server_vectors_match_the_reference(
    minilm_server: EmbedderProcess, minilm_reference: list[dict[str, object]]
) -> None:
    """Every vector: same token count; cosine with the reference ≥ 0.9999 fp32, ≥ 0.99 int8."""
    texts = [str(item["text"]) for item in minilm_reference]
    response = minilm_server.stub().Embed(
        pb.EmbedRequest(texts=texts, kind=pb.PASSAGE), timeout=120
    )
    assert (response.count, response.dim) == (len(texts), 384)
    assert response.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert list(response.token_counts) == [item["n_tokens"] for item in minilm_reference]
    assert [bool(t) for t in response.truncated] == [
        item["n_tokens"] == 256 for item in minilm_reference
    ]
    vectors = np.frombuffer(response.vectors, dtype="<f4").reshape(response.count, 384)
    reference = np.array([item["embedding"] for item in minilm_reference], dtype=np.float64)
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    cosines = np.sum(vectors.astype(np.float64) * reference, axis=1)
    floor = 0.99 if minilm_server.info().quantized else 0.9999
    assert float(cosines.min()) >= floor, (int(cosines.argmin()), float(cosines.min()))


def test_query_and_passage_are_the_same_without_a_prefix(minilm_server: EmbedderProcess) -> None:
    """MiniLM has no query prefix: QUERY and PASSAGE give the same vector."""
    stub = minilm_server.stub()
    query = stub.Embed(pb.EmbedRequest(texts=["how do I build"], kind=pb.QUERY), timeout=60)
    passage = stub.Embed(pb.EmbedRequest(texts=["how do I build"], kind=pb.PASSAGE), timeout=60)
    assert query.vectors == passage.vectors
