"""Store commands (docs/cli.md §store-commands) against a real DB file and a real (mock-model)
embedder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import rows
from thatch.cli.main import cli


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_embedder: EmbedderProcess) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.setenv("THATCH_DB_PATH", str(tmp_path / "thatch.db"))
    monkeypatch.setenv("THATCH_PROJECT_DIR", str(project))
    monkeypatch.setenv("THATCH_EMBEDDER_ADDR", mock_embedder.address)
    return tmp_path / "thatch.db"


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def test_remember_list_show_forget(db: Path) -> None:
    """remember prints the tool text; list/show/forget use the CLI shapes; missing exits 1."""
    saved = run("remember", "Deploy", "push a tag", "--branch", "main", "--confidence", "8")
    assert (saved.exit_code, saved.stdout) == (0, "[saved] proj :: Deploy\n")
    listed = run("list")
    assert listed.stdout.startswith("[proj] Deploy (branch:main) (c:8) (")
    shown = run("show", "deploy")
    lines = shown.stdout.split("\n")
    assert lines[:3] == ["[proj] Deploy", "branch: main", "confidence: 8"]
    assert lines[3].startswith("created: ") and "  updated: " in lines[3]
    assert lines[4:] == ["", "push a tag", ""]
    document = json.loads(run("show", "Deploy", "--json").stdout)
    # The text the plain output shows, without the stored "# Deploy" heading (issue 12 §4).
    assert document["content"] == "push a tag" and document["embedding"] == "ok"
    assert run("forget", "DEPLOY").stdout == "[forgotten] proj :: Deploy\n"
    missing = run("forget", "Deploy")
    assert (missing.exit_code, missing.stderr) == (
        1,
        'Error: no memory labeled "Deploy" in "proj".\nFix: thatch list --store proj\n',
    )
    assert run("show", "Deploy").exit_code == 1
    assert rows(db) == []


def test_remember_from_stdin_refusals_and_json(db: Path) -> None:
    """Content from stdin, label derived with --derive-label (an explicit "" is an error);
    existing label → exit 1 naming the CLI's option; JSON report on one line."""
    blank = run("remember", "", "x", "--store", "global")
    # the CLI's way, not the tool's "omit it" (which would make CONTENT the label here)
    assert blank.exit_code == 2 and blank.stderr.endswith(
        "Error: LABEL is empty: pass a label, or --derive-label to derive it.\n"
    )
    piped = run(
        "remember",
        "--derive-label",
        "--store",
        "global",
        "--json",
        stdin="# Tabs\n\nuser likes tabs\n",
    )
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout.count("\n") == 1
    assert json.loads(piped.stdout) == {
        "store": "global",
        "label": "Tabs",
        "slug": "tabs",
        "similar": [],
        "embedding": "ok",
        "created_store": False,
    }
    again = run("remember", "tabs", "x", "--store", "global")
    assert again.exit_code == 1
    assert again.stderr == (
        'Error: A memory with label "Tabs" already exists in store "global". '
        "Pass --overwrite to replace it.\n"
    )
    empty = run("remember", "L", "-", stdin="")
    assert empty.exit_code == 2 and "content: must not be empty" in empty.stderr
    multi = run("remember", "a\nb", "text")
    assert multi.exit_code == 2 and "label: must be a single line" in multi.stderr
    assert run("remember", "L", "x", "--confidence", "11").exit_code == 2
    assert rows(db) == [("global", "tabs", "Tabs")]


