"""Code anchors (docs/tools.md §code-anchors): a memory names the code it is about; a
recall marks it, and the memories that supplement it, once that code changed. Real git
repositories, a real SQLite file, the real MiniLM embedder where recall runs."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.fake_embedder import FakeEmbedder, rows
from thatch.frontend.anchors.check import (
    CHANGED,
    FRESH,
    UNVERIFIABLE,
    AnchorCheck,
    Drift,
    GitSavedLines,
)
from thatch.frontend.anchors.recheck import drifted
from thatch.frontend.anchors.span import blob_id, find_window, lines_of, locate_symbol, span_hash
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.context import ToolContext
from thatch.frontend.tools.hygiene import hygiene, named
from thatch.frontend.tools.memory_tools import Tools

PARSER = '''"""The config parser."""


def parse_config(text):
    """Split key=value lines."""
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def unrelated():
    return 1
'''

MARKER = re.compile(r"\] \[score:\d\.\d{3}\] \[code changed since saved: ([^\]]*)\]\n")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "acme"
    (path / "src").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    (path / "src" / "config.py").write_text(PARSER)
    (path / "README").write_text("acme\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "init")
    return path


def context(tmp_path: Path, repo: Path, embedder: object) -> ToolContext:
    return ToolContext(
        store=Store.open(tmp_path / "thatch.db"),
        embedder=embedder,  # type: ignore[arg-type]
        project_store="acme",
        project_dir=repo,
        host=None,
        env={},
        queue_dir=tmp_path / "queue",
    )


@pytest.fixture
def minilm_tools(tmp_path: Path, repo: Path, minilm_server: object) -> Iterator[tuple[Tools, Path]]:
    from thatch.embedder.client.embedder_client import EmbedderClient

    client = EmbedderClient(minilm_server.address, autostart=False)  # type: ignore[attr-defined]
    with context(tmp_path, repo, client) as ctx:
        yield Tools(ctx), repo


def ok(tools: Tools, name: str, arguments: Mapping[str, object]) -> str:
    result = tools.call(name, arguments)
    assert not result.is_error, result.text
    return result.text


def records(text: str) -> list[str]:
    return text.split("\n\n-----\n\n")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


# -- the fingerprints ----------------------------------------------------------------------


def test_blob_id_is_gits(repo: Path) -> None:
    """The in-process blob id equals ``git hash-object``: no git process at recall."""
    content = (repo / "src" / "config.py").read_bytes()
    assert blob_id(content) == git(repo, "hash-object", "src/config.py")


def test_a_large_file_is_hashed_in_chunks_as_git_hashes_it(tmp_path: Path, repo: Path) -> None:
    """Past MAX_FILE_BYTES a file is anchored by blob id alone, read in chunks: the id is
    still git's, and a span there is refused before anything is read."""
    from thatch.frontend.anchors.capture import MAX_FILE_BYTES

    big = repo / "src" / "big.txt"
    big.write_bytes(bytes(range(256)) * (MAX_FILE_BYTES // 256 + 4097))
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "B", "content": "x", "anchors": ["src/big.txt"]})
        refused = tools.call(
            "memory_remember", {"label": "S", "content": "x", "anchors": ["src/big.txt:1-2"]}
        )
        assert refused.is_error and "too large for a span; anchor the file" in refused.text
    assert rows(tmp_path / "thatch.db", "SELECT blob FROM thatch_anchors") == [
        (git(repo, "hash-object", "src/big.txt"),)
    ]


def test_lines_are_numbered_as_git_and_editors_number_them() -> None:
    """A form feed (C, Emacs, CPython sources), U+2028 or NEL is inside its line; CRLF
    ends one like LF; a last line without its newline is a line."""
    assert lines_of(b"a\x0cb\nc\r\nd\xe2\x80\xa8e\xc2\x85f\ng") == [
        "a\x0cb",
        "c",
        "d\u2028e\x85f",
        "g",
    ]
    assert lines_of(b"x\n") == ["x"] and lines_of(b"") == [] and lines_of(b"\n\n") == ["", ""]


@pytest.mark.parametrize(
    ("source", "symbol", "span"),
    [
        (PARSER, "parse_config", (3, 9)),
        (
            "class A:\n    x = 1\n\n    def run(\n        self,\n    ):\n        pass\n",
            "A.run",
            (3, 6),
        ),
        (
            "export async function load(a) {\n  if (a) {\n    return 1;\n  }\n}\nlet b;\n",
            "load",
            (0, 4),
        ),
        ("impl S {\n    pub fn go(&self) {\n        x();\n    }\n}\n", "S::go", (1, 3)),
        (
            'def configure(overrides={}):\n    s = dict(overrides)\n    s["r"] = 3\n'
            "    return s\nx = 1\n",
            "configure",
            (0, 3),
        ),
        ("package main\nfunc (s *Server) Handle() error {\n\treturn nil\n}\n", "Handle", (1, 3)),
        ("func keys(m map[string]struct{}) []string {\n\treturn nil\n}\n", "keys", (0, 2)),
    ],
)
def test_symbol_locator(source: str, symbol: str, span: tuple[int, int]) -> None:
    """Declaration line to the end of its indented or braced block; dotted names nest."""
    assert locate_symbol(lines_of(source.encode()), symbol) == span


