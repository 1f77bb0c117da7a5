"""thatch predictions / thatch behaviors: list, show, delete, --store, --json, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows
from thatch.cli.main import cli


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    db = tmp_path / "thatch.db"
    monkeypatch.setenv("THATCH_DB_PATH", str(db))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    return db


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def seed(db: Path) -> None:
    """Two predictions (project, global) and a behavior, through the real tool layer."""
    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    with ToolContext.from_env() as ctx:
        tools = Tools(ctx)
        for args in (
            {
                "matcher": "choosing a test framework",
                "prediction": "pytest",
                "signal": "confirm",
                "rationale": "said so",
            },
            {
                "matcher": "formatting",
                "prediction": "tabs not spaces",
                "signal": "create",
                "rationale": "r",
                "store": "global",
            },
        ):
            assert not tools.call("engine", {"action": "prediction_update", **args}).is_error
        codify = {"situation": "before a deploy", "behavior": "run the tests", "rationale": "r"}
        assert not tools.call("engine", {"action": "behavior_codify", **codify}).is_error


def test_list_show_delete_predictions(env: Path) -> None:
    seed(env)
    listed = run("predictions")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.startswith("[0.58 conf, 1 tests] pytest\n  store: proj\n")
    assert "[0.50 conf, 0 tests] tabs not spaces\n  store: global" in listed.stdout
    only_global = run("predictions", "list", "--store", "global", "--json")
    document = json.loads(only_global.stdout)
    assert [item["statement"] for item in document] == ["tabs not spaces"]
    assert document[0]["matchers"] == [{"description": "formatting", "weight": 1.0}]
    assert document[0]["provenance"][0]["signal"] == "create"
    shown = run("predictions", "show", "pytest", "--json")
    assert shown.exit_code == 0, shown.output
    item = json.loads(shown.stdout)
    assert (item["confirm"], item["disconfirm"], item["evidence"]) == (1.0, 0.0, 1)
    by_id = run("predictions", "show", item["id"])
    assert by_id.stdout.startswith(f"id: {item['id']}\n[0.58 conf, 1 tests] pytest\n")
    missing = run("predictions", "show", "something unrelated entirely")
    assert missing.exit_code == 1
    assert missing.stderr == (
        'Error: No prediction matching "something unrelated entirely" found in "proj" or '
        '"global".\n'
    )
    deleted = run("predictions", "delete", item["id"])
    assert (deleted.exit_code, deleted.stdout) == (0, '[deleted] "pytest" from "proj"\n')
    assert rows(env, "SELECT description FROM prediction_matchers") == [("formatting",)]
    assert run("predictions", "list", "--store", "proj").stdout == 'No predictions in "proj".\n'


def test_behaviors_and_delete_by_statement(env: Path) -> None:
    seed(env)
    assert run("behaviors", "list").stdout.startswith("[0.50 conf, 0 tests] run the tests\n")
    deleted = run("behaviors", "delete", "run the tests", "--json")
    assert json.loads(deleted.stdout)["statement"] == "run the tests"
    assert rows(env, "SELECT count(*) FROM behavior_matchers") == [(0,)]


def test_bad_input_is_a_usage_error_and_writes_nothing(env: Path) -> None:
    seed(env)
    before = rows(env, "SELECT id, confidence FROM predictions ORDER BY id")
    for args in (
        ("predictions", "delete", "  "),
        ("predictions", "show", "x" * 1001),
        ("behaviors", "delete", "x", "--store", "a\nb"),
        ("predictions", "list", "--store", "a\nb"),
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Invalid arguments: " in result.stderr
    assert run("predictions", "nope").exit_code == 2
    assert rows(env, "SELECT id, confidence FROM predictions ORDER BY id") == before


@pytest.mark.parametrize(
    "args",
    [
        ("behaviors", "--store", "nostore"),
        ("behaviors", "list", "--store", "nostore"),
        ("predictions", "--store", "nostore", "--json"),
        ("predictions", "show", "xyz", "--store", "nostore"),
        ("behaviors", "delete", "run the tests", "--store", "nostore"),
    ],
)
def test_an_unknown_store_is_refused_naming_the_stores(env: Path, args: tuple[str, ...]) -> None:
    """Every reading verb refuses a store that does not exist, with the stores there are
    (as `thatch list --store nope` does), instead of an empty listing or "No … matching"."""
    seed(env)
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr == 'Error: no store named "nostore".\nStores: global, proj\n'
    assert run("list", "--store", "nostore").stderr == result.stderr
    assert rows(env, "SELECT count(*) FROM behaviors") == [(1,)]


def test_store_all_means_the_project_store_and_global(env: Path) -> None:
    """`--store all` reads what `thatch list --store all` reads (the default scope), for
    listing, --json, show and delete, instead of refusing the reserved name."""
    seed(env)
    for kind in ("predictions", "behaviors"):
        default = run(kind)
        assert default.exit_code == 0, default.output
        every = run(kind, "--store", "all")
        assert (every.exit_code, every.stdout) == (0, default.stdout), every.output
        as_json = run(kind, "list", "--store", "all", "--json")
        assert as_json.exit_code == 0, as_json.output
        assert as_json.stdout == run(kind, "list", "--json").stdout
    stores = {
        item["store"] for item in json.loads(run("predictions", "--store", "all", "--json").stdout)
    }
    assert stores == {"proj", "global"}
    shown = run("predictions", "show", "tabs not spaces", "--store", "all")
    assert shown.exit_code == 0, shown.output
    deleted = run("behaviors", "delete", "run the tests", "--store", "all")
    assert deleted.exit_code == 0, deleted.output
    assert rows(env, "SELECT count(*) FROM behaviors") == [(0,)]


def test_a_statement_below_085_names_the_nearest_with_its_fix(env: Path) -> None:
    """show / delete by a statement at similarity 0.77 (mock model: 3 words of 5 shared):
    the error names the nearest item of the scope and the command taking its id, --store
    kept; nothing is deleted."""
    seed(env)
    (item_id,) = rows(env, "SELECT id FROM behaviors")[0]
    before = rows(env, "SELECT * FROM behaviors")
    for command in ("show", "delete"):
        result = run("behaviors", command, "run the tests now please", "--store", "proj")
        assert (result.exit_code, result.stdout) == (1, "")
        assert result.stderr == (
            'Error: No behavior matching "run the tests now please" found in "proj".\n'
            f'Nearest: {item_id} "run the tests" in "proj" (similarity 0.77; a match needs 0.85)\n'
            f"Fix: thatch behaviors {command} {item_id} --store proj\n"
        )
    assert rows(env, "SELECT * FROM behaviors") == before
    shown = run("behaviors", "show", item_id, "--store", "proj")
    assert shown.stdout.startswith(f"id: {item_id}\n[0.50 conf, 0 tests] run the tests\n")


def test_an_exact_id_with_the_wrong_store_names_the_store_holding_it(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`behaviors delete <id> --store other`: the id of an item in another store is not
    embedded and matched by meaning (an id resembles nothing, or something); the error
    says where the item is, the fix is the same command with that store (shell-quoted,
    whatever it is named), and nothing is acted on, with or without an embedder."""
    import shlex

    from thatch.frontend.tools.context import ToolContext
    from thatch.frontend.tools.memory_tools import Tools

    seed(env)
    odd = "it's; rm -rf ~"
    with ToolContext.from_env() as ctx:
        codify = {"situation": "on a release", "behavior": "tag it", "rationale": "r"}
        done = Tools(ctx).call("engine", {"action": "behavior_codify", **codify, "store": odd})
        assert not done.is_error, done.text
    ids = {store: item_id for item_id, store in rows(env, "SELECT id, store FROM behaviors")}
    ((in_global,),) = rows(env, "SELECT id FROM predictions WHERE store = 'global'")
    before = rows(env, "SELECT * FROM behaviors ORDER BY id")
    for kind, item_id, scope, where, holder in (
        ("behaviors", ids["proj"], ["--store", "global"], '"global"', "proj"),
        ("behaviors", ids[odd], [], '"proj" or "global"', odd),
        ("predictions", in_global, ["--store", "proj"], '"proj"', "global"),
    ):
        for command in ("show", "delete"):
            result = run(kind, command, item_id, *scope)
            assert (result.exit_code, result.stdout) == (1, ""), result.output
            error, fix = result.stderr.splitlines()
            shown = json.dumps(holder)
            assert error == f"Error: no {kind[:-1]} {item_id} in {where}; it is in {shown}."
            assert shlex.split(fix) == ["Fix:", "thatch", kind, command, item_id, "--store", holder]
    assert rows(env, "SELECT * FROM behaviors ORDER BY id") == before
    # The embedder is not asked: with none to answer, the same error.
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", "127.0.0.1:9")
    result = run("behaviors", "delete", ids["proj"], "--store", "global")
    assert result.stderr.startswith(f'Error: no behavior {ids["proj"]} in "global"; it is in')
    assert rows(env, "SELECT * FROM behaviors ORDER BY id") == before