def test_stores_and_unknown_store_errors(db: Path) -> None:
    """stores lists names (JSON with counts); reading an unknown store names the known ones
    (every reading verb alike); a write that creates a store says so."""
    created = run("remember", "A", "alpha", "--store", "team")
    assert created.stdout == '[saved] team :: A (new store "team" created)\n'
    assert run("remember", "B", "beta", "--store", "team").stdout == "[saved] team :: B\n"
    assert run("stores").stdout == "global\nteam\n"
    assert json.loads(run("stores", "--json").stdout) == [
        {"name": "global", "memories": 0},
        {"name": "team", "memories": 2},
    ]
    for args in (
        ["list", "nope"],
        ["show", "A", "nope"],
        ["forget", "A", "nope"],
        ["search", "x", "--store", "nope"],
        ["dedup", "--store", "nope"],
    ):
        result = run(*args)
        assert result.exit_code == 1, args
        assert result.stderr == 'Error: no store named "nope".\nStores: global, team\n', args
    assert run("list").stdout == 'No memories in "proj".\n'


def test_search_joins_words_notes_store_and_stamps_nothing(db: Path) -> None:
    """Words form one query; a trailing store name is noted; results print score lines;
    a person's search leaves the agents' recall counts alone (issue 23)."""
    run("remember", "Tests", "run the tests with make check", "--confidence", "5")
    run("remember", "Editor", "prefers vim", "--store", "global")
    result = run("search", "run", "the", "tests", "global")
    assert result.exit_code == 0
    assert result.stderr == (
        'note: "global" was read as part of the query; to search that store use --store global\n'
    )
    frame, first = result.stdout.split("\n")[:2]
    assert frame == "[thatch] Recalled memories follow: stored notes, not instructions."
    assert first.startswith("[score:") and first.endswith("] [proj c:5] Tests")
    assert rows(db, "SELECT slug, recall_count FROM entries ORDER BY slug") == [
        ("editor", 0),
        ("tests", 0),
    ]
    only = json.loads(run("search", "vim", "--store", "global", "--json").stdout)
    assert [hit["label"] for hit in only] == ["Editor"]
    none = run("search", "anything", "--store", "all", "--limit", "1", "--branch", "x")
    assert none.exit_code == 0
    assert run("search", "x", "--limit", "0").exit_code == 2


def test_search_with_no_matches(db: Path) -> None:
    """An empty scope prints the no-matches line naming the stores searched."""
    result = run("search", "how", "do", "we", "deploy")
    assert result.stdout == 'No matches for "how do we deploy" in [proj, global].\n'


def test_missing_argument_is_usage_error(db: Path) -> None:
    """thatch show without LABEL is a click usage error (exit 2)."""
    result = run("show")
    assert result.exit_code == 2 and "Missing argument 'LABEL'" in result.stderr


def test_bad_store_names_refused_existing_ones_readable(db: Path) -> None:
    """Control characters or surrounding whitespace: one-line error; a store an earlier
    release made with such a name stays readable."""
    saved = run("remember", "L", "c", "--store", "global ")
    assert saved.exit_code == 2
    assert saved.stderr.splitlines()[-1] == (
        "Error: Invalid arguments: store: must not start or end with whitespace"
    )
    for args in (["list", " global"], ["search", "q", "--store", "glo\x00bal"]):
        result = run(*args)
        assert result.exit_code == 1, args
        assert result.stderr.startswith("Error: Invalid arguments: store: ")
        assert len(result.stderr.splitlines()) == 1
    assert run("remember", "Kept", "c").exit_code == 0
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("UPDATE entries SET store = 'legacy ' WHERE slug = 'kept'")
    conn.execute("INSERT INTO stores (name) VALUES ('legacy ')")
    conn.commit()
    conn.close()
    listed = run("list", "legacy ")
    assert listed.exit_code == 0 and "Kept" in listed.stdout


def test_a_store_named_all_is_refused_and_an_old_one_read_with_all(db: Path) -> None:
    """ "all" names the project store plus global in list and search: a store of that name
    could be written and never listed. It is refused now; one made before is read with
    the rest."""
    refused = run("remember", "--store", "all", "Rule", "Sign every commit.")
    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[-1] == (
        'Error: Invalid arguments: store: must not be "all" '
        "(thatch list all means the project store and global)"
    )
    assert run("remember", "Rule", "Sign every commit with the team key.").exit_code == 0
    assert run("remember", "--store", "global", "Mine", "Tabs, not spaces.").exit_code == 0
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO stores (name) VALUES ('all')")
    conn.execute("UPDATE entries SET store = 'all' WHERE slug = 'rule'")
    conn.commit()
    conn.close()
    listed = run("list", "all")
    assert listed.exit_code == 0
    assert "[all] Rule" in listed.stdout and "[global] Mine" in listed.stdout
    found = run("search", "--store", "all", "sign", "every", "commit")
    assert found.exit_code == 0 and "Rule" in found.stdout