# -- recall marks the memory and its dependent --------------------------------------------


@pytest.mark.parametrize("minilm_server", ["int8"], indirect=True)
def test_edited_function_marks_the_memory_and_its_dependent(
    minilm_tools: tuple[Tools, Path], tmp_path: Path
) -> None:
    tools, repo = minilm_tools
    ok(
        tools,
        "memory_remember",
        {
            "label": "Config parsing",
            "content": "parse_config splits the config file's key=value lines into a dict.",
            "anchors": ["src/config.py:parse_config"],
        },
    )
    ok(
        tools,
        "memory_remember",
        {
            "label": "Config values are stripped",
            "content": "Config keys and values are stripped of spaces when the config is parsed.",
        },
    )
    ok(
        tools,
        "dedup_mark_checked",
        {
            "label_a": "Config values are stripped",
            "label_b": "Config parsing",
            "status": "supplement",
        },
    )
    query = {"query": "how is the config file parsed into key value pairs?"}
    before = ok(tools, "memory_recall", query)
    assert "code changed" not in before and before.count("[score:") == 2

    # An edit elsewhere in the file is no change to the anchored function.
    edit(repo / "src" / "config.py", "return 1", "return 2")
    assert "code changed" not in ok(tools, "memory_recall", query)

    edit(repo / "src" / "config.py", "value.strip()", "value")
    after = records(ok(tools, "memory_recall", query))
    assert len(after) == 2
    marked = {MARKER.search(record).group(1) for record in after}  # type: ignore[union-attr]
    assert marked == {"src/config.py", 'src/config.py via "Config parsing"'}
    # Never hidden; the stored text follows the meta line unchanged.
    assert any("# Config parsing\n\nparse_config splits" in record for record in after)


@pytest.mark.parametrize("minilm_server", ["int8"], indirect=True)
def test_marked_memory_ranks_after_unmarked_ones(
    minilm_tools: tuple[Tools, Path], tmp_path: Path
) -> None:
    tools, repo = minilm_tools
    (repo / "src" / "deploy.sh").write_text("make deploy\n")
    ok(
        tools,
        "memory_remember",
        {
            "label": "Deploy command",
            "content": "Deploy the service with make deploy from the repo root.",
            "anchors": ["src/deploy.sh"],
        },
    )
    ok(
        tools,
        "memory_remember",
        {"label": "Deploy notes", "content": "Deploys need the VPN; run them from main."},
    )
    query = {"query": "how do I deploy the service with make deploy?"}
    first = records(ok(tools, "memory_recall", query))
    assert "# Deploy command" in first[0].split("\n-----")[0]
    (repo / "src" / "deploy.sh").write_text("make release\n")
    second = records(ok(tools, "memory_recall", query))
    assert "# Deploy notes" in second[0]
    assert "[code changed since saved: src/deploy.sh]\n# Deploy command" in second[1]


# -- renames, files gone, rewrites ---------------------------------------------------------


def test_git_mv_moves_the_anchor(tmp_path: Path, repo: Path) -> None:
    """After ``git mv`` (staged, then committed) the rename pass follows it: the anchor
    names the new path and its code is unchanged."""
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {"label": "P", "content": "x", "anchors": ["src/config.py:4-11"]},
        )
        git(repo, "mv", "src/config.py", "src/settings.py")
        result = hygiene(ctx.store, "acme", repo, "test/fake-embedder", list_branches=lambda _: [])
        assert result.project.drifted == {}
        assert rows(tmp_path / "thatch.db", "SELECT path FROM thatch_anchors") == [
            ("src/settings.py",)
        ]
        git(repo, "commit", "-q", "-m", "rename")
        edit(repo / "src" / "settings.py", "values = {}", "values = dict()")
        result = hygiene(ctx.store, "acme", repo, "test/fake-embedder", list_branches=lambda _: [])
        assert result.project.drifted == {"p": Drift(("src/settings.py",))}
        assert "1 memory whose code changed since saved" in (result.report or "")
        listed = named(ctx.store, result, 0.9, datetime.now(UTC))
        assert listed.lines("acme")[-2:] == [
            'Code changed since saved in "acme":',
            '  "P" (src/settings.py)',
        ]


def test_a_recall_that_finds_the_file_gone_follows_the_rename(tmp_path: Path, repo: Path) -> None:
    """Right after ``git mv``, a recall (outside thatch mcp: within the call) asks git,
    follows the rename and marks nothing; a file deleted for good stays marked."""
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "P", "content": "x", "anchors": ["src/config.py"]})
        ok(tools, "memory_remember", {"label": "Q", "content": "x", "anchors": ["README"]})
        git(repo, "mv", "src/config.py", "src/settings.py")
        git(repo, "rm", "-q", "README")
        text = ok(tools, "memory_recall", {"query": "x"})
    assert text.count("[code changed since saved: README]") == 1
    assert text.count("code changed") == 1
    assert rows(tmp_path / "thatch.db", "SELECT slug, path FROM thatch_anchors ORDER BY 1") == [
        ("p", "src/settings.py"),
        ("q", "README"),
    ]


