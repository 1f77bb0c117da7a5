"""What every tool call needs: one Store, one embedder client, and the resolved project.

A frontend builds one ``ToolContext`` per process (MCP server) or invocation (CLI) with
``ToolContext.from_env(env)`` and closes it (``with``, or click's ``call_on_close``):
closing stops the backlog fill, runs or stops the pending fill, then closes the Store and
the embedder client.
Nothing here is global, so tests build their own.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from thatch.common.environment import (
    default_db_path,
    host_from_env,
    project_dir_from_env,
    queue_dir,
    snapshot_dir,
)
from thatch.frontend.anchors.check import AnchorCheck
from thatch.frontend.store.memory_store import Store
from thatch.frontend.tools.embedding import Embedder as Embedder
from thatch.frontend.tools.embedding import EmbedResultLike as EmbedResultLike
from thatch.frontend.tools.pending_fill import PendingFill

__all__ = [
    "EMBED_TIMEOUT",
    "TOOL_START_WAIT",
    "BacklogFill",
    "ToolContext",
    "setup_prefix",
]

TOOL_START_WAIT = 20.0
EMBED_TIMEOUT = 30.0


class BacklogFill:
    """A long-lived server's pending backfills (docs/database.md §backfills) on a thread,
    so that its first answers do not wait for them; ``close`` stops it after at most one
    short transaction (the rest resumes on a later open)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="thatch-backfill", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._store.fill_backlog(self._stop)
        except Exception as error:  # recall ranks by vectors until a later open finishes it
            print(f"[thatch] index backfill stopped: {error}", file=sys.stderr)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class ToolContext:
    store: Store
    embedder: Embedder
    project_store: str
    project_dir: Path
    host: str | None  # None: unknown (tools assume none; hooks fall back to claude)
    env: Mapping[str, str]
    queue_dir: Path
    # Prepended (once) to the first tools/call result: the setup-check warning.
    first_result_prefix: str | None = None
    # Seconds a call waits for an embedder that is starting: tools 20, CLI 120.
    start_wait: float = TOOL_START_WAIT
    embed_timeout: float = EMBED_TIMEOUT
    pending_fill: PendingFill = field(init=False, repr=False, compare=False)
    backlog_fill: BacklogFill = field(init=False, repr=False, compare=False)
    # The process's one cache of anchored files' facts (docs/tools.md §code-anchors).
    anchor_check: AnchorCheck = field(default_factory=AnchorCheck, repr=False, compare=False)
    _closed: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.pending_fill = PendingFill(self)
        self.backlog_fill = BacklogFill(self.store)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        embedder: Embedder | None = None,
        start_wait: float = TOOL_START_WAIT,
        autostart: bool = True,
        notice: Callable[[], None] | None = None,
        build_indexes: bool = True,
        fill_later: bool = False,
    ) -> ToolContext:
        """Resolve project dir, project store and host, open the database, make a client
        for ``env`` (default: this process's); the caller closes it.

        ``build_indexes`` as in ``Store``; ``fill_later``: pending backfills are left to
        ``backlog_fill`` (a server starts it) instead of run before this returns."""
        from thatch.frontend.project import project_store
        from thatch.frontend.timefmt import utc_now

        env = dict(os.environ) if env is None else dict(env)
        project_dir = project_dir_from_env(env) or Path.cwd()
        store = Store.open(
            default_db_path(env),
            clock=utc_now,
            snapshot_dir=snapshot_dir(env),
            build_indexes=build_indexes,
            fill_now=not fill_later,
        )
        try:
            if embedder is None:
                from thatch.embedder.client.embedder_client import EmbedderClient
                from thatch.embedder.client.errors import AddressError, EmbedderUnavailable

                try:
                    embedder = EmbedderClient(env=env, autostart=autostart, notice=notice)
                except (AddressError, EmbedderUnavailable) as error:
                    from thatch.frontend.tools.embedding import UnusableEmbedder

                    embedder = UnusableEmbedder.from_error(error)
            return cls(
                store=store,
                embedder=embedder,
                project_store=project_store(project_dir, env),
                project_dir=project_dir,
                host=host_from_env(env),
                env=env,
                queue_dir=queue_dir(env),
                start_wait=start_wait,
            )
        except BaseException:  # nobody else holds the Store yet
            store.close()
            raise

    @property
    def default_scope(self) -> list[str]:
        """``[project store, "global"]``, one entry when they are equal."""
        return list(dict.fromkeys([self.project_store, "global"]))

    def close(self) -> None:
        """Finish (CLI) or stop (server) the pending fill, then close the Store and the
        embedder client, which the context owns. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self.backlog_fill.close()
            self.pending_fill.close()
        finally:
            try:
                self.store.close()
            finally:
                self.embedder.close()

    def __enter__(self) -> ToolContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def setup_prefix(ctx: ToolContext) -> str | None:
    """The setup-check warning as the first result's prefix (None when setup is fine)."""
    from thatch.frontend.setup.check import setup_warning

    try:
        message = setup_warning(ctx)
    except Exception as error:  # a broken check must not stop the server
        print(f"[thatch] setup check failed: {error}", file=sys.stderr)
        return None
    if not message:
        return None
    line = message if message.startswith("[thatch]") else f"[thatch] {message}"
    print(line, file=sys.stderr)
    return line + "\n\n"
