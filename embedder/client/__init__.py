"""thatch.embedder.client: all that frontends (and the CLI outside the embedder's own
commands) import of the embedder, with the generated stubs in ``thatch.embedder.v1``: the
client, auto-start, TLS, settings, errors, socket trust and model names. Nothing here
imports the server, the model runtime or the import pipeline (tests/test_layers.py), nor
the `embedder` extra's packages (tests/test_embedder_extra.py).
"""
