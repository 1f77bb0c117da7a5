"""Personal sync with real processes (docs/team.md §personal-sync): one person, one team
of one member, one token, two machines (two HOMEs, two SQLite files, each running
``thatch team sync``) joined to one hub (``thatch hub serve`` on the test PostgreSQL with
the real MiniLM). Write ids, conflicts and chat keep the two machines apart though the
member is the same; memories both machines held already become no conflict copies."""

from __future__ import annotations

import sqlite3
import subprocess
import tempfile
from contextlib import closing
from pathlib import Path

from tests.support.polling import poll
from tests.test_chat_processes import Mcp
from tests.test_team_chat import (
    anchor,
    assert_framed,
    hook_env,
    messages_to,
    project,
    stop_all,
)
from tests.test_team_sync import DEADLINE, STORE, THATCH, Hub, Machine, embedder

__all__ = ["embedder"]  # the module-scoped embedder process, shared with test_team_sync

# Both machines held these before they joined: identical, and not.
SAME = ("Build", "Run make build; the binary lands in out/.")
PORT_LAPTOP = ("Port", "The dev server listens on 8080 on the laptop.")
PORT_DESKTOP = ("Port", "The dev server listens on 9090 on the desktop.")


def admin(hub_db, *args: str) -> str:
    """``thatch hub …`` as the database's owner (what the operator runs)."""
    import os

    env = {**os.environ, "THATCH_HUB_OWNER_URL": hub_db.server.conninfo(hub_db.name)}
    done = subprocess.run([*THATCH, "hub", *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def machine_id(machine: Machine) -> str:
    with closing(sqlite3.connect(machine.db)) as conn:
        return str(conn.execute("SELECT id FROM _thatch_team_machine").fetchone()[0])


def rename_session(machine: Machine, old: str, new: str) -> None:
    """Give a session the name a session on the other machine has (local names are only
    unique within one database)."""
    with closing(sqlite3.connect(machine.db)) as conn, conn:
        conn.execute("UPDATE chat_sessions SET name = ? WHERE name = ?", (new, old))


def test_one_member_syncs_one_store_between_two_machines(hub_db, embedder, tmp_path) -> None:
    admin(hub_db, "team", "add", "pat", "Pat's machines")
    token = admin(hub_db, "member", "add", "pat", "pat").strip()
    folder = Path(tempfile.mkdtemp(prefix="th-", dir="/tmp"))  # short: a socket lives here
    hub = Hub(hub_db, embedder, folder)
    laptop = Machine(tmp_path / "laptop", embedder, token)
    desktop = Machine(tmp_path / "desktop", embedder, token)
    for machine, port, own in (
        (laptop, PORT_LAPTOP, ("Laptop only", "Saved on the laptop before joining.")),
        (desktop, PORT_DESKTOP, ("Desktop only", "Saved on the desktop before joining.")),
    ):
        for label, text in (SAME, port, own):
            machine.ok("remember", label, text, "--store", STORE)
    hub.start()
    try:
        for machine in (laptop, desktop):
            out = machine.ok("team", "join", hub.address, "--store", STORE, "--no-start")
            assert "Joined team pat as pat" in out, out
            machine.start_sync()
        expected = {"build", "port", "port-conflict-2", "laptop-only", "desktop-only"}

        def settled() -> bool:
            return all(
                set(m.rows()) == expected
                and all(vector for _, vector in m.rows().values())
                and m.outbox() == 0
                for m in (laptop, desktop)
            )

        assert poll(settled, DEADLINE), (laptop.log.read_text(), desktop.log.read_text())
        assert laptop.rows() == desktop.rows()
        # The memory both held is one row on the hub, at its first revision: no copy.
        owner = hub_db.owner()
        rows = owner.execute(
            "SELECT slug, rev FROM memories WHERE team = 'pat' AND deleted_at IS NULL ORDER BY slug"
        ).fetchall()
        assert ("build", 1) in rows and len(rows) == len(expected)
        # Different texts under one label are kept both, as between two members.
        ports = {laptop.rows()["port"][0], laptop.rows()["port-conflict-2"][0]}
        assert ports == {f"# Port\n\n{PORT_LAPTOP[1]}", f"# Port\n\n{PORT_DESKTOP[1]}"}
        # Write ids carry each machine's own id: the same member's writes never collide.
        ids = {machine_id(laptop), machine_id(desktop)}
        assert len(ids) == 2
        prefixes = {
            str(row[0]).split(":")[0]
            for row in owner.execute("SELECT id FROM applied_writes WHERE team = 'pat'")
        }
        assert prefixes == ids

        # An edit on one machine reaches the other as an edit, not a conflict.
        laptop.ok("remember", "Build", "Run make build -j8.", "--store", STORE, "--overwrite")
        assert poll(lambda: "-j8" in desktop.rows()["build"][0], DEADLINE)
        assert set(desktop.rows()) == expected

        # Chat: both machines' sessions under one member, even with one local name.
        checkouts = [project(tmp_path, "p1"), project(tmp_path, "p2")]
        a = anchor(laptop, checkouts[0], "claude-laptop")
        desktop.stop_sync()  # the session is renamed before the desktop publishes it
        b = anchor(desktop, checkouts[1], "claude-desktop")
        if b.name != a.name:
            rename_session(desktop, b.name, a.name)
            b = b._replace(name=a.name, me=f"{a.name}:{b.me.split(':')[1]}")
        desktop.start_sync()
        shown = {f"{a.name}@pat", f"{a.name}@pat#2"}

        def published() -> dict[str, str]:
            return {
                str(name): str(machine)
                for name, machine in owner.execute(
                    "SELECT display_name, machine FROM chat_peers WHERE team = 'pat'"
                )
            }

        assert poll(lambda: set(published()) == shown, DEADLINE), published()
        names = {machine: name for name, machine in published().items()}
        laptop_there, desktop_there = names[machine_id(laptop)], names[machine_id(desktop)]

        def remote_names(machine: Machine) -> set[str]:
            with closing(sqlite3.connect(machine.db)) as conn:
                rows = conn.execute("SELECT name FROM chat_sessions WHERE host_kind = 'team'")
                return {str(row[0]) for row in rows}

        # Each machine shows the other's session, never its own.
        assert poll(lambda: remote_names(laptop) == {desktop_there}, DEADLINE)
        assert poll(lambda: remote_names(desktop) == {laptop_there}, DEADLINE)
        sender = Mcp(hook_env(laptop, checkouts[0]))
        try:
            body = "pick this up on the desktop"
            assert sender.ok(
                "chat", {"action": "send", "as": a.me, "to": desktop_there, "body": body}
            ) == (f"[sent] → {desktop_there}")
        finally:
            sender.close()
        assert poll(lambda: messages_to(desktop, b) == 1, DEADLINE), desktop.log.read_text()
        assert messages_to(laptop, a) == 0  # the same member's other machine kept nothing

        server = Mcp(hook_env(desktop, checkouts[1]))
        try:
            assert_framed(
                server.ok("chat", {"action": "read", "as": b.me}),
                laptop_there,
                "pick this up on the desktop",
            )
        finally:
            server.close()
    finally:
        stop_all(hub, [laptop, desktop], folder)
