"""Reading stdin lines as JSON-RPC: id recovery, lone surrogates, batches, line caps."""

from __future__ import annotations

import io
import json

import mcp_types
import pytest

from thatch.frontend.mcp.jsonrpc_lines import (
    BAD_ID,
    EMPTY_BATCH,
    NOT_A_MESSAGE,
    Batch,
    Refused,
    read_line,
    top_level_id,
    without_lone_surrogates,
)
from thatch.frontend.mcp.stdio import read_raw_line

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "7" * 5000


def test_valid_lines_parse_as_the_sdk_does() -> None:
    line = read_line(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
    assert isinstance(line, mcp_types.JSONRPCRequest) and line.id == 3
    assert read_line("") is None and read_line("  \r\n") is None


def test_lone_surrogates_are_replaced_and_the_message_kept() -> None:
    text = '{"jsonrpc":"2.0","id":"a\\udc00","method":"ping","params":{"t":"a \\ud800 b"}}'
    line = read_line(text)
    assert isinstance(line, mcp_types.JSONRPCRequest)
    assert line.id == "a\ufffd" and line.params == {"t": "a \ufffd b"}


def test_surrogate_replacement_keeps_pairs_and_escaped_backslashes() -> None:
    text = r'"\ud83d\ude00 \\ud800 \ud800\ud800 \uDBFF x \u00e9"'
    assert without_lone_surrogates(text) == r'"\ud83d\ude00 \\ud800 \ufffd\ufffd \ufffd x \u00e9"'
    assert json.loads(without_lone_surrogates(text)) == "\U0001f600 \\ud800 \ufffd\ufffd \ufffd x é"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('"params":{"n":' + HUGE_INT + "}", "Parse error: an integer with more than 4300 digits"),
        ('"params":{"n":' + DEEP + "}", "Parse error: nested too deeply"),
    ],
)
def test_unparsable_values_are_refused_with_the_callers_id(body: str, reason: str) -> None:
    before = read_line('{"jsonrpc":"2.0","id":42,"method":"tools/call",' + body + "}")
    after = read_line('{"jsonrpc":"2.0","method":"tools/call",' + body + ',"id":"late"}')
    assert before == Refused(mcp_types.PARSE_ERROR, reason, 42)
    assert after == Refused(mcp_types.PARSE_ERROR, reason, "late")


def test_the_id_scan_needs_json_up_to_the_id() -> None:
    assert top_level_id('{"a": {"id": 1}, "b": "x\\"}", "id": -7, "z": ' + DEEP) == -7
    assert top_level_id('  {"id" : "s\\n\\ud800"}') == "s\n\ufffd"
    assert top_level_id('{"id": 1.5}') is None  # JSON-RPC ids are strings or integers
    assert top_level_id('{"id": ' + HUGE_INT + "}") is None
    assert top_level_id('{"a": [1, 2} "id": 3}') is None  # unbalanced before the id
    assert top_level_id('{"a" 1, "id": 3}') is None
    assert top_level_id('[{"id": 3}]') is None
    assert top_level_id("this is {not json") is None


def test_json_that_is_no_message_is_refused_with_its_id() -> None:
    assert read_line('{"jsonrpc":"2.0","id":5}') == Refused(
        mcp_types.INVALID_REQUEST, NOT_A_MESSAGE, 5
    )
    assert read_line('{"id":true}') == Refused(mcp_types.INVALID_REQUEST, NOT_A_MESSAGE)
    assert read_line("this is {not json") == Refused(mcp_types.PARSE_ERROR, "Parse error")


@pytest.mark.parametrize("bad_id", ['{"a":1}', "[1]", "true", "1.5", "null"])
def test_a_request_whose_id_is_no_string_or_integer_is_refused(bad_id: str) -> None:
    """The SDK's union reads it as a notification, which gets no answer: its sender would
    wait for good. Alone or in a batch it is refused; a notification's params may hold an
    "id" of their own."""
    text = f'{{"jsonrpc":"2.0","id":{bad_id},"method":"ping"}}'
    assert read_line(text) == Refused(mcp_types.INVALID_REQUEST, BAD_ID)
    batch = read_line(f"[{text}]")
    assert isinstance(batch, Batch) and batch.items == [Refused(mcp_types.INVALID_REQUEST, BAD_ID)]
    note = read_line('{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":3}}')
    assert isinstance(note, mcp_types.JSONRPCNotification)


def test_arrays_are_batches_with_refused_items() -> None:
    line = read_line('[{"jsonrpc":"2.0","id":1,"method":"ping"}, 7, {"id":"x"}]')
    assert isinstance(line, Batch)
    first, second, third = line.items
    assert isinstance(first, mcp_types.JSONRPCRequest) and first.id == 1
    assert second == Refused(mcp_types.INVALID_REQUEST, NOT_A_MESSAGE)
    assert third == Refused(mcp_types.INVALID_REQUEST, NOT_A_MESSAGE, "x")
    assert read_line(" [ ] ") == Refused(mcp_types.INVALID_REQUEST, EMPTY_BATCH)


def test_over_long_lines_are_cut_and_the_rest_dropped() -> None:
    source = io.BytesIO(b'{"id": 9, "x": "' + b"a" * 100 + b'"}\n{"next": 1}\nlast')
    assert read_raw_line(source, limit=20) == (b'{"id": 9, "x": "aaaa', True)
    assert read_raw_line(source, limit=20) == (b'{"next": 1}\n', False)
    assert read_raw_line(source, limit=4) == (b"last", False)
    assert read_raw_line(source, limit=4) is None
