"""``thatch doctor``'s model check: the configured model described by the embedder's own
resolution (local files only, no network, no loading). The embedder's side of the doctor,
so it lives with the embedder's CLI; ``frontend/doctor.py`` runs the other checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from thatch.common.shell_words import shell_quote
from thatch.frontend.doctor import RESTART_FIX, Check, Served
from thatch.frontend.untrusted import inline

__all__ = ["check_model"]


def check_model(env: Mapping[str, str], served: Served | None) -> tuple[Check, str | None]:
    """The configured model's local availability, where the setting came from (THATCH_MODEL,
    the config file of ``thatch model use``, the default) and the served id; also the active
    id. A model that is not here names a fix that works here: pull only when the hub answers."""
    from thatch.common.environment import env_get
    from thatch.embedder.client.errors import ModelError, ThatchEmbedderError
    from thatch.embedder.client.extra import install_line, missing
    from thatch.embedder.client.model_names import ADAPTED, hub_endpoint, hub_offline
    from thatch.embedder.client.settings import model_setting
    from thatch.embedder.models.fixes import unavailable_fix
    from thatch.embedder.models.resolve import describe_model

    served_id = served.model_id if served else None
    absent = missing()
    if absent and served is None:
        # A frontend-only install: nothing here can load a model, whatever is configured.
        detail = (
            "this install cannot run an embedder: the embedder extra "
            f"({', '.join(absent)}) is not installed and no embedder is reachable"
        )
        extra_fix = (
            f"to run one here, install the embedder extra: {install_line()}; "
            "or point THATCH_EMBEDDER_ADDR at a shared embedder"
        )
        return Check("FAIL", "model", detail, extra_fix), None
    try:
        chosen = model_setting(env)
        name = chosen.value or ""
        settings = describe_model(name, env=env)
    except ThatchEmbedderError as error:
        fix = error.fix if isinstance(error, ModelError) and error.fix else None
        kinds = "an imported model, a hub id or a model directory"
        if not fix and env_get(env, "THATCH_MODEL") is not None:
            # thatch model use would change nothing while the variable is set
            fix = (
                "THATCH_MODEL is set in this environment and wins over the saved model: "
                "unset THATCH_MODEL; or set it to another model id, ID "
                f"({kinds}): export THATCH_MODEL=ID"
            )
        fix = fix or f"choose another model by its id, ID ({kinds}): thatch model use ID"
        return Check("FAIL", "model", str(error), fix), served_id
    # The origin names the config file, the path a model directory: data (doctor's _shown).
    # So are the ids: a model directory's name is its id (local:<name>), and a remote
    # embedder says what it serves.
    origin = f"from {inline(chosen.origin)}"
    model_id = settings.model_id
    shown_id = inline(model_id)
    if served_id is not None and served_id != model_id:
        fix = (
            f"use the model it serves: thatch model use {inline(shell_quote(served_id))}; or "
            f"point THATCH_EMBEDDER_ADDR at one serving {shown_id}"
            if served and served.remote
            else RESTART_FIX
        )
        detail = (
            f"the embedder serves {inline(served_id)} but the model in use is {shown_id} ({origin})"
        )
        return Check("warn", "model", detail, fix), served_id
    if settings.source == "needs download" and served is not None and served.remote:
        # Unanswered, the remote side's model is unknown: say only what holds here (the
        # embedder check above already fails on the address).
        loads = "loads it" if served_id is not None else "would load it, once it answers"
        detail = (
            f"{shown_id} ({origin}; not cached here; the remote embedder at "
            f"{inline(served.address)} {loads})"
        )
        return Check("ok", "model", detail), model_id
    if settings.source == "needs download" and served_id is None:
        by_variable = chosen.origin == "THATCH_MODEL"
        fix = inline(unavailable_fix(model_id, env, by_variable=by_variable))
        if model_id in ADAPTED:
            detail = (
                f"{shown_id} ({origin}) is not built yet (thatch builds it on this machine "
                f"from {ADAPTED[model_id].base} and its shipped adapter)"
            )
            return Check("FAIL", "model", detail, fix), model_id
        if fix.startswith("thatch model pull"):
            detail = (
                f"{shown_id} ({origin}) is not cached; the embedder downloads it on first start"
            )
            return Check("warn", "model", detail, fix), model_id
        reason = (
            "HF_HUB_OFFLINE=1"
            if hub_offline(env)
            else f"the hub {inline(hub_endpoint(env))} does not answer"
        )
        detail = f"{shown_id} ({origin}) is not on this machine and {reason}"
        return Check("FAIL", "model", detail, fix), model_id
    where = f" at {inline(str(settings.path))}" if settings.path else ""
    serving = ", served by the embedder" if served_id else ""
    detail = f"{shown_id} ({settings.source}{where}; {origin}){serving}"
    if chosen.origin == "THATCH_MODEL":
        detail += _unsaved_note(env, model_id, name)
    return Check("ok", "model", detail), model_id


def _unsaved_note(env: Mapping[str, str], model_id: str, name: str) -> str:
    """Hosts started outside this shell (an IDE, a desktop launcher) lack THATCH_MODEL:
    say which model they get when it is another one, and how to save this one."""
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.model_names import model_id_for
    from thatch.embedder.client.settings import model_setting

    without = {key: value for key, value in env.items() if key != "THATCH_MODEL"}
    try:
        other = model_id_for(model_setting(without).value, env=without)
    except ThatchEmbedderError:
        return ""  # the config file's own problem shows once THATCH_MODEL is unset
    if other == model_id:
        return ""
    return (
        f"; processes started without THATCH_MODEL use {inline(other)}; save this one "
        f"with: thatch model use {inline(shell_quote(name))}"
    )
