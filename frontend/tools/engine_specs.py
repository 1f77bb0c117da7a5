"""The ``engine`` tool (engines.md §5): the user decision model and the agent's behaviors,
one action per former engine tool; handlers in engine_tools.py."""

from __future__ import annotations

from thatch.frontend.tools import engine_tools as eng
from thatch.frontend.tools.memory_specs import store_param
from thatch.frontend.tools.spec import Action, ToolSpec
from thatch.frontend.tools.validation import QUERY_MAX, Param

__all__ = [
    "ENGINE_ACTIONS",
    "ENGINE_SPEC",
    "ENGINE_TEXT_MAX",
]

ENGINE_TEXT_MAX = 1_000  # a situation or a statement: one sentence, never a document


def _text(name: str, *, max_length: int = ENGINE_TEXT_MAX) -> Param:
    return Param(name, "string", "", required=True, non_empty=True, max_length=max_length)


_SIGNAL = Param(
    "signal",
    "string",
    "",
    required=True,
    enum=("confirm", "disconfirm", "soft", "create"),
)
_RELEVANT = Param("relevant", "boolean", "", required=True)

ENGINE_ACTIONS: tuple[Action, ...] = (
    Action(
        "prediction_query",
        (_text("context", max_length=QUERY_MAX), store_param()),
        eng.prediction_query,
    ),
    Action(
        "prediction_update",
        (
            _text("matcher"),
            _text("prediction"),
            _SIGNAL,
            _text("rationale", max_length=QUERY_MAX),
            store_param(creates=True),
        ),
        eng.prediction_update,
    ),
    Action("prediction_list", (store_param(),), eng.prediction_list),
    Action("prediction_delete", (_text("statement"), store_param()), eng.prediction_delete),
    Action(
        "behavior_codify",
        (
            _text("situation"),
            _text("behavior"),
            _text("rationale", max_length=QUERY_MAX),
            store_param(creates=True),
        ),
        eng.behavior_codify,
    ),
    Action(
        "behavior_feedback",
        (_text("behavior"), _RELEVANT, _text("context", max_length=QUERY_MAX), store_param()),
        eng.behavior_feedback,
    ),
    Action("behavior_list", (store_param(),), eng.behavior_list),
    Action("behavior_delete", (_text("statement"), store_param()), eng.behavior_delete),
)

ENGINE_SPEC = ToolSpec(
    "engine",
    "What this user tends to want (predictions) and your own rules (behaviors). "
    "prediction_query {context}: a judgement call the 'User decision model' block did not "
    "cover. prediction_update {matcher, prediction, signal, rationale}: the user "
    "confirmed, disconfirmed, softly pushed back on or stated (create) a preference; query "
    "first. behavior_codify {situation, behavior, rationale}: a rule for your discipline, "
    "never less thorough. behavior_feedback {behavior, relevant, context}: grade each "
    "surfaced behavior. *_list, *_delete {statement}: inspect, remove.",
    actions=ENGINE_ACTIONS,
    feature="engines",
)