def make_repo(path: Path, files: Mapping[str, str]) -> Path:
    """A git repository at ``path`` with ``files`` committed."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "init")
    return path


def anchored_repo(tmp_path: Path, name: str) -> Path:
    """A repository whose function ``f`` in mod.py anchors memory ``name``."""
    repo = make_repo(tmp_path / name, {"mod.py": "def f():\n    return 1\n"})
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        ok(Tools(ctx), "memory_remember", {"label": name, "content": "x", "anchors": ["mod.py:f"]})
    return repo


def paths_under(tmp_path: Path, repo: Path) -> list[str]:
    found = rows(tmp_path / "thatch.db", "SELECT root, path FROM thatch_anchors ORDER BY 2")
    return [path for root, path in found if root == os.path.realpath(repo)]


def run_hygiene(ctx: ToolContext, directory: Path) -> dict[str, Drift]:
    result = hygiene(ctx.store, "acme", directory, "test/fake-embedder", list_branches=lambda _: [])
    return dict(result.project.drifted)


def test_the_current_checkouts_renames_are_followed_however_many_repositories(
    tmp_path: Path,
) -> None:
    """A pass diffs at most MAX_COMMITS (repository, commit) pairs; the checkout it runs
    in comes first, so a ninth repository (by path) still follows its own renames."""
    from thatch.frontend.anchors.recheck import MAX_COMMITS

    repos = [anchored_repo(tmp_path, f"r{i}") for i in range(1, MAX_COMMITS + 2)]
    last = repos[-1]
    git(last, "mv", "mod.py", "new.py")
    git(last, "commit", "-q", "-m", "mv")
    with context(tmp_path, last, FakeEmbedder()) as ctx:
        assert run_hygiene(ctx, last) == {}
    assert paths_under(tmp_path, last) == ["new.py"]


def test_dead_and_current_pairs_leave_the_pass_to_the_stale_ones(tmp_path: Path) -> None:
    """Seen from outside every checkout: repositories deleted since, and repositories
    already at their HEAD, cost the pass nothing; a commit git no longer knows (a
    rewritten history) is re-based on HEAD once. A rename in the last repository by path
    is then followed within two passes, and the rewritten ones' anchors still follow
    renames made after."""
    from thatch.frontend.anchors.recheck import MAX_COMMITS

    for i in range(MAX_COMMITS):
        shutil.rmtree(anchored_repo(tmp_path, f"d{i}"))
        current = anchored_repo(tmp_path, f"h{i}")
        if i % 2:
            git(current, "pack-refs", "--all")  # HEAD's branch then read from packed-refs
    rewritten = [anchored_repo(tmp_path, f"u{i}") for i in range(MAX_COMMITS)]
    for repo in rewritten:
        git(repo, "commit", "-q", "--amend", "-m", "rewritten")
        git(repo, "reflog", "expire", "--expire=now", "--all")
        git(repo, "prune", "--expire=now")
    last = anchored_repo(tmp_path, "z")
    git(last, "mv", "mod.py", "new.py")
    git(last, "commit", "-q", "-m", "mv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with context(tmp_path, elsewhere, FakeEmbedder()) as ctx:
        run_hygiene(ctx, elsewhere)
        run_hygiene(ctx, elsewhere)
        assert paths_under(tmp_path, last) == ["new.py"]
        git(rewritten[0], "mv", "mod.py", "moved.py")
        git(rewritten[0], "commit", "-q", "-m", "mv")
        run_hygiene(ctx, elsewhere)
    assert paths_under(tmp_path, rewritten[0]) == ["moved.py"]


def test_an_undone_git_mv_brings_the_anchor_back(tmp_path: Path, repo: Path) -> None:
    """A staged ``git mv`` moves the anchor; moving the file back (still uncommitted)
    moves the anchor back, and a rename committed later is followed as usual."""
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {"label": "P", "content": "x", "anchors": ["src/config.py:parse_config"]},
        )
        git(repo, "mv", "src/config.py", "src/settings.py")
        assert run_hygiene(ctx, repo) == {}
        assert paths_under(tmp_path, repo) == ["src/settings.py"]
        git(repo, "mv", "src/settings.py", "src/config.py")
        assert run_hygiene(ctx, repo) == {}
        assert paths_under(tmp_path, repo) == ["src/config.py"]
        text = ok(tools, "memory_recall", {"query": "x"})
        assert "code changed" not in text
        git(repo, "mv", "src/config.py", "src/settings.py")
        assert run_hygiene(ctx, repo) == {}
        git(repo, "commit", "-q", "-m", "rename")
        assert run_hygiene(ctx, repo) == {}
        git(repo, "mv", "src/settings.py", "src/parse.py")
        assert run_hygiene(ctx, repo) == {}
        assert paths_under(tmp_path, repo) == ["src/parse.py"]
        git(repo, "mv", "src/parse.py", "src/settings.py")
        assert run_hygiene(ctx, repo) == {}
    assert paths_under(tmp_path, repo) == ["src/settings.py"]


def test_renames_of_non_ascii_names_are_followed(tmp_path: Path) -> None:
    """git quotes such names unless asked for NUL-separated output: the anchors follow
    them as named, and a name that is not UTF-8 moves no anchor (it could not be stored)."""
    repo = make_repo(
        tmp_path / "uni",
        {
            "café.py": "def cafe():\n    return 1\n",
            "plain.py": "def t():\n    return 1\n",
            "other.py": "def o():\n    return 1\n",
        },
    )
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "C", "content": "x", "anchors": ["café.py:cafe"]})
        ok(tools, "memory_remember", {"label": "P", "content": "y", "anchors": ["plain.py:t"]})
        ok(tools, "memory_remember", {"label": "O", "content": "z", "anchors": ["other.py:o"]})
        git(repo, "mv", "café.py", "naïve.py")
        git(repo, "mv", "plain.py", "ünï.py")
        git(repo, "mv", "other.py", os.fsdecode(b"bad\xff.py"))
        git(repo, "commit", "-q", "-m", "mv")
        assert run_hygiene(ctx, repo) == {"o": Drift(("other.py",))}
    assert paths_under(tmp_path, repo) == ["naïve.py", "other.py", "ünï.py"]


def test_a_moved_span_is_unchanged_and_a_deleted_file_is_changed(
    tmp_path: Path, repo: Path
) -> None:
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {"label": "P", "content": "x", "anchors": ["src/config.py:4-11"]},
        )
        edit(repo / "src" / "config.py", '"""The config parser."""', '"""The\nconfig parser."""')
        check = ctx.anchor_check
        assert check.drift(ctx.store, [("acme", "p")]) == {}
        (repo / "src" / "config.py").unlink()
        assert check.drift(ctx.store, [("acme", "p")])[("acme", "p")].paths == ("src/config.py",)


def test_the_file_cache_stays_bounded_and_right(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its byte bound the cache drops the oldest files; answers stay the same."""
    from thatch.frontend.anchors import check

    monkeypatch.setattr(check, "CACHE_BYTES", 3 * len(PARSER))
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for i in range(6):
            (repo / f"m{i}.py").write_text(PARSER)
            ok(
                tools,
                "memory_remember",
                {"label": f"M{i}", "content": "x", "anchors": [f"m{i}.py:4-11"]},
            )
        for i in range(6):
            edit(repo / f"m{i}.py", '"""The config parser."""', '"""The config parser!"""')
        keys = [("acme", f"m{i}") for i in range(6)]
        for _ in range(2):
            assert ctx.anchor_check.drift(ctx.store, keys) == {}
            assert ctx.anchor_check._bytes <= check.CACHE_BYTES
            assert len(ctx.anchor_check._facts) == 3


