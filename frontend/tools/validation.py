"""Tool arguments: declared once, published as JSON Schema, checked with the spec's texts.

Every tool's parameters are a list of ``Param``; the MCP server publishes
``input_schema(params)`` and the tool layer runs ``validate(params, raw)`` on the raw JSON
arguments, so the schema a host sees and the checks it meets cannot drift apart.
Messages follow docs/tools.md §validation: ``Invalid arguments: <field>: <reason>[; …]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from thatch.frontend.identifiers import NOT_UTF8, not_utf8
from thatch.frontend.untrusted import has_control, quoted

__all__ = [
    "CONTENT_MAX",
    "LABEL_MAX",
    "NOT_AN_OBJECT",
    "QUERY_MAX",
    "SESSION_ID_MAX",
    "ArgumentError",
    "Param",
    "ParamType",
    "input_schema",
    "shortest",
    "validate",
]

ParamType = Literal["string", "integer", "number", "boolean", "array"]

NOT_AN_OBJECT = 'Invalid arguments: expected an object of named arguments, e.g. {"query": "…"}'

LABEL_MAX = 200
CONTENT_MAX = 50_000
QUERY_MAX = 10_000
SESSION_ID_MAX = 512  # = identifiers.SESSION_ID_MAX, which the hooks use


class ArgumentError(Exception):
    """Arguments were refused; ``str(error)`` is the complete one-line tool error."""


@dataclass(frozen=True)
class Param:
    name: str
    type: ParamType
    description: str
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[str, ...] | None = None
    max_length: int | None = None
    single_line: bool = False
    # Names shown in thatch's own lines (branches): control and invisible format
    # characters are refused (untrusted.has_control).
    no_control: bool = False
    # Text that must carry something: "" and whitespace-only are refused.
    non_empty: bool = False
    # Text where "" / whitespace-only means "not given" (store names).
    blank_is_omitted: bool = False
    default: Any = None
    # A last rule for text, run after the ones above: returns the reason or None
    # (``identifiers.store_name_problem``, ``identifiers.session_id_problem``).
    check: Callable[[str], str | None] | None = None
    # "array" (of strings): at most this many items, each checked as a string.
    max_items: int | None = None


def input_schema(params: Sequence[Param]) -> dict[str, Any]:
    """The JSON Schema object published in ``tools/list``."""
    properties: dict[str, Any] = {}
    for param in params:
        # A name that says it all goes without a description (docs/tools.md §tools).
        prop: dict[str, Any] = {"type": param.type}
        if param.type == "array":
            prop["items"] = {"type": "string"}
        if param.description:
            prop["description"] = param.description
        if param.enum is not None:
            prop["enum"] = list(param.enum)
        if param.minimum is not None:
            prop["minimum"] = _schema_number(param.minimum)
        if param.maximum is not None:
            prop["maximum"] = _schema_number(param.maximum)
        if param.max_items is not None:
            prop["maxItems"] = param.max_items
        elif param.max_length is not None and param.type != "array":
            prop["maxLength"] = param.max_length
        if param.default is not None:
            prop["default"] = param.default
        properties[param.name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": [param.name for param in params if param.required],
    }


def _schema_number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def validate(params: Sequence[Param], raw: object) -> dict[str, Any]:
    """Coerced values for every declared parameter (None when omitted); unknown keys ignored.

    Raises ArgumentError with all per-field failures joined by ``; ``.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ArgumentError(NOT_AN_OBJECT)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for param in params:
        try:
            values[param.name] = _check(param, raw.get(param.name))
        except _Reason as reason:
            problems.append(f"{param.name}: {reason}")
    if problems:
        raise ArgumentError("Invalid arguments: " + "; ".join(problems))
    return values


class _Reason(Exception):
    pass


def _check(param: Param, value: object) -> Any:
    if param.blank_is_omitted and isinstance(value, str) and not value.strip():
        value = None
    if value is None:
        if param.required:
            raise _Reason("required")
        return param.default
    match param.type:
        case "string":
            return _check_text(param, value)
        case "boolean":
            return _check_bool(value)
        case "integer":
            return _check_integer(param, value)
        case "number":
            return _check_number(param, value)
        case "array":
            return _check_array(param, value)
    raise AssertionError(param.type)  # pragma: no cover - Literal is exhaustive


def _check_text(param: Param, value: object) -> str:
    if not isinstance(value, str):
        raise _Reason("must be a string")
    if param.enum is not None:
        if value not in param.enum:
            raise _Reason(f"must be one of {', '.join(param.enum)} (got {_short(value)})")
        return value
    if param.non_empty and not value.strip():
        raise _Reason("must not be empty")
    if param.max_length is not None and len(value) > param.max_length:
        raise _Reason(f"too long ({len(value)} characters; maximum {param.max_length})")
    if not_utf8(value):
        raise _Reason(NOT_UTF8)
    if param.single_line and any(char in value for char in "\r\n\u2028\u2029\x0b\x0c\x85"):
        raise _Reason("must be a single line")
    if param.no_control and has_control(value):
        raise _Reason("must not contain control characters")
    if param.check is not None:
        problem = param.check(value)
        if problem is not None:
            raise _Reason(problem)
    return value


def _check_array(param: Param, value: object) -> list[str]:
    """A list of strings; one string alone is a list of one (lax, as numbers are)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise _Reason("must be an array of strings")
    if param.max_items is not None and len(items) > param.max_items:
        raise _Reason(f"too many items ({len(items)}; maximum {param.max_items})")
    for item in items:
        if param.max_length is not None and len(item) > param.max_length:
            raise _Reason(f"item too long ({len(item)} characters; maximum {param.max_length})")
        if not_utf8(item):
            raise _Reason(f"items {NOT_UTF8}")
        if has_control(item):
            raise _Reason("items must not contain control characters")
    return [item for item in items if item.strip()]


def _short(value: str) -> str:
    """An offending value echoed in a message: quoted exactly as it came (" send" is not
    "send"), controls escaped, cut to one short line."""
    return quoted(value if len(value) <= 40 else value[:39] + "…")


def _check_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _Reason("must be a boolean")


def _as_number(value: object) -> float | int | None:
    """Lax coercion: numbers stay, numeric strings parse; everything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            pass
        try:
            number = float(text)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _check_integer(param: Param, value: object) -> int:
    number = _as_number(value)
    if isinstance(number, float):
        number = int(number) if math.isfinite(number) and number.is_integer() else None
    if number is None:
        raise _Reason("must be an integer")
    if not _in_range(param, number):
        low, high = _bounds(param)
        raise _Reason(f"must be an integer from {low} to {high}")
    return number


def _check_number(param: Param, value: object) -> float:
    number = _as_number(value)
    if number is None or not math.isfinite(number):
        raise _Reason("must be a number")
    if not _in_range(param, number):
        low, high = _bounds(param)
        raise _Reason(f"must be a number from {low} to {high}")
    return float(number)


def _in_range(param: Param, number: float) -> bool:
    if param.minimum is not None and number < param.minimum:
        return False
    return not (param.maximum is not None and number > param.maximum)


def _bounds(param: Param) -> tuple[str, str]:
    return shortest(param.minimum), shortest(param.maximum)


def shortest(value: float | None) -> str:
    """Shortest decimal form: ``0.85``, ``0.9``, ``1``."""
    if value is None:
        return "…"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text
