"""Model ids and the embedder's address are data wherever thatch prints them (doctor,
``thatch embedder status|start``, their errors, the embedder's log).

A model directory without a usable ``model_id`` in its thatch_model.json is called
``local:<its name>``, and anyone may name a directory; a remote embedder says what it
serves; ``THATCH_EMBEDDER_ADDR`` and the threshold variables come from the environment.
A line break, an escape sequence or a bidi override in any of them is shown escaped, so
every line printed is one of thatch's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_proc import EmbedderProcess, embedder_process
from thatch.cli.main import cli
from thatch.common.shell_words import shell_quote

FORGED = "\nok  forged  all is well\x1b[2K\u202e"
SHOWN = "\\nok  forged  all is well\\u001b[2K\\u202e"  # as ``inline`` shows it
DOCTOR_LINE = re.compile(r"(ok|warn|FAIL)  \S+  |      fix: ")


def thatch(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def doctor_lines(result: Result) -> dict[str, list[str]]:
    """Check name -> its lines; every line must be one of doctor's, none forged."""
    lines = result.stdout.splitlines()
    assert all(DOCTOR_LINE.match(line) for line in lines), lines
    assert not any(line.startswith("ok  forged") for line in lines), lines
    checks: dict[str, list[str]] = {}
    name = ""
    for line in lines:
        if line.startswith("      fix: "):
            checks[name].append(line)
        else:
            name = line.split("  ")[1]
            checks[name] = [line]
    return checks


@pytest.fixture
def hostile_model(minilm_dir: Path, tmp_path: Path) -> Path:
    """The imported MiniLM in a directory named with a forged doctor line, its
    thatch_model.json naming no id: its id is ``local:<that name>``."""
    path = tmp_path / f"x{FORGED}"
    shutil.copytree(minilm_dir, path, copy_function=os.link)
    meta_path = path / "thatch_model.json"
    meta = json.loads(meta_path.read_text())
    del meta["model_id"]
    meta_path.unlink()  # a hard link to the shared import: write a file of its own
    meta_path.write_text(json.dumps(meta))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(path))
    return path


@pytest.fixture
def hostile_server(hostile_model: Path, short_tmp: Path) -> Iterator[EmbedderProcess]:
    with embedder_process(str(hostile_model), socket_dir=short_tmp) as proc:
        yield proc


def test_doctor_shows_ids_addresses_and_variables_as_data(
    hostile_model: Path,
    project: Path,
    short_tmp: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing serving: the model's id, the address nothing answers at and a threshold
    variable that is no number each stay inside their line."""
    socket_path = short_tmp / f"x{FORGED}"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{socket_path}")
    monkeypatch.setenv("THATCH_MODEL", str(hostile_model))
    monkeypatch.setenv("THATCH_DUPLICATE_THRESHOLD", FORGED)
    result = thatch("doctor")
    checks = doctor_lines(result)
    assert checks["embedder"] == [
        f"FAIL  embedder  nothing is answering at unix://{short_tmp}/x{SHOWN}",
        "      fix: thatch embedder start",
    ]
    assert checks["model"][0].startswith(
        f"ok  model  local:x{SHOWN} (local dir at {tmp_path}/x{SHOWN}; from THATCH_MODEL)"
    )
    [thresholds, fix] = checks["thresholds"]
    assert thresholds.startswith(
        f'warn  thresholds  ignoring THATCH_DUPLICATE_THRESHOLD="{SHOWN}": not a number'
    )
    assert thresholds.endswith(f"(built-in defaults: local:x{SHOWN} is not calibrated)")
    assert fix == "      fix: fix or unset it"


def test_embedder_commands_show_a_bad_address_as_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """An address that is no address, or a remote one `start` cannot manage: one error
    line each."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"x{FORGED}:1")
    result = thatch("embedder", "status")
    assert result.exit_code == 1
    assert result.stderr == (
        'Error: invalid THATCH_EMBEDDER_ADDR "x\\nok  forged  all is well\\u001b[2K\\u202e:1": '
        "expected unix:///path, host:port or dns:///host:port\n"
    )
    # A host holds no space, but a line break and an escape sequence it may.
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "dns:///x\nFAIL\x1b[2K\u202e:1")
    result = thatch("embedder", "start")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: thatch embedder start manages a local unix-socket embedder only; "
        "dns:///x\\nFAIL\\u001b[2K\\u202e:1 is remote.\n"
    )