def test_a_moved_span_is_searched_nearest_its_old_lines_first() -> None:
    """The window found hashes as the span did (trailing whitespace aside) and is the one
    nearest the span's old first line; a span found nowhere is None."""
    lines = [f"line {i}" for i in range(40)]
    span = ["a = 1", "b = 2", "c = 3"]
    wanted = span_hash(span)
    moved = lines[:5] + span + lines[5:30] + [line + "  " for line in span] + lines[30:]
    assert find_window(moved, 3, wanted) == 5
    assert find_window(moved, 3, wanted, near=25) == 33
    assert find_window(moved, 3, wanted, near=33) == 33
    assert find_window(moved, 3, span_hash(["a = 1", "b = 2", "c = 4"])) is None
    assert find_window(moved, len(moved) + 1, wanted) is None


def test_a_moved_span_search_reads_each_line_once() -> None:
    """Each line is trimmed once, not once per window it is in: a 200-line span searched
    for in 400 lines trims 400 lines, where hashing each window from scratch trimmed
    40,200."""
    trimmed: list[str] = []

    class Line(str):
        def rstrip(self, chars: str | None = None) -> str:
            trimmed.append(self)
            return str.rstrip(self, chars)

    lines: list[str] = [Line(f"x{i} = {i}") for i in range(400)]
    wanted = span_hash([f"x{i} = {i}" for i in range(150, 350)])
    assert find_window(lines, 200, wanted) == 150
    assert len(trimmed) == 400
    trimmed.clear()
    assert find_window(lines, 200, span_hash(["nowhere"] * 200)) is None
    assert len(trimmed) == 400


