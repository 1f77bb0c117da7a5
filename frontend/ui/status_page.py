"""The Status page of ``thatch ui``: the doctor's checks, run in a child process."""

from __future__ import annotations

import contextlib
import os

from starlette.requests import Request
from starlette.responses import Response

from thatch.embedder.client.errors import ThatchEmbedderError
from thatch.frontend.errors import DatabaseDamagedError
from thatch.frontend.store import db
from thatch.frontend.ui.html import (
    table,
    text,
)
from thatch.frontend.ui.page_base import (
    PageBase,
    respond,
)

__all__ = ["StatusPage"]


class StatusPage(PageBase):
    # -- Status ------------------------------------------------------------------------

    def status(self, request: Request, form: None) -> Response:
        return self._safely(self._status)

    def _status(self) -> Response:
        from thatch.embedder.client.embedder_client import EmbedderClient
        from thatch.frontend.doctor import checks_in_child, damage_found

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
        # In a child: this process holds the database open (docs/database.md
        # §who-opens-the-file), and the checks open the file themselves.
        checks = checks_in_child(ctx.env, project_dir=ctx.project_dir)
        damage = damage_found(checks, path) if path is not None else None
        if path is not None and damage is not None:  # from now on writes are refused
            db.note_damage(self.store.conn, DatabaseDamagedError(path, damage), path)
        check_rows = [
            [text(c.status), text(c.name), text(c.detail), text(c.fix or "")] for c in checks
        ]
        content = [
            table([], facts),
            "<h2>Doctor</h2>",
            table(["status", "check", "detail", "fix"], check_rows),
        ]
        return respond("Status", "".join(content))
