"""One line of ``thatch mcp``'s stdin read as JSON-RPC, recovering what a strict parse refuses.

A caller whose line gets an error without its id waits forever, so a line that fails the
SDK's parser is looked at again: lone UTF-16 surrogate escapes (JavaScript's
``JSON.stringify`` writes them) become U+FFFD and the message is accepted; a line the
stdlib cannot parse either (a 5,000-digit integer, nesting deeper than its recursion
limit) is answered with the id a bounded scan finds in its top-level object.
Arrays are batches; whether a session may send them is the transport's decision.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp_types import JSONRPCMessage, RequestId
from pydantic import ValidationError

__all__ = [
    "EMPTY_BATCH",
    "NOT_A_MESSAGE",
    "Batch",
    "Refused",
    "read_line",
    "top_level_id",
    "without_lone_surrogates",
]

# A lone high surrogate escape (not followed by a low one), a lone low one, or any other
# escape; matching escapes left to right keeps "\\ud800" (an escaped backslash) intact.
_ESCAPE = re.compile(
    r"\\(?:u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    r"|u[dD][c-fC-F][0-9a-fA-F]{2}()|.)",
    re.DOTALL,
)
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
# One token of a top-level object: a string, a structural character, or a scalar.
_TOKEN = re.compile(rf"\s*(?:({_STRING})|([{{}}\[\]:,])|([-+.0-9a-zA-Z]+))", re.DOTALL)
# Inside a nested value only brackets and strings matter; runs of the rest are skipped.
_NESTED = re.compile(rf'{_STRING}|[\[{{]|[\]}}]|[^"\[\]{{}}]+', re.DOTALL)
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]{0,4299})")

NOT_A_MESSAGE = "Invalid Request: not a JSON-RPC 2.0 request, notification or response"
EMPTY_BATCH = "Invalid Request: an empty batch"
BAD_ID = "Invalid Request: id must be a string or an integer"


@dataclass(frozen=True)
class Refused:
    """A line (or batch item) answered at once with an error; ``id`` when one was found."""

    code: int
    message: str
    id: RequestId | None = None

    def reply(self) -> mcp_types.JSONRPCError:
        return mcp_types.JSONRPCError(
            jsonrpc="2.0",
            id=self.id,
            error=mcp_types.ErrorData(code=self.code, message=self.message),
        )


@dataclass(frozen=True)
class Batch:
    """A JSON array of messages; items that are no message are already refusals."""

    items: list[JSONRPCMessage | Refused]


Line = JSONRPCMessage | Batch | Refused


def read_line(text: str) -> Line | None:
    """The message, batch or refusal one stdin line holds; ``None`` for a blank line."""
    if not text.strip():
        return None
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError:
        pass  # the slow path below says why, and finds the id
    else:
        if not (isinstance(message, mcp_types.JSONRPCNotification) and '"id"' in text):
            return message
        # Perhaps a request whose id is neither a string nor an integer: the slow path
        # finds out, where the SDK's union would take it for a notification (no answer).
    if "\\" in text:
        text = without_lone_surrogates(text)
    try:
        value = json.loads(text)
    except RecursionError:
        return Refused(mcp_types.PARSE_ERROR, "Parse error: nested too deeply", top_level_id(text))
    except ValueError as error:
        return Refused(mcp_types.PARSE_ERROR, _parse_reason(error), top_level_id(text))
    if isinstance(value, list):
        if not value:
            return Refused(mcp_types.INVALID_REQUEST, EMPTY_BATCH)
        return Batch([message_or_refusal(item) for item in value])
    return message_or_refusal(value)


def message_or_refusal(value: Any) -> JSONRPCMessage | Refused:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except (ValidationError, RecursionError):
        return Refused(mcp_types.INVALID_REQUEST, NOT_A_MESSAGE, _member_id(value))
    if isinstance(message, mcp_types.JSONRPCNotification) and "id" in value:
        # A request whose id is an object, array, boolean, fraction or null: its sender
        # waits for an answer a notification never gets.
        return Refused(mcp_types.INVALID_REQUEST, BAD_ID)
    return message


def without_lone_surrogates(text: str) -> str:
    """``text`` with every unpaired ``\\uD800``–``\\uDFFF`` escape replaced by ``\\ufffd``."""

    def replace(match: re.Match[str]) -> str:
        lone_high = match.group(1) is not None and match.group(2) is None
        return "\\ufffd" if lone_high or match.group(3) is not None else match.group(0)

    return _ESCAPE.sub(replace, text)


def top_level_id(text: str) -> RequestId | None:
    """The ``id`` member of the object ``text`` opens, if well-formed up to that member.

    Linear in the text and without recursion, so it copes with what the parsers refuse;
    what follows the id is not checked (a caller is better off with its id than without).
    """
    match = _TOKEN.match(text)
    if match is None or match.group(2) != "{":
        return None
    pos = match.end()
    while True:
        key = _TOKEN.match(text, pos)
        if key is None or key.group(1) is None:
            return None
        colon = _TOKEN.match(text, key.end())
        if colon is None or colon.group(2) != ":":
            return None
        value = _TOKEN.match(text, colon.end())
        if value is None:
            return None
        if _string(key.group(1)) == "id":
            return _id_token(value)
        end = _skip_value(text, value)
        after = _TOKEN.match(text, end) if end is not None else None
        if after is None or after.group(2) != ",":
            return None
        pos = after.end()


def _skip_value(text: str, first: re.Match[str]) -> int | None:
    """Where the value starting with token ``first`` ends; ``None`` if it never closes."""
    if first.group(2) not in ("{", "["):
        return first.end() if first.group(2) is None else None
    depth, pos = 1, first.end()
    while depth:
        match = _NESTED.match(text, pos)
        if match is None:
            return None
        piece = match.group(0)
        if piece in ("{", "["):
            depth += 1
        elif piece in ("}", "]"):
            depth -= 1
        pos = match.end()
    return pos


def _id_token(token: re.Match[str]) -> RequestId | None:
    if token.group(1) is not None:
        return _string(token.group(1))
    scalar = token.group(3)
    if scalar is not None and _INTEGER.fullmatch(scalar):
        return int(scalar)
    return None


def _string(token: str) -> str | None:
    try:
        value = json.loads(without_lone_surrogates(token))
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _member_id(value: Any) -> RequestId | None:
    if not isinstance(value, dict):
        return None
    found = value.get("id")
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


def _parse_reason(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return "Parse error"
    message = str(error)
    if "integer string conversion" in message:
        return "Parse error: an integer with more than 4300 digits"
    return "Parse error: " + message.split(";")[0]