def test_searching_for_a_moved_span_stops_at_the_deadline(tmp_path: Path, repo: Path) -> None:
    """A line span not at its lines is searched for from its old place outwards until the
    check's deadline, the first file's too: one not found by then is unverifiable (a
    recall leaves it unmarked), never a hang; one that moved a little is found in time."""
    table = repo / "src" / "table.py"
    table.write_text("".join(f"x{i} = {i}\n" for i in range(3000)))
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {"label": "T", "content": "x", "anchors": ["src/table.py:1-1500"]},
        )
        ok(
            tools,
            "memory_remember",
            {"label": "U", "content": "x", "anchors": ["src/table.py:2001-2500"]},
        )
        # T's first line changes; U's lines move down by three.
        edit(table, "x0 = 0\n", "x0 = -1\n# a\n# b\n# c\n")
        anchors = ctx.store.anchors_of([("acme", "t"), ("acme", "u")])
        changed, moved = anchors[("acme", "t")][0], anchors[("acme", "u")][0]

        ticks = itertools.count()
        hurried = AnchorCheck(clock=lambda: next(ticks) / 1000)  # a millisecond a reading
        assert [verdict for _, verdict in hurried.recheck([changed], 0.030)] == [UNVERIFIABLE]
        assert [verdict for _, verdict in hurried.recheck([moved], 0.030)] == [FRESH]
        assert hurried.drift(ctx.store, [("acme", "t")]) == {}

        unhurried = AnchorCheck(clock=lambda: 0.0)
        assert [verdict for _, verdict in unhurried.recheck([changed], 0.030)] == [CHANGED]
        assert unhurried.drift(ctx.store, [("acme", "t")])[("acme", "t")].paths == ("src/table.py",)


def test_a_span_edited_in_place_is_marked_though_its_search_outlasts_a_recall(
    tmp_path: Path, repo: Path
) -> None:
    """An edit inside a large line span left no window to find: the search for where it
    moved ran to the file's end, past every budget, so the memory was never marked. The
    passes off the prompt path read the saved lines from git and compare only where
    their first line stands; the verdict they store marks each recall after, however
    short its budget; a span moved whole is still found."""
    table = repo / "src" / "table.py"
    table.write_text("".join(f"x{i} = {i}\n" for i in range(4000)))
    git(repo, "add", "src/table.py")
    git(repo, "commit", "-q", "-m", "table")
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for label, span in (("Edited", "2001-2300"), ("Moved", "3001-3300")):
            ok(
                tools,
                "memory_remember",
                {"label": label, "content": "x", "anchors": [f"src/table.py:{span}"]},
            )
        # A line inside Edited's span changes; Moved's lines move down by three.
        edit(table, "x2100 = 2100\n", "x2100 = -1\n# a\n# b\n# c\n")
        anchors = ctx.store.anchors_of([("acme", "edited"), ("acme", "moved")])
        edited, moved = anchors[("acme", "edited")][0], anchors[("acme", "moved")][0]

        def hurried() -> AnchorCheck:
            ticks = itertools.count()
            return AnchorCheck(clock=lambda: next(ticks) / 1000)  # a millisecond a reading

        assert [v for _, v in hurried().recheck([edited], 0.030)] == [UNVERIFIABLE]
        saved = GitSavedLines()
        verdicts = hurried().recheck([edited, moved], 0.030, saved=saved)
        assert [v for _, v in verdicts] == [CHANGED, FRESH]
        # git is asked only for the span not found near its old lines, and once a file
        assert saved.reads == 1
        assert saved(edited) == [f"x{i} = {i}" for i in range(2000, 2300)]
        assert saved.reads == 1

        assert hurried().drift(ctx.store, [("acme", "edited")]) == {}  # nothing stored yet
        drifted(ctx.store, "acme", hurried())  # the session-start pass stores its verdict
        assert hurried().drift(ctx.store, [("acme", "edited"), ("acme", "moved")]) == {
            ("acme", "edited"): Drift(("src/table.py",))
        }


def test_spans_that_only_moved_cost_the_pass_no_git(tmp_path: Path, repo: Path) -> None:
    """A span moved by the lines edited above it is found near its old lines in process:
    asking git first for each (a review's finding) reached a fifth of 400 such anchors
    within the session start's budget."""
    for f in range(8):
        (repo / "src" / f"m{f}.py").write_text("".join(f"y{i} = {i}\n" for i in range(200)))
    git(repo, "add", "src")
    git(repo, "commit", "-q", "-m", "modules")
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for f in range(8):
            spans = [f"src/m{f}.py:{1 + 20 * k}-{20 + 20 * k}" for k in range(10)]
            ok(tools, "memory_remember", {"label": f"M{f}", "content": "x", "anchors": spans})
        for f in range(8):
            edit(repo / "src" / f"m{f}.py", "y0 = 0\n", "# moved\ny0 = 0\n")
        anchors = [a for key in ctx.store.anchors_of([("acme", f"m{f}") for f in range(8)]).values()
                   for a in key]  # fmt: skip
        saved = GitSavedLines()
        verdicts = AnchorCheck().recheck(anchors, 60.0, saved=saved)
        assert len(verdicts) == 80 and {v for _, v in verdicts} == {FRESH}
        assert saved.reads == 0