def test_a_served_id_is_data_in_doctor_status_start_and_the_log(
    hostile_server: EmbedderProcess,
    hostile_model: Path,
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An embedder serving the model: the id it gives is shown escaped by doctor (serving
    it, and serving another model than the one in use), by `thatch embedder status` and
    `start` and `thatch model use`'s notices, and the embedder's own log keeps one line a
    record."""
    proc = hostile_server
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", proc.address)
    monkeypatch.setenv("THATCH_MODEL", str(hostile_model))
    checks = doctor_lines(thatch("doctor"))
    assert checks["embedder"] == [
        f"ok  embedder  serving at {proc.address} (model local:x{SHOWN}, pid {proc.pid})"
    ]
    assert checks["model"][0].startswith(
        f"ok  model  local:x{SHOWN} (local dir at {tmp_path}/x{SHOWN}; from THATCH_MODEL), "
        "served by the embedder"
    )

    status = thatch("embedder", "status")
    assert status.exit_code == 0, status.output
    lines = status.stdout.splitlines()
    assert all(re.match(r"[a-z -]+: +\S", line) for line in lines), lines
    assert f"{'model:':<14} local:x{SHOWN}" in lines

    started = thatch("embedder", "start")
    assert started.exit_code == 0, started.output
    assert started.stdout == (
        f"embedder already running at {proc.address} (pid {proc.pid}, model local:x{SHOWN})\n"
    )

    used = thatch("model", "use", "mock")  # THATCH_MODEL still names the hostile model
    assert used.exit_code == 0, used.output
    assert used.stderr.splitlines() == [
        f"Note: THATCH_MODEL={tmp_path}/x{SHOWN} is set in this environment and wins over "
        "the saved choice here; unset it to use the saved one.",
        f"The running embedder serves local:x{SHOWN}; switch it with: "
        "thatch embedder stop && thatch embedder start",
    ]

    monkeypatch.setenv("THATCH_MODEL", "mock")
    checks = doctor_lines(thatch("doctor"))
    assert checks["model"] == [
        f"warn  model  the embedder serves local:x{SHOWN} but the model in use is mock "
        "(from THATCH_MODEL)",
        "      fix: thatch embedder stop && thatch embedder start",
    ]

    log = proc.log_text().splitlines()
    assert any("serving at" in line and "local:x\\nok  forged" in line for line in log), log
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ", line) for line in log), log


# Ordinary characters an error quotes as they are: non-ASCII spaces (no-break, narrow
# no-break, ideographic), a quote, a backslash.
PLAIN = 'メモ\u3000帳\u00a0a\u202fb "q" c\\d'


def test_error_lines_escape_control_characters_only(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An address with non-ASCII spaces, a quote and a backslash is shown as it is; in an
    invalid one, quoted, only the quote, its look-alikes, the backslash and the control
    characters (a line separator, a bidi override, not an é) are escaped."""
    address = f"unix://{short_tmp}/{PLAIN}/e.sock"
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", address)
    result = thatch("embedder", "status")
    assert result.exit_code == 1
    assert result.stderr == (
        f"Error: no embedder answering at {address}.\nFix: thatch embedder start\n"
    )

    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix:/tmp/é {PLAIN}\u2028\u202e")
    result = thatch("embedder", "status")
    assert result.exit_code == 1
    assert result.stderr == (
        'Error: invalid THATCH_EMBEDDER_ADDR "unix:/tmp/é メモ\u3000帳\u00a0a\u202fb '
        '\\"q\\" c\\\\d\\u2028\\u202e": expected unix:///path, host:port or dns:///host:port\n'
    )
    # A quote's fullwidth look-alike would seem to end the quoted value early.
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "unix:/x\uff02: expected nothing; \uff3c")
    result = thatch("embedder", "status")
    assert result.stderr.startswith(
        'Error: invalid THATCH_EMBEDDER_ADDR "unix:/x\\uff02: expected nothing; \\uff3c": '
    )


