"""thatch.embedder: the shared embedding service, its model pipeline and its client.

Importing this package (or ``thatch.embedder.v1``) never imports onnxruntime, so
frontends can use the client and stubs without the model runtime.
"""