def test_a_default_of_braces_is_no_block_of_braces(tmp_path: Path, repo: Path) -> None:
    """A Python function with a ``{}`` default is its indented body: an edit in it marks
    the memory."""
    conf = repo / "src" / "conf.py"
    conf.write_text(
        'def configure(overrides={}):\n    s = dict(overrides)\n    s["retries"] = 3\n'
        "    return s\n"
    )
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {"label": "R", "content": "x", "anchors": ["src/conf.py:configure"]},
        )
        edit(conf, "= 3", "= 0")
        assert ctx.anchor_check.drift(ctx.store, [("acme", "r")]) == {
            ("acme", "r"): Drift(("src/conf.py",))
        }


def test_a_file_outside_git_that_vanished_is_unverifiable(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("one\n")
    with context(tmp_path, plain, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "N", "content": "x", "anchors": ["notes.txt"]})
        (plain / "notes.txt").write_text("two\n")
        assert ctx.anchor_check.drift(ctx.store, [("acme", "n")]) != {}
        (plain / "notes.txt").unlink()
        assert ctx.anchor_check.drift(ctx.store, [("acme", "n")]) == {}


def test_bad_anchors_refuse_the_save_and_lose_nothing(tmp_path: Path, repo: Path) -> None:
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for anchors, reason in [
            (["src/nope.py"], "No such file"),
            (["src/config.py:missing_fn"], "no symbol 'missing_fn' found"),
            (["src/config.py:10-99"], "past its end"),
            (["src/config.py:9-3"], "bad line span"),
            ([1], "must be an array of strings"),
            (["src/config.py"] * 11, "at most 10 anchors (11 given)"),
        ]:
            result = tools.call(
                "memory_remember", {"label": "X", "content": "x", "anchors": anchors}
            )
            assert result.is_error and result.text.startswith("Invalid arguments: anchors: ")
            assert reason in result.text, result.text
        assert rows(tmp_path / "thatch.db", "SELECT count(*) FROM entries") == [(0,)]


def test_a_fifo_in_place_of_code_is_refused_at_save_and_unverifiable_at_recall(
    tmp_path: Path,
) -> None:
    """Opening a FIFO without a writer waits forever: an anchor naming one (or a file
    replaced by one) would hold the call, and then every tool thread, for good."""
    plain = tmp_path / "plain"
    plain.mkdir()
    os.mkfifo(plain / "pipe.py")
    (plain / "code.py").write_text("def f():\n    return 1\n")
    with context(tmp_path, plain, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        refused = tools.call(
            "memory_remember", {"label": "P", "content": "x", "anchors": ["pipe.py"]}
        )
        assert refused.is_error
        assert refused.text == "Invalid arguments: anchors: 'pipe.py': not a regular file"
        ok(
            tools,
            "memory_remember",
            {"label": "F", "content": "f returns one", "anchors": ["code.py:f"]},
        )
        (plain / "code.py").unlink()
        os.mkfifo(plain / "code.py")
        assert ctx.anchor_check.drift(ctx.store, [("acme", "f")]) == {}
        (recalled,) = records(ok(tools, "memory_recall", {"query": "f returns one"}))
        assert recalled.endswith("\n# F\n\nf returns one") and "code changed" not in recalled
        assert rows(tmp_path / "thatch.db", "SELECT label FROM entries") == [("F",)]


def test_anchors_name_the_projects_code_never_the_database(tmp_path: Path, repo: Path) -> None:
    """A file outside the project, or thatch's own database (here inside the project), is
    refused at save; a stored anchor on the database is never opened at recall (closing a
    descriptor of it would drop the locks this process holds: trust-at-scale's corruption)."""
    from dataclasses import replace

    from thatch.frontend.anchors.capture import capture_anchors
    from thatch.frontend.anchors.check import UNVERIFIABLE, AnchorCheck, database_files

    db = repo / "thatch.db"
    (tmp_path / "outside.txt").write_text("secret\n")
    ctx = ToolContext(
        store=Store.open(db),
        embedder=FakeEmbedder(),  # type: ignore[arg-type]
        project_store="acme",
        project_dir=repo,
        host=None,
        env={"THATCH_DB_PATH": str(db)},
        queue_dir=tmp_path / "queue",
    )
    with ctx:
        tools = Tools(ctx)
        for anchor, reason in [
            ("thatch.db", "thatch's own database"),
            ("thatch.db-wal", "thatch's own database"),
            ("../outside.txt", "outside the project"),
            (str(tmp_path / "outside.txt"), "outside the project"),
        ]:
            (repo / "thatch.db-wal").touch()
            result = tools.call(
                "memory_remember", {"label": "X", "content": "x", "anchors": [anchor]}
            )
            assert result.is_error and reason in result.text, result.text
        assert rows(db, "SELECT count(*) FROM entries") == [(0,)]
        (fine,) = capture_anchors(["README"], repo, {"THATCH_DB_PATH": str(db)})
        on_db = replace(fine, path="thatch.db")
        check = AnchorCheck(never_open=database_files(str(db)))
        assert check.status(on_db) == UNVERIFIABLE
        assert AnchorCheck().status(on_db) != UNVERIFIABLE  # the guard, not the file, decides


def test_a_rewrite_by_the_earlier_release_drops_the_anchors(tmp_path: Path, repo: Path) -> None:
    """Its exact SQL, from another process: a recall stamp keeps the anchors, its upsert of
    new text drops them (no anchor vouches for text it was not saved with); thatch's own
    overwrite of the same text without anchors keeps them."""
    from tests.test_store_compat import EARLIER_STATEMENTS, run_earlier_release

    def anchors() -> int:
        return int(rows(tmp_path / "thatch.db", "SELECT count(*) FROM thatch_anchors")[0][0])

    assert "upsert" in EARLIER_STATEMENTS
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "P", "content": "x", "anchors": ["src/config.py"]})
        ok(tools, "memory_remember", {"label": "P", "content": "x", "overwrite": True})
        assert anchors() == 1
        db = tmp_path / "thatch.db"
        run_earlier_release(db, ("telemetry", ["2024-07-01T10:00:00.000Z", "acme", "p"]))
        assert anchors() == 1
        now = "2024-07-01T10:00:00.000Z"
        upsert = ["p", "acme", "P", "# P\n\ny", None, None, None, None, 0, now, now, None]
        run_earlier_release(db, ("upsert", upsert))
        assert anchors() == 0
        ok(tools, "memory_remember", {"label": "Q", "content": "q", "anchors": ["src/config.py"]})
        run_earlier_release(db, ("forget", ["q", "acme"]))
        assert anchors() == 0


