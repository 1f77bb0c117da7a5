"""What a tool is (docs/tools.md §tools): ``ToolSpec``, and ``Action`` for a tool that
groups several operations under one name (``engine``, ``chat``).

A tool's parameters are published once as ``input_schema`` and checked by ``arguments``,
so the schema a host sees and the checks it meets cannot drift apart. An action tool
publishes ``action`` (an enum) and the union of its actions' parameters; a call is checked
against its action's own parameters, and a parameter of the tool that the action does not
take is an error naming the ones it takes (never silently ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from thatch.frontend.tools.validation import NOT_AN_OBJECT, ArgumentError, Param, validate
from thatch.frontend.untrusted import token

if TYPE_CHECKING:
    from thatch.frontend.tools.operations import Operations

__all__ = [
    "ACTION",
    "Action",
    "Handler",
    "ToolSpec",
]

# Validated arguments (every declared parameter, None when omitted) in, result text out;
# raises what the typed operations raise (ArgumentError, Refused, StoreError, ...).
Handler = Callable[["Operations", dict[str, Any]], str]

ACTION = "action"


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[Param, ...]
    run: Handler


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...] = ()
    run: Handler | None = None
    # A successful call of this tool acknowledges the session's queued tool interactions:
    # the tool hooks drain (consume, or complete the handed-out snapshot) instead of
    # queueing the call (docs/hooks.md §append, §snapshot).
    drains_queue: bool = False
    actions: tuple[Action, ...] = ()
    # The switch that turns this tool off per project ("engines", "chat"; docs/tools.md
    # §switches); None: always served.
    feature: str | None = None

    def published_params(self) -> tuple[Param, ...]:
        """What ``tools/list`` shows: the parameters, or ``action`` and the union of the
        actions' parameters (the first declaration of a name; only ``action`` required)."""
        if not self.actions:
            return self.params
        union: dict[str, Param] = {}
        for action in self.actions:
            for param in action.params:
                union.setdefault(param.name, _optional(param))
        return (self.action_param(), *union.values())

    def action_param(self) -> Param:
        names = tuple(action.name for action in self.actions)
        return Param(ACTION, "string", "", required=True, enum=names)

    def arguments(self, raw: object) -> tuple[Handler, dict[str, Any]]:
        """The handler and validated arguments of a call; raises ArgumentError."""
        if not self.actions:
            assert self.run is not None
            return self.run, validate(self.params, raw)
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ArgumentError(NOT_AN_OBJECT)
        name = validate((self.action_param(),), {ACTION: raw.get(ACTION)})[ACTION]
        action = next(a for a in self.actions if a.name == name)
        taken = {param.name for param in action.params}
        # null is how some models leave a published parameter unset: not an argument.
        foreign = [
            key
            for key, value in raw.items()
            if key != ACTION and key not in taken and value is not None
        ]
        problems: list[str] = []
        if foreign:
            takes = ", ".join(sorted(taken)) if taken else "no other parameters"
            problems += [
                f"{token(key)}: not a parameter of action {name} (it takes {takes})"
                for key in foreign
            ]
        try:
            values = validate(action.params, {k: v for k, v in raw.items() if k in taken})
        except ArgumentError as error:
            problems.append(str(error).removeprefix("Invalid arguments: "))
            values = {}
        if problems:
            raise ArgumentError("Invalid arguments: " + "; ".join(problems))
        return action.run, values


def _optional(param: Param) -> Param:
    # Required by one action is not required by the tool: its action checks that.
    from dataclasses import replace

    return replace(param, required=False)
