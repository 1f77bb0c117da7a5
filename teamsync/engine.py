"""One sync pass over every link: push the outbox, then pull the feed into the replica.

Push first: a machine's own writes reach the hub before a pull could replace what it
shows, and a concurrent edit then comes back as a conflict version (both kept) rather
than overwritten. The hub is reached through a ``HubLink`` per link (the gRPC client in
production, anything speaking hub.v1 messages in tests); a failing hub is noted on the
link and the next pass tries again, nothing is lost meanwhile.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from thatch.frontend.errors import StoreError
from thatch.frontend.store.db import atomic
from thatch.frontend.timefmt import Clock, format_timestamp, utc_now
from thatch.hub.client import HubError, HubUnavailable
from thatch.hub.v1 import hub_pb2
from thatch.hub.values import Cursor
from thatch.teamsync import outbox, replica
from thatch.teamsync.chat import ChatHub, ChatMemo, ChatOutcome, chat_round
from thatch.teamsync.links import Link, all_links, get_link, machine_id, note_error, note_ok
from thatch.teamsync.recalls import send_recalls

__all__ = ["BATCH", "PAGE", "HubLink", "LinkOutcome", "SyncEngine"]

BATCH = 100  # outbox rows per Push
PAGE = 500  # changes per Pull


class HubLink(Protocol):
    def push(self, writes: Sequence[hub_pb2.Write]) -> Sequence[hub_pb2.Ack]: ...
    def pull(self, after: Cursor | None = None, limit: int = 0) -> hub_pb2.PullResponse: ...
    def stores(self) -> hub_pb2.StoresResponse: ...
    def record_recalls(self, events: Sequence[hub_pb2.RecallEvent]) -> int: ...


@dataclass
class LinkOutcome:
    store: str
    pushed: int = 0
    applied: int = 0
    recalls: int = 0  # recall events sent
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None
    # The chat round of the link's team, on the team's first link only: reported once.
    chat: ChatOutcome | None = None


class SyncEngine:
    def __init__(
        self,
        conn: sqlite3.Connection,
        hub_for: Callable[[Link], HubLink],
        *,
        local_model: str | None,
        chat_for: Callable[[Link], ChatHub] | None = None,
        clock: Clock = utc_now,
        batch: int = BATCH,
        page: int = PAGE,
        stop: threading.Event | None = None,
    ) -> None:
        """``stop``: set by the process's SIGTERM handler; a pass ends between pages.
        ``chat_for``: the hub's chat RPCs for a link's team (None: no chat round)."""
        self.conn = conn
        self.hub_for = hub_for
        self.chat_for = chat_for
        self.chat_memo = ChatMemo()
        self.local_model = local_model
        self.clock = clock
        self.batch = batch
        self.page = page
        self.stop = stop if stop is not None else threading.Event()

    def _now(self) -> str:
        return format_timestamp(self.clock())

    def sync_all(self) -> list[LinkOutcome]:
        """One pass over every link, then a chat round per team; each link's failure is
        its own (a team's failed chat round is the error of that team's links)."""
        with atomic(self.conn, immediate=False):
            links = all_links(self.conn)
        outcomes = [self.sync(link) for link in links]
        if self.chat_for is not None and links and not self.stop.is_set():
            self.chat(links, outcomes)
        return outcomes

    def chat(self, links: list[Link], outcomes: list[LinkOutcome]) -> None:
        """The chat round of each team these links share stores with, through the first
        link's hub (one token per hub and team)."""
        assert self.chat_for is not None
        with atomic(self.conn, immediate=False):
            machine = machine_id(self.conn)
        teams: dict[str, list[int]] = {}
        for index, link in enumerate(links):
            teams.setdefault(link.team, []).append(index)
        for team, indexes in teams.items():
            if all(outcomes[i].error is not None for i in indexes):
                continue  # the hub failed this pass already: its error is noted
            first = links[indexes[0]]
            # Kept even when the round fails later: the mail it saw refused stays refused.
            done = outcomes[indexes[0]].chat = ChatOutcome(team)
            try:
                chat_round(
                    self.conn,
                    self.chat_for(first),
                    team=team,
                    stores=[links[i].store for i in indexes],
                    machine=machine,
                    clock=self.clock,
                    stop=self.stop,
                    memo=self.chat_memo,
                    outcome=done,
                )
            except (HubError, StoreError) as error:
                # The queued mail stays in the chat outbox; the next pass sends it.
                message = f"chat: {error}"
                for index in indexes:
                    outcome = outcomes[index]
                    if outcome.error is None:
                        outcome.error = message
                        with contextlib.suppress(StoreError):
                            note_error(self.conn, outcome.store, message, self._now())

    def sync(self, link: Link) -> LinkOutcome:
        done = LinkOutcome(link.store)
        try:
            hub = self.hub_for(link)
            self.push(link, hub, done)
            self.pull(link, hub, done)
            done.recalls = send_recalls(self.conn, hub, link.store, stop=self.stop)
        except (HubError, StoreError) as error:
            # The link's last error, for `thatch team status`; the next pass retries
            # (a refused token too: the user may replace the token file meanwhile; a busy
            # database too: another writer held it past the busy timeout).
            done.error = str(error)
            with contextlib.suppress(StoreError):
                note_error(self.conn, link.store, done.error, self._now())
            return done
        note_ok(self.conn, link.store, self._now())
        return done

    def push(self, link: Link, hub: HubLink, done: LinkOutcome) -> None:
        """Push the waiting rows in id order, batch by batch, until none is left (or the
        hub leaves a batch unacknowledged: the rest waits for the next pass)."""
        with atomic(self.conn, immediate=False):
            machine = machine_id(self.conn)
        while not self.stop.is_set():
            with atomic(self.conn, immediate=False):
                rows = outbox.waiting(self.conn, link.store, self.batch)
            if not rows:
                return
            sendable = self._checked(_one_write_per_slug(rows), done)
            if not sendable:
                continue
            acks = list(hub.push([outbox.write_of(row, machine) for row in sendable]))
            settled = outbox.settle(self.conn, sendable, acks, machine, self._now())
            done.pushed += settled.saved + settled.forgotten + len(settled.conflicts)
            done.conflicts += settled.conflicts
            done.refused += settled.refused
            if settled.unacked:
                return

    def _checked(self, rows: list[outbox.Queued], done: LinkOutcome) -> list[outbox.Queued]:
        """The rows that may leave the machine; the others set aside with the reason."""
        sendable: list[outbox.Queued] = []
        with atomic(self.conn):
            for row in rows:
                reason = outbox.check(row)
                if reason is None:
                    sendable.append(row)
                else:
                    outbox.set_aside(self.conn, row.id, reason)
                    done.refused.append((row.id, reason))
        return sendable

    def pull(self, link: Link, hub: HubLink, done: LinkOutcome) -> None:
        """Pull pages until the feed has nothing after the cursor; each page is applied
        with its cursor in one transaction (``replica.apply_page``)."""
        current = link
        resets = 0
        while not self.stop.is_set():
            after = Cursor(current.cursor_txid, current.cursor_seq)
            page = hub.pull(after, self.page)
            applied = replica.apply_page(self.conn, current, page, self.local_model)
            done.applied += applied.saved + applied.deleted
            with atomic(self.conn, immediate=False):
                fresh = get_link(self.conn, link.store)
            if fresh is None:
                return  # left meanwhile
            moved = (fresh.cursor_txid, fresh.cursor_seq) != (after.txid, after.seq)
            if applied.reset:
                resets += 1
                if resets > 1:
                    # A feed that resets a cursor it just led up from the start: waiting
                    # for the next pass beats looping on it (the link notes the error).
                    raise HubUnavailable(
                        "the hub answered reset again after a pull from the start",
                        "check the version of the hub; this machine retries on its next pass",
                    )
            elif not page.changes or not moved:
                return
            current = fresh


def _one_write_per_slug(rows: list[outbox.Queued]) -> list[outbox.Queued]:
    """The batch cut before a slug's second write: that write is based on the revision the
    first one's ack brings (``outbox.settle``), so it waits for the next batch."""
    seen: set[str] = set()
    for index, row in enumerate(rows):
        if row.slug in seen:
            return rows[:index]
        seen.add(row.slug)
    return rows
