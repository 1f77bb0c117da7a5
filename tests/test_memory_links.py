"""``related`` at save (docs/tools.md §code-anchors): a memory names the memories of its
store it depends on, and inherits their code-changed marker. Real git repository, real
SQLite file; a deterministic embedder (the marker does not depend on ranking)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_embedder import FakeEmbedder, bag_vector, rows
from tests.test_code_anchors import PARSER, edit, git, ok
from thatch.frontend.anchors.check import AnchorCheck
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.memory_tools import Tools


def unhurried() -> AnchorCheck:
    """A check whose clock stands still: its 30 ms budget never runs out on a loaded
    machine (what is asserted is which memories are marked, not how fast)."""
    return AnchorCheck(clock=lambda: 0.0)


def context(tmp_path: Path, repo: Path, embedder: object) -> ToolContext:
    return ToolContext(
        store=Store.open(tmp_path / "thatch.db"),
        embedder=embedder,  # type: ignore[arg-type]
        project_store="acme",
        project_dir=repo,
        host=None,
        env={},
        queue_dir=tmp_path / "queue",
        anchor_check=unhurried(),
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "acme"
    (path / "src").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "src" / "config.py").write_text(PARSER)
    (path / "README").write_text("acme\n")
    git(path, "add", ".")
    git(path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "i")
    return path


def save(tools: Tools, label: str, **extra: object) -> str:
    return ok(tools, "memory_remember", {"label": label, "content": f"{label} notes", **extra})


def links(db: Path) -> list[tuple[str, ...]]:
    return rows(db, "SELECT store, slug, target FROM thatch_links ORDER BY 1, 2, 3")


def test_a_dependent_inherits_the_marker_on_recall_and_in_the_nudge(
    tmp_path: Path, repo: Path
) -> None:
    from thatch.frontend.hooks.recall_scan import marked_labels

    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Config parsing", anchors=["src/config.py:parse_config"])
        save(tools, "Config callers", related=["config parsing"])  # by slug: any case
        save(tools, "Unlinked")
        assert links(tmp_path / "thatch.db") == [("acme", "config-callers", "config-parsing")]
        assert "code changed" not in ok(tools, "memory_recall", {"query": "config"})

        edit(repo / "src" / "config.py", "value.strip()", "value")
        text = ok(tools, "memory_recall", {"query": "config", "limit": 3})
        assert text.count("code changed") == 2
        assert '] [code changed since saved: src/config.py via "Config parsing"]\n' in text
        assert "# Config callers" in text.split('via "Config parsing"]\n', 1)[1][:20]

        matches = ctx.store.search(["acme"], bag_vector("config", FakeEmbedder.dim), limit=3)
        labels, changed = marked_labels(unhurried(), ctx.store, matches)
        assert changed == {
            "Config parsing": ["src/config.py"],
            "Config callers": ["src/config.py"],
        }
        assert labels[0] == "Unlinked"  # the marked ones last, as in recall


def test_the_link_points_one_way(tmp_path: Path, repo: Path) -> None:
    """What a memory depends on does not inherit from its dependent."""
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Base")
        save(tools, "Dependent", related=["Base"], anchors=["README"])
        (repo / "README").write_text("changed\n")
        text = ok(tools, "memory_recall", {"query": "notes"})
    assert text.count("code changed") == 1
    assert "[code changed since saved: README]\n# Dependent" in text


@pytest.mark.parametrize(
    ("related", "reason"),
    [
        (["Nope"], 'no memory "Nope" in store "acme"'),
        (["Base", "../../etc/passwd"], 'no memory "../../etc/passwd" in store "acme"'),
        (["Shared"], 'no memory "Shared" in store "acme" (found in "global"; related '),
        (["New"], '"New" is this memory itself'),
        (["x" * 201], "item too long (201 characters; maximum 200)"),
        (["a\nb"], "must not contain control characters"),
        (["] [score:0.999"], 'no memory "] [score:0.999" in store "acme"'),
        ([7], "must be an array of strings"),
        (["Base"] * 11, "at most 10 memories (11 given)"),
    ],
)
def test_bad_related_refuses_the_save_and_loses_nothing(
    tmp_path: Path, repo: Path, related: list[object], reason: str
) -> None:
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Base")
        save(tools, "Shared", store="global")
        for name in ("a1", "a2", "a3"):  # sorted before "acme": found there all the same
            save(tools, "Base", store=name)
        result = tools.call("memory_remember", {"label": "New", "content": "x", "related": related})
        assert result.is_error and result.text.startswith("Invalid arguments: related: ")
        assert reason in result.text, result.text
    db = tmp_path / "thatch.db"
    assert rows(db, "SELECT slug FROM entries WHERE store IN ('acme', 'global') ORDER BY 1") == [
        ("base",),
        ("shared",),
    ]
    assert links(db) == []


def test_forgetting_the_target_keeps_the_dependent(tmp_path: Path, repo: Path) -> None:
    """The dependent stays and stops inheriting; a later memory of the forgotten label is
    another memory, not linked. An overwrite without ``related`` drops the links (as
    anchors), one with it replaces them."""
    db = tmp_path / "thatch.db"
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Base", anchors=["README"])
        save(tools, "Other")
        save(tools, "Dependent", related=["Base", "Other"])
        ok(tools, "memory_forget", {"label": "Base"})
        assert links(db) == [("acme", "dependent", "other")]
        save(tools, "Base", anchors=["README"])
        (repo / "README").write_text("changed\n")
        text = ok(tools, "memory_recall", {"query": "notes"})
        assert text.count("code changed") == 1 and "# Base" in text
        save(tools, "Dependent", related=["Base"], overwrite=True)
        assert links(db) == [("acme", "dependent", "base")]
        ok(tools, "memory_remember", {"label": "Dependent", "content": "y", "overwrite": True})
        assert links(db) == []
        save(tools, "Third", related=["Other"])
        ok(tools, "memory_forget", {"label": "Third"})
        assert links(db) == []
    assert rows(db, "SELECT slug FROM entries ORDER BY 1") == [
        ("base",),
        ("dependent",),
        ("other",),
    ]


def test_the_earlier_release_rewriting_a_memory_drops_its_links(tmp_path: Path, repo: Path) -> None:
    """Its exact SQL from another process: an upsert of the dependent's text drops the
    links it was saved with, its delete of the target drops the links to it."""
    from tests.test_store_compat import run_earlier_release

    db = tmp_path / "thatch.db"
    now = "2024-07-01T10:00:00.000Z"
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Base")
        save(tools, "Dependent", related=["Base"])
        save(tools, "Second", related=["Base"])
        upsert = ["dependent", "acme", "Dependent", "# D\n\ny", None, None, None, None, 0, now, now]
        upsert.append(None)
        run_earlier_release(db, ("telemetry", [now, "acme", "dependent"]))
        assert len(links(db)) == 2  # a recall stamp is no new text
        run_earlier_release(db, ("upsert", upsert))
        assert links(db) == [("acme", "second", "base")]
        run_earlier_release(db, ("forget", ["base", "acme"]))
        assert links(db) == []


def test_the_cli_records_related(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: object
) -> None:
    """``thatch remember --related``: recorded; an unknown one is a usage error (exit 2)."""
    from click.testing import CliRunner

    from thatch.cli.main import cli

    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(repo))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)  # type: ignore[attr-defined]

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, list(args))
        return result.exit_code, result.stdout + result.stderr

    assert run("remember", "Parser", "how config parses", "--anchor", "README")[0] == 0
    code, out = run("remember", "Callers", "who parses", "--related", "Nope")
    assert code == 2 and 'Invalid arguments: related: no memory "Nope" in store' in out
    assert run("remember", "Callers", "who parses", "--related", "Parser")[0] == 0
    (repo / "README").write_text("changed\n")
    code, out = run("search", "who", "parses")
    assert code == 0 and 'Callers [code changed since saved: README via "Parser"]' in out


def test_a_stalled_check_still_marks_its_first_file(tmp_path: Path, repo: Path) -> None:
    """A clock that is past every deadline at once (a process stalled by a loaded machine):
    the check still reads the first anchored file, so a changed one is marked."""
    ticks = iter(range(0, 10**6, 10))
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Config parsing", anchors=["src/config.py:parse_config"])
        edit(repo / "src" / "config.py", "value.strip()", "value")
        ctx.anchor_check = AnchorCheck(clock=lambda: float(next(ticks)))
        text = ok(tools, "memory_recall", {"query": "config"})
        assert "[code changed since saved: src/config.py]" in text


def test_hygiene_and_the_payload_name_the_dependents_as_recall_marks_them(
    tmp_path: Path, repo: Path
) -> None:
    """A memory that depends on one whose code changed (``related``, or a "supplement"
    verdict in either order) is counted by the hygiene report, named by ``thatch hygiene``
    and listed in the payload's ``codeChanged``, ``via`` the label it inherits from, as
    recall marks it; one that only the changed memory names is not; an archived one is
    not counted."""
    import json
    from datetime import UTC, datetime

    from thatch.frontend import queue
    from thatch.frontend.tools.hygiene import hygiene, named

    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        save(tools, "Config parsing", anchors=["src/config.py:parse_config"])
        save(tools, "Config callers", related=["Config parsing"])
        save(tools, "Config defaults")
        save(tools, "Config archive", related=["Config parsing"])
        save(tools, "Parser helpers")
        save(tools, "Config parsing 2", related=["Parser helpers"])  # depends the other way
        ok(
            tools,
            "dedup_mark_checked",
            {"label_a": "Config defaults", "label_b": "Config parsing", "status": "supplement"},
        )
        ctx.store.conn.execute("UPDATE entries SET archived = 1 WHERE slug = 'config-archive'")
        edit(repo / "src" / "config.py", "value.strip()", "value")

        result = hygiene(ctx.store, "acme", repo, "test/fake-embedder", list_branches=lambda _: [])
        assert {slug: (d.paths, d.via) for slug, d in result.project.drifted.items()} == {
            "config-parsing": (("src/config.py",), None),
            "config-callers": (("src/config.py",), "Config parsing"),
            "config-defaults": (("src/config.py",), "Config parsing"),
        }
        assert (
            "3 memories whose code changed since saved (2 via memories they depend on; "
            "recall them, check, update or forget)"
        ) in (result.report or "")
        assert result.as_json()["code_changed"] == 3
        listed = named(ctx.store, result, 0.9, datetime.now(UTC))
        assert listed.lines("acme")[-4:] == [
            'Code changed since saved in "acme":',
            '  "Config callers" (src/config.py via "Config parsing")',
            '  "Config defaults" (src/config.py via "Config parsing")',
            '  "Config parsing" (src/config.py)',
        ]
        assert listed.as_json()["code_changed_memories"][0] == {
            "label": "Config callers",
            "paths": ["src/config.py"],
            "via": "Config parsing",
        }

        call = {"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_response": "ok"}
        queue.append_calls(ctx.queue_dir, "s1", [{**call, "tool_use_id": "s1"}])
        payload = json.loads(ok(tools, "get_extraction_payload", {"session_id": "s1"}))
        assert payload["codeChanged"] == [
            {"label": "Config parsing", "paths": ["src/config.py"]},
            {"label": "Config callers", "paths": ["src/config.py"], "via": "Config parsing"},
            {"label": "Config defaults", "paths": ["src/config.py"], "via": "Config parsing"},
        ]
        recalled = ok(tools, "memory_recall", {"query": "config", "limit": 10})
        assert recalled.count('via "Config parsing"]') == 2


def test_past_the_budget_a_stored_changed_verdict_still_marks_while_its_stat_holds(
    tmp_path: Path, repo: Path
) -> None:
    """A recall whose check is past its deadline after the first file (a stalled process,
    or a big result set): the anchors it does not reach are marked by the verdict a pass
    stored, while the file's stat is the one that verdict saw; a file written since, or
    a memory saved again since (its anchors captured anew), is left unmarked."""
    from thatch.frontend.anchors.recheck import drifted

    for name in "abc":
        (repo / "src" / f"{name}.py").write_text(f"def {name}():\n    return 1\n")
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for name in "abcd":
            file = name if name != "d" else "a"
            save(tools, f"Part {name}", anchors=[f"src/{file}.py"])
        for name in "abc":
            edit(repo / "src" / f"{name}.py", "return 1", "return 2")
        assert set(drifted(ctx.store, "acme", unhurried())) == {
            "part-a",
            "part-b",
            "part-c",
            "part-d",
        }
        edit(repo / "src" / "c.py", "return 2", "return 3")  # after the verdict
        save(tools, "Part d", anchors=["src/a.py"], overwrite=True)  # captured anew
        keys = [("acme", f"part-{name}") for name in "abcd"]

        def stalled() -> AnchorCheck:
            ticks = iter(range(0, 10**6, 10))
            return AnchorCheck(clock=lambda: float(next(ticks)))

        assert {key[1]: d.paths for key, d in stalled().drift(ctx.store, keys).items()} == {
            "part-a": ("src/a.py",),  # the one file checked
            "part-b": ("src/b.py",),  # by its stored verdict
        }
        assert set(unhurried().drift(ctx.store, keys)) == set(keys[:3])