def test_stored_text_cannot_forge_the_marker(tmp_path: Path, repo: Path) -> None:
    """A memory's text or an anchor's path cannot add thatch's marker to a meta line."""
    weird = repo / "src" / "a] [score:0.999"
    weird.mkdir()
    (weird / "f.py").write_text("x = 1\n")
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(
            tools,
            "memory_remember",
            {
                "label": "W",
                "content": "[code changed since saved: src/config.py]\nbody",
                "anchors": ["src/a] [score:0.999/f.py"],
            },
        )
        (weird / "f.py").write_text("x = 2\n")
        text = ok(tools, "memory_recall", {"query": "W body"})
    meta = [line for line in text.splitlines() if line.startswith("[store:")]
    assert len(meta) == 1 and meta[0].count("[score:") == 1
    assert meta[0].endswith('[code changed since saved: "src/a\\u005d \\u005bscore:0.999/f.py"]')
    assert "\n\\[code changed since saved: src/config.py]\nbody" in text


# -- the prompt-time nudge, warm (served by thatch mcp) and cold ---------------------------


def test_the_prompt_nudge_marks_a_memory_whose_code_changed(
    tmp_path: Path, repo: Path, mock_embedder: object
) -> None:
    """flush-tools' recall nudge, served warm by a real ``thatch mcp`` and computed cold by
    the hook itself, names the memory with the marker once its anchored code changed."""
    import os
    import shutil
    import tempfile

    from tests.support.hookrun import NO_EMBEDDER
    from tests.test_recall_scan import flush, mcp_server, wait_serving
    from thatch.embedder.models.mock import mock_vector
    from thatch.frontend.anchors.capture import capture_anchors
    from thatch.frontend.hooks import recall_scan
    from thatch.frontend.project import project_store

    runtime = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("THATCH_")}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
        XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
        XDG_RUNTIME_DIR=str(runtime),
        THATCH_DB_PATH=str(tmp_path / "db" / "thatch.db"),
        THATCH_QUEUE_DIR=str(tmp_path / "queue"),
        THATCH_PROJECT_DIR=str(repo),
        THATCH_EMBEDDER_ADDR=mock_embedder.address,  # type: ignore[attr-defined]
        THATCH_RECALL_THRESHOLD="0.05",
    )
    content = "# Deploy checklist\n\nTo deploy the service run make release from the main branch."
    db = tmp_path / "db" / "thatch.db"
    anchors = capture_anchors(["src/config.py:parse_config"], repo, env)
    with Store.open(db) as store:
        store.remember(
            project_store(repo, env), "Deploy checklist", content, mock_vector(content), "mock",
            anchors=anchors,
        )  # fmt: skip
    marked = '"Deploy checklist" [code changed since saved: src/config.py]'
    try:
        assert '("Deploy checklist")' in flush(env)  # cold: the hook embeds and checks
        scan = recall_scan.socket_path(db, env)
        assert scan is not None
        with mcp_server(env, tmp_path / "mcp.err") as process:
            wait_serving(process, scan, tmp_path / "mcp.err")
            dead = {**env, "THATCH_EMBEDDER_ADDR": NO_EMBEDDER}
            assert '("Deploy checklist")' in flush(dead)
            edit(repo / "src" / "config.py", "value.strip()", "value")
            assert f"({marked})" in flush(dead)  # warm: only thatch mcp could answer
        assert f"({marked})" in flush(env)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_the_extraction_payload_asks_to_revisit_changed_memories(
    tmp_path: Path, repo: Path
) -> None:
    """A payload names the project's memories whose code changed (``codeChanged``); none
    changed: the payload keeps its three keys."""
    import json

    from thatch.frontend import queue

    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        ok(tools, "memory_remember", {"label": "P", "content": "x", "anchors": ["src/config.py"]})

        def payload(session: str) -> dict[str, object]:
            call = {"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_response": "ok"}
            queue.append_calls(ctx.queue_dir, session, [{**call, "tool_use_id": session}])
            return json.loads(ok(tools, "get_extraction_payload", {"session_id": session}))

        assert list(payload("s1")) == ["interactions", "projectStore", "globalStore"]
        edit(repo / "src" / "config.py", "return 1", "return 2")
        assert payload("s2")["codeChanged"] == [{"label": "P", "paths": ["src/config.py"]}]