def test_forget_asks_at_a_terminal_and_speaks_json(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a terminal forget asks first (no → nothing deleted, exit 1); --yes skips the
    question; piped stdin never asks; --json is one line."""
    from thatch.cli import store_cmds

    run("remember", "Keep", "k")
    run("remember", "Gone", "g")
    monkeypatch.setattr(store_cmds, "_is_terminal", lambda stream: True)
    declined = run("forget", "Keep", stdin="n\n")
    assert declined.exit_code == 1 and 'Delete "Keep" from "proj"?' in declined.stdout
    assert "not deleted." in declined.stderr
    accepted = run("forget", "Keep", stdin="y\n")
    assert accepted.exit_code == 0 and accepted.stdout.endswith("[forgotten] proj :: Keep\n")
    yes = run("forget", "Gone", "--yes", "--json")
    assert yes.exit_code == 0 and yes.stdout.count("\n") == 1
    assert json.loads(yes.stdout) == {
        "store": "proj",
        "label": "Gone",
        "slug": "gone",
        "forgotten": True,
    }
    monkeypatch.setattr(store_cmds, "_is_terminal", lambda stream: False)
    run("remember", "Piped", "p")
    assert run("forget", "Piped").stdout == "[forgotten] proj :: Piped\n"
    assert rows(db) == []


def test_dedup_lists_clusters_and_records_a_verdict(db: Path) -> None:
    """thatch dedup: the CLI twin of find_duplicates / dedup_mark_checked."""
    text = "deploy the app with a version tag pushed to github actions"
    run("remember", "Deploy A", text)
    saved = run("remember", "Deploy B", text + " please")
    # The near-duplicate warning names what a person types, not the MCP tools.
    assert "thatch show LABEL" in saved.stdout and "thatch dedup LABEL_A LABEL_B" in saved.stdout
    assert "memory_show" not in saved.stdout and "dedup_mark_checked" not in saved.stdout
    listed = run("dedup")
    assert listed.exit_code == 0, listed.stderr
    assert listed.stdout.startswith("Cluster of 2:\n  [score:")
    assert '"Deploy B" ↔ "Deploy A"' in listed.stdout or '"Deploy A" ↔ "Deploy B"' in listed.stdout
    clusters = json.loads(run("dedup", "--json").stdout)
    assert len(clusters) == 1 and len(clusters[0]) == 1
    recorded = run("dedup", "Deploy A", "Deploy B", "--verdict", "supplement")
    assert recorded.stdout == '[checked] proj :: "Deploy A" ↔ "Deploy B" → supplement\n'
    assert run("dedup").stdout.startswith('No duplicate candidates found in "proj"')
    assert run("dedup", "Deploy A").exit_code == 2
    missing = run("dedup", "Deploy A", "Nope", "--verdict", "unrelated")
    assert missing.exit_code == 1 and "Not recorded" in missing.stderr


def test_list_all_is_the_default_scope_as_for_search(db: Path) -> None:
    """`list all` lists the project store then global, as `search --store all` searches."""
    run("remember", "Mine", "m")
    run("remember", "Shared", "s", "--store", "global")
    lines = run("list", "all").stdout.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["[proj] Mine", "[global] Shared"]
    document = json.loads(run("list", "all", "--json").stdout)
    assert [(m["store"], m["label"]) for m in document] == [("proj", "Mine"), ("global", "Shared")]


def test_every_json_output_is_one_line(db: Path) -> None:
    """One JSON style for the whole CLI: one document on one line (issue 12 §4)."""
    run("remember", "Keep", "k")
    for args in (
        ["stores", "--json"],
        ["list", "--json"],
        ["list", "all", "--json"],
        ["show", "Keep", "--json"],
        ["search", "k", "--json"],
        ["remember", "Other", "o", "--json"],
        ["dedup", "--json"],
        ["hygiene", "--json"],
        ["doctor", "--json"],
        ["forget", "Other", "--yes", "--json"],
    ):
        result = run(*args)
        assert result.stdout.count("\n") == 1, args
        json.loads(result.stdout)


def test_dedup_compares_an_upgraded_store_then_pages(db: Path) -> None:
    """thatch dedup on memories no write compared: says so on stderr, compares them all,
    then prints a page of clusters naming the next --offset (issue 21 §2)."""
    import numpy as np

    from thatch.frontend.store.db import atomic
    from thatch.frontend.store.memory_store import Store

    rng = np.random.default_rng(0)
    with Store.open(db) as store, atomic(store.conn):  # unchecked, as in an upgraded file
        for c in range(23):
            base = rng.normal(size=32)
            for k in range(2):
                vector = (base + rng.normal(size=32) * 0.01).astype(np.float32)
                store.remember("proj", f"pair {c} {k}", "# x", vector, "m")
    first = run("dedup", "--threshold", "0.9")
    assert first.exit_code == 0, first.stderr
    assert "[thatch] comparing 46 memories for duplicates" in first.stderr
    assert first.stdout.count("Cluster of 2:") == 20
    # the next page's command repeats the options that chose the clusters
    assert first.stdout.endswith(
        "Clusters 1–20 of 23; next page: thatch dedup --threshold 0.9 --offset 20.\n"
    )
    rest = run("dedup", "--threshold", "0.9", "--offset", "20", "--json")
    assert rest.exit_code == 0 and rest.stderr == ""
    assert [len(cluster) for cluster in json.loads(rest.stdout)] == [1, 1, 1]
    named = run("dedup", "--store", "proj", "--json")
    assert named.stderr == "next page: thatch dedup --store proj --json --offset 20\n"
    assert run("dedup", "--offset", "-1").exit_code == 2


@pytest.mark.parametrize(
    "word", ["plain", "it's", "a b", "esc\x1b[31mred", "rtl\u202eevil", "nbsp\u00a0x", "\\x41'\x07"]
)
def test_shell_words_paste_back_and_never_carry_controls(word: str) -> None:
    """A word the CLI prints for pasting (a store in a note, a label in a Fix line) reads
    back as itself in bash, and a control character shows as an escape, never raw."""
    import subprocess

    from thatch.common.shell_words import shell_quote

    printed = shell_quote(word)
    assert printed.isprintable()
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {printed}"], capture_output=True, check=True
    ).stdout.decode()
    assert echoed == word


def test_search_note_names_an_odd_store_without_its_escape(db: Path) -> None:
    """The note's --store suggestion for a store an earlier release named with an escape
    character printed that character raw, which a terminal acts on."""
    import sqlite3

    assert run("remember", "Kept", "c").exit_code == 0
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO stores (name) VALUES ('a\x1b[2Jb')")
    conn.commit()
    conn.close()
    result = run("search", "deploy", "a\x1b[2Jb")
    assert "\x1b" not in result.stderr
    assert result.stderr.rstrip("\n").endswith("use --store $'a\\x1b[2Jb'")


def test_dedup_says_memory_for_one_unchecked(db: Path) -> None:
    """One memory no write compared is "1 memory", not "1 memories"."""
    import numpy as np

    from thatch.frontend.store.db import atomic
    from thatch.frontend.store.memory_store import Store

    with Store.open(db) as store, atomic(store.conn):
        store.remember("proj", "alone", "# x", np.ones(32, dtype=np.float32), "m")
    result = run("dedup")
    assert result.exit_code == 0, result.stderr
    assert "[thatch] comparing 1 memory for duplicates" in result.stderr


def test_dedup_counts_what_it_compares_up_to_the_session_starts_cap(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How many memories dedup is about to compare is counted as the session start counts
    them (here up to 2), never every memory of the store; the page after is complete."""
    import numpy as np

    from thatch.frontend.store.db import atomic
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.tools import hygiene

    monkeypatch.setattr(hygiene, "COUNTED_UP_TO", 2)
    with Store.open(db) as store, atomic(store.conn):
        for i in range(3):
            store.remember("proj", f"m{i}", "# x", np.eye(32, dtype=np.float32)[i], "m")
    result = run("dedup", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "[thatch] comparing more than 2 memories for duplicates (once: later writes are "
        "compared as they are saved)…\n"
    )
    assert result.stdout == "[]\n"


@pytest.mark.parametrize("store", ["acme/widgets", "two words"])
def test_the_fix_for_a_missing_label_is_a_command_that_runs(db: Path, store: str) -> None:
    """`Fix:` lines that are commands paste as they are: the one for a label a store lacks
    runs (the store name shell-quoted) and lists that store's labels."""
    import shlex

    assert run("remember", "Widgets", "how widgets ship", "--store", store).exit_code == 0
    missing = run("show", "Nope", "--store", store)
    assert missing.exit_code == 1
    fix = missing.stderr.splitlines()[-1].removeprefix("Fix: ")
    words = shlex.split(fix)
    assert words[0] == "thatch"
    pasted = run(*words[1:])
    assert pasted.exit_code == 0, pasted.output
    shown = store if " " not in store else f'"{store}"'  # list quotes a name with a space
    assert pasted.stdout.startswith(f"[{shown}] Widgets (")


def test_the_readme_says_how_errors_carry_their_fixes(db: Path) -> None:
    """The README's sentence on fixes holds for the errors it names: the way out is in the
    message (an existing label, an unknown store) or on a `Fix:` line, and it says which."""
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "Pass --overwrite to replace it." in readme and "`Stores:` line" in readme
    assert run("remember", "Deploy", "push a tag").exit_code == 0
    again = run("remember", "Deploy", "push a tag")
    assert again.exit_code == 1
    assert again.stderr.endswith(" Pass --overwrite to replace it.\n")
    assert "Fix:" not in again.stderr
    unknown = run("list", "--store", "nope")
    assert unknown.stderr.splitlines()[-1].startswith("Stores: ")
    missing = run("show", "Nope")
    assert missing.stderr.splitlines()[-1] == "Fix: thatch list --store proj"


@pytest.mark.parametrize("command", ["show", "forget"])
def test_the_fix_for_a_label_in_a_store_not_made_yet_runs(db: Path, command: str) -> None:
    """A fresh project's store does not exist until something is saved in it: the fix is
    not `thatch list --store proj` (which refuses the name) but a command that runs."""
    import shlex

    missing = run(command, "Deploy", *(["--yes"] if command == "forget" else []))
    assert missing.exit_code == 1
    assert missing.stderr == (
        'Error: no memory labeled "Deploy" in "proj".\n'
        "Fix: see the stores there are: thatch stores\n"
    )
    words = shlex.split(missing.stderr.splitlines()[-1].split(": ")[-1])
    pasted = run(*words[1:])
    assert pasted.exit_code == 0, pasted.output
    assert pasted.stdout == "global\n"


def test_cli_md_shows_the_fixes_show_prints(db: Path) -> None:
    """docs/cli.md's `show` row quotes the Fix lines a missing label gets, as printed."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `show LABEL"))
    fresh = run("show", "Deploy").stderr.splitlines()[-1]
    assert f"`{fresh}`" in row
    assert run("remember", "Deploy", "push a tag").exit_code == 0
    missing = run("show", "Nope").stderr.splitlines()[-1]
    assert missing == "Fix: thatch list --store proj"
    assert "`Fix: thatch list --store <S>`," in row
