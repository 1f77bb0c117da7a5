"""Which model's vectors the store should hold: the "active model" of docs/architecture.md.

The model id the reachable embedder reports, else the id ``THATCH_MODEL`` resolves to
(never the raw variable: a short name or a directory names a model by another string).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

__all__ = [
    "active_model",
    "configured_model_id",
    "model_in_use",
]


def configured_model_id(env: Mapping[str, str]) -> str:
    """The id THATCH_MODEL resolves to, from local files only; the raw value if unresolvable."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.model_names import model_id_for
    from thatch.embedder.client.settings import configured_model

    try:
        return model_id_for(env=env)
    except ThatchEmbedderError:
        return configured_model(env)


def model_in_use(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The id the configured model resolves to (local files only) and where the setting
    came from (``THATCH_MODEL``, ``config file <path>``, ``default``); None when it does
    not resolve (what it would be cannot be told)."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.model_names import model_id_for
    from thatch.embedder.client.settings import model_setting

    try:
        chosen = model_setting(env)
        return model_id_for(chosen.value, env=env), chosen.origin
    except ThatchEmbedderError:
        return None


def active_model(env: Mapping[str, str], *, timeout: float, start_if_absent: bool = False) -> str:
    """Ask the embedder (within ``timeout``), else resolve the configured model locally.

    ``start_if_absent`` starts a local embedder in the background (hooks: so the model is
    warm by the session's first prompt) without waiting for it.
    """
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import ThatchEmbedderError

    try:
        client = EmbedderClient(env=env, autostart=start_if_absent)
    except ThatchEmbedderError:
        return configured_model_id(env)
    try:
        with contextlib.suppress(ThatchEmbedderError):
            return str(client.info(timeout=timeout).model_id)
        if start_if_absent:
            with contextlib.suppress(ThatchEmbedderError):
                client.ensure_started(wait=0)
        return configured_model_id(env)
    finally:
        client.close()