def test_the_cli_anchors_and_marks(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: object
) -> None:
    """``thatch remember --anchor`` captures, ``thatch search`` marks (text and JSON)."""
    import json

    from click.testing import CliRunner

    from thatch.cli.main import cli

    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(repo))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)  # type: ignore[attr-defined]

    def run(*args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(cli, list(args))
        return result.exit_code, result.stdout, result.stderr

    code, _, err = run("remember", "Parser", "how config parses", "--anchor", "src/config.py:nope")
    assert code == 2 and "anchors: 'src/config.py': no symbol 'nope' found" in err
    saved = run("remember", "Parser", "how config parses", "--anchor", "src/config.py:parse_config")
    assert saved[0] == 0, saved
    assert "code changed" not in run("search", "how", "config", "parses")[1]
    edit(repo / "src" / "config.py", "value.strip()", "value")
    code, out, _ = run("search", "how", "config", "parses")
    assert code == 0 and out.splitlines()[1].endswith(
        "Parser [code changed since saved: src/config.py]"
    )
    document = json.loads(run("search", "how", "config", "parses", "--json")[1])
    assert document[0]["code_changed"] == {"paths": ["src/config.py"], "via": None}


def test_the_stores_page_follows_renames_once_and_shares_one_recheck_budget(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Stores page counts every store's hygiene: the rename pass (two git processes,
    over every store's anchors) runs once, and the stores share one re-check budget, the
    project's store first (a whole pass per store cost a page of 20 stores 3 s). Every
    store's changed code is still reported."""
    from tests.support.ui_client import running_ui
    from thatch.frontend.anchors import recheck

    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for store in ("zeta", "acme", "beta"):
            tools.remember(
                label=f"P {store}", content=store, store=store, anchors=["src/config.py:4-11"]
            )
        edit(repo / "src" / "config.py", "values = {}", "values = dict()")
        renames: list[Path | None] = []
        budgets: list[tuple[str, float]] = []
        real_follow, real_pass = recheck.follow_renames, recheck.drift_pass

        def follow(
            store: Store, env: Mapping[str, str] | None = None, here: Path | None = None
        ) -> int:
            renames.append(here)
            return real_follow(store, env, here)

        def pass_in(store: Store, name: str, check: AnchorCheck, *budget: float) -> object:
            budgets.append((name, budget[0] if budget else recheck.HYGIENE_BUDGET))
            return real_pass(store, name, check, *budget)

        monkeypatch.setattr(recheck, "follow_renames", follow)
        monkeypatch.setattr(recheck, "drift_pass", pass_in)
        with running_ui(ctx) as (client, guard):
            assert client.get("/", token=guard.token).status == 303
            page = client.get("/")
    assert page.status == 200
    assert renames == [repo]
    names = [name for name, _ in budgets]
    assert names[0] == "acme" and names[1:] == sorted(names[1:]) and {"beta", "zeta"} < set(names)
    # Each store gets what those before it left of one budget.
    left = [budget for _, budget in budgets]
    assert left[0] <= recheck.HYGIENE_BUDGET
    assert all(later < earlier for earlier, later in itertools.pairwise(left))
    for store in ("acme", "beta", "zeta"):
        assert re.search(rf"<b>{store}</b>: [^<]*1 memory whose code changed since", page.body)


def test_a_recheck_resolves_each_file_once(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hygiene pass resolves each anchored file once (is it the database?), however
    many anchors it holds: a resolution per anchor was 1.8 s of a 20-store page."""
    with context(tmp_path, repo, FakeEmbedder()) as ctx:
        tools = Tools(ctx)
        for line in range(1, 9):
            ok(
                tools,
                "memory_remember",
                {
                    "label": f"P{line}",
                    "content": f"line {line}",
                    "anchors": [f"src/config.py:{line}"],
                },
            )
        anchors = [a for listed in ctx.store.anchored_in("acme").values() for a in listed]
        target = os.path.join(anchors[0].root, "src", "config.py")
        resolved: list[str] = []
        real = os.path.realpath

        def counting(path: str, *args: object, **kwargs: object) -> str:
            if path == target:
                resolved.append(path)
            return real(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(os.path, "realpath", counting)
        verdicts = AnchorCheck().recheck(anchors, 60.0)
    assert [verdict for _, verdict in verdicts] == [FRESH] * 8
    assert resolved == [target]
