"""The Status page of ``thatch ui``: the database and embedder facts and the doctor's
checks at every visit, the checks in a child process; the read of the whole file for
damage only from the page's button."""

from __future__ import annotations

import contextlib
import html
import os
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from thatch.embedder.client.errors import ThatchEmbedderError
from thatch.frontend.doctor import Check
from thatch.frontend.errors import DatabaseDamagedError
from thatch.frontend.store import db
from thatch.frontend.ui.forms import Form
from thatch.frontend.ui.html import (
    post_form,
    table,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    respond,
)

__all__ = ["IntegrityRun", "StatusPage"]


@dataclass(frozen=True)
class IntegrityRun:
    """The doctor's database check with the whole file read, as it was at ``at`` (a
    stored-format UTC timestamp)."""

    at: str
    check: Check


@dataclass
class StatusPage(PageBase):
    # The last read of the whole file for damage, shown with its time. Not at every visit:
    # PRAGMA quick_check reads the whole file (seconds at 100k memories). Nor cached by
    # the file's state: an mtime can stay the same across a write, and damage done outside
    # SQLite changes no counter SQLite keeps, so such a key could show a wrong "ok".
    last_integrity: IntegrityRun | None = None

    # -- Status ------------------------------------------------------------------------

    def status(self, request: Request, form: None) -> Response:
        return self._safely(lambda: self._status(request))

    def run_doctor(self, request: Request, form: Form) -> Response:
        return self._safely(self._run_doctor)

    def _run_doctor(self) -> Response:
        from thatch.frontend.timefmt import format_timestamp

        at = format_timestamp(self.store.clock())
        checks = self._checks(integrity=True)
        found = next((c for c in checks if c.name == "database"), checks[0])
        self.last_integrity = IntegrityRun(at, found)
        return self._back_to("/status", {}, "Read the whole database file for damage.")

    def _checks(self, *, integrity: bool) -> list[Check]:
        from thatch.frontend.doctor import checks_in_child, damage_found

        ctx = self.tools.ctx
        path = self.store.path
        # In a child: this process holds the database open (docs/database.md
        # §who-opens-the-file), and the checks open the file themselves.
        checks = checks_in_child(ctx.env, project_dir=ctx.project_dir, integrity=integrity)
        damage = damage_found(checks, path) if path is not None else None
        if path is not None and damage is not None:  # from now on writes are refused
            db.note_damage(self.store.conn, DatabaseDamagedError(path, damage), path)
        return checks

    def _status(self, request: Request) -> Response:
        from thatch.embedder.client.embedder_client import EmbedderClient

        ctx = self.tools.ctx
        path = self.store.path
        size = 0
        if path is not None:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(OSError):
                    size += os.stat(f"{path}{suffix}").st_size
        facts = [
            ["database", text(path or "(in memory)")],
            ["size (with WAL)", f"{size / 1e6:.2f} MB"],
            ["project", text(ctx.project_dir)],
            ["project store", text(ctx.project_store)],
        ]
        try:
            client = EmbedderClient(env=ctx.env, autostart=False)
            try:
                info = client.info(timeout=2.0)
            finally:
                client.close()
            facts += [
                ["embedder model", text(info.model_id)],
                ["dimension", str(info.dim)],
                ["int8", "yes" if info.quantized else "no"],
                ["model loaded", "yes" if info.loaded else "no (released while idle)"],
                ["idle release", f"{info.idle_release_seconds} s"],
                [
                    "exit after idle",
                    f"{info.exit_after_seconds} s" if info.exit_after_seconds else "never",
                ],
                ["requests served", str(info.requests_served)],
                ["embedder pid, uptime", f"{info.pid}, {info.uptime_s} s"],
                ["embedder version", text(info.server_version)],
            ]
        except ThatchEmbedderError as error:
            facts.append(["embedder", text(f"not answering: {error}")])
        content = [
            self._done_note(request.query_params),
            table([], facts),
            "<h2>Doctor</h2>",
            _checks_table(self._checks(integrity=False)),
            "<h2>Damage</h2>",
            self._integrity_section(),
        ]
        return respond("Status", "".join(content))

    def _integrity_section(self) -> str:
        intro = (
            "<p>Reading the database file for damage (<code>PRAGMA quick_check</code>, as "
            "<code>thatch doctor</code> does) reads the whole file, so it runs when asked, "
            "not at every visit. "
        )
        button = post_form("/status/doctor", self.csrf, {}, "Read the file for damage now")
        run = self.last_integrity
        if run is None:
            return f"{intro}Not read since this page started.</p>{button}"
        return (
            f"{intro}Last read {self._moment(run.at)} ({text(run.at)}): what was found then; "
            f"the file may have changed since.</p>{button}" + _checks_table([run.check])
        )


def _checks_table(checks: list[Check]) -> str:
    rows = [[text(c.status), text(c.name), _said(c.detail), _said(c.fix or "")] for c in checks]
    return table(["status", "check", "detail", "fix"], rows)


def _said(value: str) -> str:
    """A doctor's detail or fix: it shows paths and keys escaped already, so escaping it
    again would double their backslashes; only what it left raw is escaped here."""
    from thatch.frontend.untrusted import has_control

    return text(value) if has_control(value) else html.escape(value, quote=True)
