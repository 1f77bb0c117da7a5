"""Seeding the nine default behaviors (engines.md §6): once, upgraded in place, races."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.embedder_proc import EmbedderProcess
from tests.support.fake_embedder import FakeEmbedder, rows
from thatch.common.version import thatch_version
from thatch.embedder.client.kind import Kind
from thatch.frontend.store.engine_store import BEHAVIORS, EngineStore
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.default_behaviors import DEFAULTS, Default, seed_defaults
from thatch.frontend.tools.seed_stamps import parse_stamp, stamp

THATCH = str(Path(sys.executable).with_name("thatch"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "thatch.db") as opened:
        yield opened


def stamps(db: Path) -> list[tuple[str, str]]:
    found = [parse_stamp(r) for (r,) in rows(db, "SELECT rationale FROM behaviors")]
    return sorted(s for s in found if s is not None)


def test_nine_defaults_created_once_then_nothing(store: Store) -> None:
    embedder = FakeEmbedder()
    report = seed_defaults(store, embedder, version="1.0")
    assert (report.created, report.upgraded, report.current) == (9, 0, 0)
    assert len(DEFAULTS) == 9 and len({d.key for d in DEFAULTS}) == 9
    assert [len(texts) for texts, _, _ in embedder.calls] == [18]  # one Embed call
    db = store.path
    assert db is not None
    assert stamps(db) == sorted((d.key, "1.0") for d in DEFAULTS)
    assert rows(db, "SELECT DISTINCT store, model FROM behaviors") == [
        ("global", "test/fake-embedder")
    ]
    assert rows(db, "SELECT count(*) FROM behavior_provenance WHERE signal = 'codify'") == [(9,)]
    again = seed_defaults(store, embedder, version="1.0")
    assert (again.created, again.current, len(embedder.calls)) == (0, 9, 1)  # no embedding


def test_upgrade_in_place_keeps_evidence(store: Store) -> None:
    embedder = FakeEmbedder()
    old = (Default("k", "when deploying", "run the tests", "why"),)
    seed_defaults(store, embedder, version="1.0", defaults=old)
    engines = EngineStore(store.conn, BEHAVIORS, lock=store.lock)
    (item,) = engines.stamped("global", "seed-key:")
    vector = embedder.embed(["run the tests"], Kind.PASSAGE).vectors[0]  # its statement's
    for signal, detail in (("confirm", "ham: x"), ("disconfirm", "spam: y")):
        found = engines.signal_nearest(["global"], vector, signal, detail)
        assert found.item is not None and found.item.id == item.id
    new = (Default("k", "when deploying", "run the full test suite", "why"),)
    report = seed_defaults(store, embedder, version="2.0", defaults=new)
    assert report.upgraded == 1
    (after,) = engines.stamped("global", "seed-key:")
    assert after.id == item.id and after.statement == "run the full test suite"
    assert after.rationale == "why" + stamp("k", "2.0")
    assert (after.confirm, after.disconfirm, f"{after.confidence:.3f}") == (1, 1, "0.500")
    (listed,) = engines.listing(["global"])
    assert [(p.signal, p.detail) for p in listed.provenance] == [
        ("codify", "seed upgrade 1.0 → 2.0"),
        ("disconfirm", "spam: y"),
        ("confirm", "ham: x"),
        ("codify", "why seed-key:k seed-version:1.0"),
    ]
    assert listed.matchers == [("when deploying", 1.0)]  # unchanged situation: kept


def test_changed_situation_rewrites_own_matcher_or_links_a_new_one(store: Store) -> None:
    embedder = FakeEmbedder()
    engines = EngineStore(store.conn, BEHAVIORS, lock=store.lock)
    seed_defaults(store, embedder, version="1", defaults=(Default("a", "sit one", "do a", "w"),))
    seed_defaults(store, embedder, version="2", defaults=(Default("a", "sit two", "do a", "w"),))
    assert rows(store.path, "SELECT description FROM behavior_matchers") == [("sit two",)]  # type: ignore[arg-type]
    # A matcher shared with a user's behavior is left to it; a new one is linked.
    shared = engines.listing(["global"])[0]
    engines.record(
        "global",
        matcher="sit two",
        matcher_vector=embedder.embed(["sit two"], None).vectors[0],  # type: ignore[arg-type]
        statement="user rule",
        statement_vector=embedder.embed(["user rule"], None).vectors[0],  # type: ignore[arg-type]
        model="m",
        signal="codify",
        rationale="mine",
    )
    seed_defaults(store, embedder, version="3", defaults=(Default("a", "sit three", "do a", "w"),))
    after = next(e for e in engines.listing(["global"]) if e.item.id == shared.item.id)
    assert sorted(d for d, _ in after.matchers) == ["sit three", "sit two"]
    user = next(e for e in engines.listing(["global"]) if e.item.statement == "user rule")
    assert user.matchers == [("sit two", 1.0)] and user.item.rationale == "mine"


def test_deleted_default_returns_and_unstamped_are_never_touched(store: Store) -> None:
    embedder = FakeEmbedder()
    engines = EngineStore(store.conn, BEHAVIORS, lock=store.lock)
    vec = embedder.embed(["x"], None).vectors[0]  # type: ignore[arg-type]
    engines.record(
        "global",
        matcher="wrapping up",
        matcher_vector=vec,
        statement=DEFAULTS[0].behavior,
        statement_vector=embedder.embed([DEFAULTS[0].behavior], None).vectors[0],  # type: ignore[arg-type]
        model="m",
        signal="codify",
        rationale="my own",
    )
    seed_defaults(store, embedder, version="1.0")
    victim = next(
        i for i in engines.stamped("global", "seed-key:") if DEFAULTS[3].key in (i.rationale or "")
    )
    engines.delete(victim.id)
    report = seed_defaults(store, embedder, version="1.0")
    assert (report.created, report.current) == (1, 8)
    mine = [i for i in engines.listing(["global"]) if i.item.rationale == "my own"]
    assert len(mine) == 1 and mine[0].item.model == "m"
    assert rows(store.path, "SELECT count(*) FROM behaviors") == [(10,)]  # type: ignore[arg-type]


def test_embedder_unavailable_writes_nothing(store: Store) -> None:
    from thatch.embedder.client.errors import EmbedderUnavailable

    with pytest.raises(EmbedderUnavailable):
        seed_defaults(store, FakeEmbedder(unavailable="down"), version="1.0")
    assert rows(store.path, "SELECT count(*) FROM behaviors") == [(0,)]  # type: ignore[arg-type]


def _two_servers(env: dict[str, str]) -> list[str]:
    """Start two ``thatch mcp`` at once, end both with stdin EOF; their stderr."""
    procs = [
        subprocess.Popen(
            [THATCH, "mcp"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(err)
    return outputs


def test_two_real_servers_seed_exactly_once_and_upgrade_in_place(
    tmp_path: Path, mock_embedder: EmbedderProcess
) -> None:
    db = tmp_path / "thatch.db"
    env = {
        **os.environ,
        "THATCH_DB_PATH": str(db),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_PROJECT_DIR": str(tmp_path),
    }
    version = thatch_version()
    assert _two_servers(env) == ["", ""]
    assert stamps(db) == sorted((d.key, version) for d in DEFAULTS)
    assert rows(db, "SELECT count(*) FROM behavior_provenance") == [(9,)]
    # An older release's defaults with learned evidence: upgraded in place, once.
    with Store.open(db) as store:
        store.conn.execute(
            "UPDATE behaviors SET rationale = replace(rationale, ?, 'seed-version:0.0.1'), "
            "statement = 'old wording ' || id, confirm_count = 2, confidence = 0.642857",
            (f"seed-version:{version}",),
        )
    before = rows(db, "SELECT id FROM behaviors ORDER BY id")
    _two_servers(env)
    assert rows(db, "SELECT id FROM behaviors ORDER BY id") == before
    assert stamps(db) == sorted((d.key, version) for d in DEFAULTS)
    assert sorted(s for (s,) in rows(db, "SELECT statement FROM behaviors")) == sorted(
        d.behavior for d in DEFAULTS
    )
    assert rows(db, "SELECT DISTINCT confirm_count, confidence FROM behaviors") == [(2.0, 0.642857)]
    assert rows(
        db,
        "SELECT count(*), min(detail) FROM behavior_provenance WHERE detail LIKE 'seed upgrade%'",
    ) == [(9, f"seed upgrade 0.0.1 → {version}")]


def test_seeder_stopped_while_waiting_makes_one_last_attempt(store: Store) -> None:
    """close() wakes a seeder waiting for the embedder: it tries once more without waiting
    (seeding if the embedder answers now), then the thread ends."""
    from thatch.frontend.tools.default_behaviors import DefaultSeeder

    embedder = FakeEmbedder(unavailable="still starting")
    down = DefaultSeeder(store, embedder, version="1.0").start()
    down.close()
    assert down.report is None
    assert rows(store.path, "SELECT count(*) FROM behaviors") == [(0,)]  # type: ignore[arg-type]
    seeder = DefaultSeeder(store, embedder, version="1.0").start()
    embedder.unavailable = None
    seeder.close()
    assert seeder.report is not None and seeder.report.created == 9
    assert rows(store.path, "SELECT count(*) FROM behaviors") == [(9,)]  # type: ignore[arg-type]


def test_a_deleted_default_stays_off_and_its_bookkeeping_is_hidden(tmp_path: Path) -> None:
    """engine behavior_delete of a default records it switched off in the same transaction: seeding
    never brings it back; lists show no seed stamp; switching it on lets seeding restore it
    (issue 23)."""
    from tests.support.fake_embedder import tool_context
    from thatch.frontend.tools.memory_tools import Tools

    wrap_up = DEFAULTS[0]
    with tool_context(tmp_path) as ctx:
        tools = Tools(ctx)
        embedder = FakeEmbedder()
        assert seed_defaults(ctx.store, embedder, version="1.0").created == 9
        listed = tools.call("engine", {"action": "behavior_list", "store": "global"}).text
        assert "seed-key" not in listed and "seed-version" not in listed
        assert wrap_up.why in listed
        deleted = tools.call(
            "engine",
            {"action": "behavior_delete", "statement": wrap_up.behavior, "store": "global"},
        ).text
        assert deleted.endswith(
            f"(a default behavior: switched off; thatch behaviors defaults --on {wrap_up.key})"
        )
        again = seed_defaults(ctx.store, embedder, version="1.0")
        assert (again.created, again.current) == (0, 8)
        assert wrap_up.key not in dict(stamps(tmp_path / "thatch.db"))
        # A new release upgrades the others and still leaves it off.
        assert seed_defaults(ctx.store, embedder, version="2.0").upgraded == 8
        assert wrap_up.key not in dict(stamps(tmp_path / "thatch.db"))
        engines = EngineStore(ctx.store.conn, BEHAVIORS, lock=ctx.store.lock)
        assert engines.switch_default(wrap_up.key, on=True)
        assert seed_defaults(ctx.store, embedder, version="2.0").created == 1
        assert (wrap_up.key, "2.0") in stamps(tmp_path / "thatch.db")


def test_cli_switches_defaults_off_and_on(tmp_path: Path, mock_embedder: EmbedderProcess) -> None:
    """thatch behaviors defaults lists the nine with on/off; --off deletes one and keeps it
    off across a real thatch mcp's seeding; JSON shows no stamp, names the default."""
    import json

    env = {
        **os.environ,
        "THATCH_DB_PATH": str(tmp_path / "thatch.db"),
        "THATCH_EMBEDDER_ADDR": mock_embedder.address,
        "THATCH_PROJECT_DIR": str(tmp_path),
    }
    with Store.open(tmp_path / "thatch.db") as store:
        seed_defaults(store, FakeEmbedder(), version="1.0")

    def thatch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [THATCH, *args], env=env, capture_output=True, text=True, cwd=tmp_path, check=False
        )

    key = DEFAULTS[1].key
    off = thatch("behaviors", "defaults", "--off", key)
    assert off.returncode == 0, off.stderr
    states = [line.split()[0] for line in off.stdout.splitlines()]
    assert f"off  {key}" in off.stdout and states.count("on") == 8
    # One column for the situations, after the longest key (debugging-git-archaeology).
    longest = max(len(d.key) for d in DEFAULTS)
    assert {line.index(" when ") for line in off.stdout.splitlines()} == {5 + longest + 1}
    assert key not in dict(stamps(tmp_path / "thatch.db"))
    listed = json.loads(thatch("behaviors", "list", "--store", "global", "--json").stdout)
    assert len(listed) == 8 and all("seed-key" not in item["rationale"] for item in listed)
    assert {item["default"] for item in listed} == {d.key for d in DEFAULTS} - {key}
    unknown = thatch("behaviors", "defaults", "--off", "nope")
    assert unknown.returncode == 2 and "no default behavior 'nope'" in unknown.stderr
    on = thatch("behaviors", "defaults", "--on", key, "--json")
    assert {row["key"]: row["on"] for row in json.loads(on.stdout)}[key] is True
