"""How ``thatch demo`` chooses its model: the configured one when it is here, a hub download
when the hub answers, else the packaged all-MiniLM-L6-v2 imported once into thatch's model
cache. The model side of the demo, so it lives with the embedder's CLI (model resolution,
download and import are the embedder's); ``frontend/demo.py`` runs the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from thatch.embedder.client.errors import IMPORT_CHECKPOINT
from thatch.frontend.demo import OFFLINE_MODEL_ID, ModelChoice, Output, Steps

__all__ = ["choose_model", "hub_reachable", "import_offline_model", "no_model_fix"]

HUB_CONNECT_SECONDS = 3.0
# Clauses joined by "; or": each command ends its clause, so the line pastes as it is.
OTHER_MODELS = f"connect to the Hugging Face hub; or {IMPORT_CHECKPOINT}"


def no_model_fix(*, requested: bool, import_failed: bool = False) -> str:
    """What gives the demo a model: the offline package's install line (this interpreter's
    pip) when it is not installed; when it is, the demo without ``--model`` (which falls
    back to it), or the mock model when importing it is what failed."""
    if offline_package_dir() is None:
        from thatch.embedder.models.fixes import packaged_install

        return (
            "to have the packaged offline model, install it and rerun: "
            f"{packaged_install()}; or {OTHER_MODELS}"
        )
    if import_failed:
        return f"{OTHER_MODELS}; or run the demo on the mock model: thatch demo --model mock"
    if requested:
        return (
            "run the demo without --model, which falls back to the packaged "
            f"all-MiniLM-L6-v2: thatch demo; or {OTHER_MODELS}"
        )
    return OTHER_MODELS


def offline_package_dir() -> Path | None:
    """The checkpoint inside the offline model package, located without importing it."""
    from thatch.embedder.models.fixes import packaged_checkpoint

    return packaged_checkpoint()


def hub_reachable(env: Mapping[str, str], timeout: float = HUB_CONNECT_SECONDS) -> bool:
    """One TCP connect to the hub endpoint, bounded by ``timeout``."""
    from thatch.embedder.models.fixes import hub_answers

    return hub_answers(env, timeout)


def import_offline_model(env: Mapping[str, str], log: Output) -> tuple[Path, bool]:
    """The packaged MiniLM in thatch's model cache: (directory, imported now)."""
    from thatch.common.environment import models_dir
    from thatch.embedder.convert.importer import import_checkpoint

    target = models_dir(env) / OFFLINE_MODEL_ID.replace("/", "__")
    if (target / "thatch_model.json").is_file():
        return target, False
    source = offline_package_dir()
    assert source is not None
    import_checkpoint(source, target, model_id=OFFLINE_MODEL_ID, quantize=True, env=env, log=log)
    return target, True


def choose_model(
    requested: str | None, env: Mapping[str, str], steps: Steps, log: Output
) -> ModelChoice:
    """``--model``, else the configured model when usable now, else the packaged MiniLM."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.extra import install_line, missing
    from thatch.embedder.client.model_names import hub_offline
    from thatch.embedder.client.settings import configured_model

    absent = missing() if requested != "mock" else []
    if absent:  # the demo's embedder would die importing them: say so before starting it
        raise steps.fail(
            f"the embedder extra is not installed ({', '.join(absent)} missing)",
            f"to install the embedder extra: {install_line()}; "
            "or run the demo on the mock model: thatch demo --model mock",
        )
    from thatch.embedder.models.resolve import describe_model, pull_model

    name = requested or configured_model(env)
    try:
        settings = describe_model(name, env=env)
    except ThatchEmbedderError as error:
        fix = "pass --model with a short name, a hub id or a model directory, or mock"
        if not requested:
            fix = "set THATCH_MODEL to a short name, a hub id or a model directory"
        raise steps.fail(str(error), fix) from None
    if settings.source != "needs download":
        return ModelChoice(name, settings.model_id)
    offline = hub_offline(env)
    reason = "HF_HUB_OFFLINE=1" if offline else "the Hugging Face hub is unreachable"
    if not offline and hub_reachable(env):
        try:
            pulled = pull_model(name, env=env)
            return ModelChoice(name, pulled.model_id, f"   downloaded {pulled.model_id}")
        except ThatchEmbedderError as error:
            reason = f"the download failed ({error})"
    if requested:
        raise steps.fail(
            f"model {settings.model_id} cannot be used: {reason}", no_model_fix(requested=True)
        )
    if offline_package_dir() is None:
        raise steps.fail(
            f"model {settings.model_id} is not cached and {reason}; "
            "the offline model package is not installed",
            no_model_fix(requested=False),
        )
    try:
        directory, imported = import_offline_model(env, log)
    except ThatchEmbedderError as error:
        fix = no_model_fix(requested=False, import_failed=True)
        raise steps.fail(f"importing the packaged model failed: {error}", fix) from None
    how = "imported it into" if imported else "using it from"
    note = (
        f"   {settings.model_id} is not available ({reason}): using the packaged "
        f"all-MiniLM-L6-v2 instead ({how} {directory})"
    )
    return ModelChoice(str(directory), OFFLINE_MODEL_ID, note, fallback=True)