@pytest.fixture
def broken_hostile_model(tmp_path: Path) -> Path:
    """A model directory named with non-ASCII spaces and a forged doctor line, with no
    thatch_model.json (its id is ``local:<its name>``) and no tokenizer.json: the error
    saying so quotes the id and the path as they are."""
    path = tmp_path / f"x\u00a0\u202f{FORGED}"
    path.mkdir()
    (path / "config.json").write_text('{"hidden_size": 4}')
    return path


def test_an_error_quoting_a_hostile_model_is_one_line_in_doctor_and_embedder_start(
    broken_hostile_model: Path,
    project: Path,
    short_tmp: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry's `model <id> at <path> is missing tokenizer.json` holds the id and the
    path raw: doctor's check stays one line, escaped once (a detail it escaped already, a
    no-break space in it, is not escaped again), and `thatch embedder start`'s error,
    which quotes the started embedder's, is one `Error:` and one `Fix:` line."""
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", f"unix://{short_tmp}/e.sock")
    monkeypatch.setenv("THATCH_MODEL", str(broken_hostile_model))
    shown = f"{tmp_path}/x\u00a0\u202f{SHOWN}"
    checks = doctor_lines(thatch("doctor"))
    assert checks["model"] == [
        f"FAIL  model  model local:x\u00a0\u202f{SHOWN} at {shown} is missing tokenizer.json",
        "      fix: THATCH_MODEL is set in this environment and wins over the saved model: "
        "unset THATCH_MODEL; or set it to another model id, ID (an imported model, a hub id "
        "or a model directory): export THATCH_MODEL=ID",
    ]
    assert checks["thresholds"][0].endswith(f"(built-in defaults: {shown} is not calibrated)")

    started = thatch("embedder", "start", "--wait", "60")
    assert started.exit_code == 1
    pasted = shell_quote(str(broken_hostile_model))
    assert pasted.isprintable() and pasted.startswith("$'")
    log = Path(os.environ["XDG_CACHE_HOME"]) / "thatch" / "embedder.log"
    # "Starting embedder…" comes first when the start takes over a second (a loaded machine).
    assert started.stderr.splitlines()[-2:] == [
        f"Error: nothing is listening at unix://{short_tmp}/e.sock (auto-start failed: "
        f"model local:x\u00a0\u202f{SHOWN} at {shown} is missing tokenizer.json); log: {log}",
        # ANSI-C quoted: the directory's own name, pasted (a shown '\\n' was a backslash).
        f"Fix: see how the model resolves: thatch model info {pasted}; THATCH_MODEL is set "
        "in this environment and wins over the saved model: unset THATCH_MODEL; or set it to "
        "another model id, ID: export THATCH_MODEL=ID",
    ]
    assert started.stderr.splitlines()[:-2] in ([], ["Starting embedder…"]), started.stderr


def test_a_traceback_in_the_embedder_log_is_indented_under_its_record(tmp_path: Path) -> None:
    """An exception's text is anyone's words: a line of it that reads as a record, and the
    stack of a record logged with one, are indented under the record that carries them,
    also when another handler formatted the record first (logging keeps its traceback
    text on the record, and reused it unindented)."""
    import io
    import logging

    from thatch.embedder.server.serve_cmd import setup_logging

    forged = "2026-01-01 00:00:00,000 INFO serving at unix:///x (model mock)"
    logger, handler = setup_logging(tmp_path / "embedder.log", "info")
    first = logging.StreamHandler(io.StringIO())
    logger.handlers.insert(0, first)
    try:
        try:
            raise ValueError(f"bad\n{forged}\r{forged}\x1b[2K")
        except ValueError:
            logger.exception("inference failed")
        logger.info("here", stack_info=True)
        handler.flush()
    finally:
        logger.removeHandler(first)
        logger.removeHandler(handler)
        handler.close()
    lines = (tmp_path / "embedder.log").read_text().split("\n")
    assert lines.pop() == ""
    records = [line for line in lines if not line.startswith("  ")]
    assert [record.split(" ", 2)[2] for record in records] == [
        "ERROR inference failed",
        "INFO here",
    ]
    assert f"  {forged}\\r{forged}\\u001b[2K" in lines
    assert "  Stack (most recent call last):" in lines
