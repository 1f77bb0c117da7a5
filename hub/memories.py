"""Memories of a team's stores on PostgreSQL (docs/team.md): what the hub runs for a member.

``HubMemories`` holds one connection (from the hub's pool), the authenticated member and
the clock; every call is one transaction as that member (``session.as_member``), so
row-level security confines it to the member's team whatever the arguments say.

Where it follows ``MemoryOperations`` (frontend/store/operations.py): ``store_names``,
``store_counts``, ``store_exists``, ``list``, ``show``, ``search``, ``recall`` and
``stamp_recalls`` take the same arguments and return the same types (``SharedOperations``,
which mypy checks both this class and the SQLite ``Store`` against), and ``search`` ranks
exactly as the SQLite ``Store`` does (one recall path; above ``EXACT_SCAN_MAX`` memories
an HNSW index screens, exact in scores and order, not guaranteed complete: docs/team.md
§vectors). Where it does not, and why:
- ``remember`` takes ``base_rev`` (the revision the writer last saw) instead of
  ``overwrite``, and answers a ``Written`` (saved or kept as a conflict version, with the
  slug and revision): a team write never overwrites what its writer has not seen.
- ``forget`` leaves a tombstone (a row with ``deleted_at``) for replicas to apply;
  ``purge_tombstones`` removes old ones.
- Telemetry (``stamp_recalls``) appends ``recall_events``; ``recall_count`` and
  ``last_recalled_at`` are counted from them.
- Not here (they run on each machine's replica, not on the hub): the duplicate scans
  and verdicts, hygiene counts, pending embeddings and re-embedding (the hub embeds with
  one pinned model, so a team store has no model mismatch to repair).
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from psycopg import Connection
from psycopg.rows import TupleRow

from thatch.frontend.errors import InvalidInputError
from thatch.frontend.secret_scan import refuse_secrets
from thatch.frontend.store.memory import Match, Memory
from thatch.frontend.store.rows import store_list, store_name
from thatch.frontend.store.scoring import exact_scores
from thatch.frontend.store.slugs import slugify
from thatch.frontend.store.vectors import as_vector
from thatch.frontend.timefmt import Clock, format_timestamp
from thatch.hub.migrations import DIMENSION, SCREEN_SAMPLE
from thatch.hub.session import Member, as_member
from thatch.hub.values import Outcome, Written

__all__ = [
    "DIMENSION",
    "EXACT_SCANS_ONLY",
    "EXACT_SCAN_MAX",
    "HALF_MARGIN",
    "HNSW_EF_SEARCH",
    "HNSW_OVERFETCH",
    "HNSW_SCREEN",
    "HNSW_SETTINGS",
    "MEMORY_COLUMNS",
    "SAMPLE_EVERY",
    "SAMPLE_PREDICATE",
    "TOMBSTONE_RETENTION",
    "HubMemories",
    "Outcome",
    "SharedOperations",
    "Written",
    "memory_from_hub_row",
]

# How long a tombstone stays for machines to pull before ``purge_tombstones`` may drop it;
# a machine offline longer re-pulls (``feed.Page.reset``).
TOMBSTONE_RETENTION = timedelta(days=30)

# halfvec keeps float16 (relative error 2⁻¹¹ per component, on the stored and the query
# vector alike), so a screened inner product of unit vectors is off from the exact one by
# e ≤ 2·2⁻¹¹ + float32 summation ≈ 1.0e-3. A row of the exact top k screens at least
# (k-th exact − e) and the k-th screened score is at most (k-th exact + e): a cut 2e below
# the k-th screened score keeps every such row. float64 then decides.
HALF_MARGIN = 4e-3

# Live memories of the stores asked up to which ``search`` scans exactly (the local answer,
# tens of ms); above it the HNSW index screens (docs/team.md §vectors: at 100,000 per store
# the exact scan took 0.4-1.1 s, the hub with the index 14-19 ms).
EXACT_SCAN_MAX = 10_000
# What a hub whose pgvector cannot walk the index does instead (schema.vector_problem).
EXACT_SCANS_ONLY = (
    f"until then every recall scans its stores exactly (slower past {EXACT_SCAN_MAX:,} "
    "memories a store)"
)
# Rows beyond the limit the index returns to be rescored in float64, and the graph's search
# breadth: measured (bench/team.py) to find 0.97-0.99 of the exact top 10 at 100,000.
HNSW_OVERFETCH = 20
HNSW_EF_SEARCH = 200
HNSW_EF_MAX = 1000  # pgvector's largest hnsw.ef_search
# The guard's fixed sample of a store: rows whose slug hashes to 0 mod 64 (m008 indexes
# them), chosen by name, so independent of where their vectors lie.
SAMPLE_EVERY = 64
SAMPLE_PREDICATE = SCREEN_SAMPLE

# The rows a search ranks: live, with a vector, of the stores asked, branch and archived
# filters applied.
_SCREEN_FILTER = """team = thatch_team() AND store = ANY(%(stores)s) AND deleted_at IS NULL
    AND embedding IS NOT NULL AND (%(archived)s OR NOT archived)
    AND (%(branch)s::text IS NULL OR branch IS NULL OR branch = %(branch)s)"""

# The HNSW screen's settings, local to its transaction (a pooled connection keeps none):
# the walk goes on past ef_search until enough rows pass the filters; and no sort, so the
# planner walks the index rather than sorting the store (its cost model prices a walk at
# ef_search 200 above a seq scan and sort of a few thousand rows: the choice is made here,
# by the measured store size, and the guard covers a walk that goes wrong).
HNSW_SETTINGS = """SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
  set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)"""

# The HNSW screen: ORDER BY the distance with a LIMIT is what lets the planner walk the
# index (m008) instead of scanning the store.
HNSW_SCREEN = f"""SELECT store, slug, vector FROM memories WHERE {_SCREEN_FILTER}
ORDER BY embedding <#> %(q)s::halfvec LIMIT %(rows)s"""

# A memory row: the 13 values ``memory_from_row`` would read, with telemetry counted from
# the events and dim 384 for a row with a vector.
MEMORY_COLUMNS = f"""m.slug, m.store, m.label, m.content, m.model, m.branch, m.confidence,
  m.archived, m.created_at, m.updated_at,
  (SELECT count(*) FROM recall_events e
     WHERE e.team = m.team AND e.store = m.store AND e.slug = m.slug),
  (SELECT max(e.at) FROM recall_events e
     WHERE e.team = m.team AND e.store = m.store AND e.slug = m.slug),
  CASE WHEN m.embedding IS NOT NULL THEN {DIMENSION} END"""


class SharedOperations(Protocol):
    """What ``HubMemories`` and the SQLite ``Store`` share, signature for signature (the
    part of ``MemoryOperations`` the hub runs; mypy checks both classes at the end)."""

    clock: Clock

    def store_names(self) -> builtins.list[str]: ...
    def store_counts(self) -> dict[str, int]: ...
    def store_exists(self, name: str) -> bool: ...
    def list(self, store: str) -> builtins.list[Memory]: ...
    def show(self, store: str, label: str) -> Memory | None: ...
    def search(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> builtins.list[Match]: ...
    def recall(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
        floor: float | None = None,
    ) -> builtins.list[Match]: ...
    def stamp_recalls(self, matches: Sequence[Match], at: str | None = None) -> None: ...


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def memory_from_hub_row(row: Sequence[Any]) -> Memory:
    return Memory(
        slug=row[0],
        store=row[1],
        label=row[2],
        content=row[3],
        model=row[4],
        branch=row[5],
        confidence=row[6],
        archived=bool(row[7]),
        created_at=format_timestamp(row[8]),
        updated_at=format_timestamp(row[9]),
        recall_count=int(row[10]),
        last_recalled_at=_stamp(row[11]),
        dim=row[12],
    )


def _halfvec(unit: np.ndarray[Any, Any]) -> str:
    return "[" + ",".join(repr(float(value)) for value in unit) + "]"


def _pinned(vector: Any) -> tuple[str, bytes]:
    """(the unit vector as halfvec text, the exact float32 bytes) of a 384-d vector."""
    array = as_vector(vector)
    if array.size != DIMENSION:
        raise InvalidInputError(
            f"team stores hold {DIMENSION}-dimensional vectors (the hub's pinned model); "
            f"got {array.size}"
        )
    norm = float(np.linalg.norm(array.astype(np.float64)))
    if norm == 0.0:
        raise InvalidInputError("vector must not be all zeros")
    return _halfvec(array.astype(np.float64) / norm), array.astype("<f4").tobytes()


class HubMemories:
    """One member's view of the team's memories, over one connection (not in a transaction)."""

    def __init__(
        self,
        conn: Connection[TupleRow],
        who: Member,
        clock: Clock,
        *,
        exact_scan_max: int | None = EXACT_SCAN_MAX,
    ) -> None:
        self.conn = conn
        self.who = who
        self.clock = clock
        self.exact_scan_max = exact_scan_max
        # How each search screened: "exact", "hnsw", "hnsw fell back" (to the exact scan).
        self.screens: Counter[str] = Counter()

    # -- stores

    def store_names(self) -> list[str]:
        with as_member(self.conn, self.who) as conn:
            return [str(row[0]) for row in conn.execute("SELECT name FROM stores ORDER BY name")]

    def store_counts(self) -> dict[str, int]:
        with as_member(self.conn, self.who) as conn:
            rows = conn.execute(
                "SELECT s.name, count(m.slug) FROM stores s LEFT JOIN memories m "
                "ON m.team = s.team AND m.store = s.name AND m.deleted_at IS NULL "
                "GROUP BY s.name ORDER BY s.name"
            )
            return {str(name): int(count) for name, count in rows}

    def store_exists(self, name: str) -> bool:
        with as_member(self.conn, self.who) as conn:
            row = conn.execute("SELECT EXISTS (SELECT 1 FROM stores WHERE name = %s)", (name,))
            return bool(row.fetchone()[0])  # type: ignore[index]

    # -- writes

    def remember(
        self,
        store: str,
        label: str,
        stored_text: str,
        vector: Any | None,
        model: str | None,
        *,
        base_rev: int | None = None,
        branch: str | None = None,
        confidence: int | None = None,
        archived: bool | None = None,
        write_id: str | None = None,
    ) -> Written:
        """Save one memory; a write that would replace a version its writer has not seen
        (``base_rev`` is not the row's revision) is kept beside it as a conflict version.
        A None vector saves it pending. As the local store's overwrite does, a replacing
        write given no ``branch``, ``confidence`` or ``archived`` keeps the row's.

        ``write_id`` (the machine's outbox id for this write, unique in the team) makes a
        retried push return the first outcome and write nothing again.

        Refused (``SecretFound``) when the label or text holds what looks like a secret.
        """
        store = store_name(store)
        if not isinstance(label, str) or not isinstance(stored_text, str):
            raise InvalidInputError("label and stored text must be strings")
        refuse_secrets(store, label, stored_text)
        half, exact = (None, None) if vector is None else _pinned(vector)
        now = self.clock()
        slug = slugify(label)
        values = {
            "store": store,
            "label": label,
            "content": stored_text,
            "half": half,
            "exact": exact,
            "model": None if vector is None else model,
            "branch": branch,
            "confidence": confidence,
            "archived": archived,
            "now": now,
        }
        with as_member(self.conn, self.who) as conn:
            if write_id is not None:
                done = self._claim(conn, write_id)
                if done is not None:
                    return done
            written = self._write(conn, values, slug, base_rev)
            if write_id is not None:
                conn.execute(
                    "UPDATE applied_writes SET outcome = %s, slug = %s, rev = %s "
                    "WHERE team = thatch_team() AND member = thatch_member() AND id = %s",
                    (written.outcome.value, written.slug, written.rev, write_id),
                )
            return written

    def applied(self, write_ids: Sequence[str]) -> set[str]:
        """Which of ``write_ids`` an earlier push of this member applied (``_claim``'s
        recorded outcomes, claims from before m010 included)."""
        with as_member(self.conn, self.who) as conn:
            rows = conn.execute(
                "SELECT id FROM applied_writes WHERE team = thatch_team() "
                "AND member IN (thatch_member(), '') AND id = ANY(%s) AND outcome IS NOT NULL",
                (list(write_ids),),
            )
            return {str(row[0]) for row in rows}

    def _claim(self, conn: Connection[TupleRow], write_id: str) -> Written | None:
        """Claim ``write_id`` for this transaction; the recorded outcome when a previous
        push applied it (a concurrent push holding the claim is waited for)."""
        # Another member's claim of the same id is not this write's (m010); a claim from
        # before m010 (member '') still is, until it expires.
        earlier = conn.execute(
            "SELECT outcome, slug, rev FROM applied_writes "
            "WHERE team = thatch_team() AND member = '' AND id = %s",
            (write_id,),
        ).fetchone()
        if earlier is not None and earlier[0] is not None:
            return Written(Outcome(earlier[0]), str(earlier[1]), int(earlier[2]))
        claimed = conn.execute(
            "INSERT INTO applied_writes (team, member, id, at) "
            "VALUES (thatch_team(), thatch_member(), %s, %s) "
            "ON CONFLICT (team, member, id) DO NOTHING RETURNING id",
            (write_id, self.clock()),
        ).fetchone()
        if claimed is not None:
            return None
        row = conn.execute(
            "SELECT outcome, slug, rev FROM applied_writes "
            "WHERE team = thatch_team() AND member = thatch_member() AND id = %s",
            (write_id,),
        ).fetchone()
        assert row is not None and row[0] is not None  # committed with its outcome
        return Written(Outcome(row[0]), str(row[1]), int(row[2]))

    def _write(
        self, conn: Connection[TupleRow], values: dict[str, Any], slug: str, base_rev: int | None
    ) -> Written:
        """``remember``'s write, inside its transaction."""
        store = values["store"]
        conn.execute(
            "INSERT INTO stores (team, name) VALUES (thatch_team(), %s) ON CONFLICT DO NOTHING",
            (store,),
        )
        inserted = self._insert(conn, {**values, "slug": slug, "conflict_of": None})
        if inserted is not None:
            return Written(Outcome.SAVED, slug, inserted)
        row = conn.execute(
            "SELECT rev, deleted_at IS NOT NULL, label, content FROM memories "
            "WHERE team = thatch_team() AND store = %s AND slug = %s FOR UPDATE",
            (store, slug),
        ).fetchone()
        assert row is not None  # the insert met it, and rows are only purged, never
        rev, deleted = int(row[0]), bool(row[1])  # deleted, while locked by a conflict
        same = not deleted and (row[2], row[3]) == (values["label"], values["content"])
        if same and base_rev != rev:
            # The writer holds what the row says already (two machines joining with the
            # same memories, a personal store synced from both): nothing to keep aside.
            # Saved at the row's revision, which the writer then bases its edits on.
            return Written(Outcome.SAVED, slug, rev)
        if (deleted and base_rev in (None, rev)) or (not deleted and base_rev == rev):
            # The writer saw this revision (the tombstone included: a label forgotten and
            # saved again, which became a new conflict version at every later edit), or
            # recreates a label deleted before it knew of it: the row is theirs to replace.
            # An edit keeps what it does not set; a recreated label starts afresh.
            kept = "COALESCE(%({0})s, {0})" if not deleted else "%({0})s"
            conn.execute(
                "UPDATE memories SET label = %(label)s, content = %(content)s, "
                "embedding = %(half)s::halfvec, vector = %(exact)s, model = %(model)s, "
                f"branch = {kept.format('branch')}, "
                f"confidence = {kept.format('confidence')}, "
                f"archived = COALESCE({kept.format('archived')}, false), "
                "updated_at = %(now)s, deleted_at = NULL, rev = rev + 1, "
                # A recreated label is no conflict version any more.
                f"conflict_of = {'NULL' if deleted else 'conflict_of'} "
                "WHERE team = thatch_team() AND store = %(store)s AND slug = %(slug)s",
                {**values, "slug": slug},
            )
            return Written(Outcome.SAVED, slug, rev + 1)
        return self._keep_aside(conn, values, slug)

    @staticmethod
    def _keep_aside(conn: Connection[TupleRow], values: dict[str, Any], slug: str) -> Written:
        """Insert the write as a conflict version of ``slug``: label ``<label> (conflict
        <n>)``, the first n ≥ 2 whose slug is free (tombstones and memories saved under
        such a label included), ``conflict_of = slug``. Its own label and that label's
        slug make it an ordinary memory on every machine: recalled, edited and forgotten
        by that label (docs/team.md §conflicts)."""
        number = 2
        while True:
            label = f"{values['label']} (conflict {number})"
            version = slugify(label)
            row = {**values, "label": label, "slug": version, "conflict_of": slug}
            aside = HubMemories._insert(conn, row)
            if aside is not None:
                return Written(Outcome.CONFLICT, version, aside)
            number += 1

    @staticmethod
    def _insert(conn: Connection[TupleRow], values: dict[str, Any]) -> int | None:
        """Insert a new row; its revision, or None when the slug is taken."""
        row = conn.execute(
            "INSERT INTO memories (team, store, slug, label, content, embedding, vector, "
            "model, branch, confidence, archived, conflict_of, created_at, updated_at) "
            "VALUES (thatch_team(), %(store)s, %(slug)s, %(label)s, %(content)s, "
            "%(half)s::halfvec, %(exact)s, %(model)s, %(branch)s, %(confidence)s, "
            "COALESCE(%(archived)s, false), %(conflict_of)s, %(now)s, %(now)s) "
            "ON CONFLICT (team, store, slug) DO NOTHING RETURNING rev",
            values,
        ).fetchone()
        return None if row is None else int(row[0])

    def forget(self, store: str, label: str) -> Memory | None:
        """Tombstone the memory: text and vectors cleared, ``deleted_at`` set, a new feed
        position. The memory as it was, or None when there was none."""
        return self.tombstone(store, label)[0]

    def tombstone(self, store: str, label: str) -> tuple[Memory | None, int | None]:
        """``forget``, and the tombstone's ``rev`` (None: there was no such label). A push
        acks it, so that the machine bases a later save of the label on the tombstone."""
        slug = slugify(label)
        with as_member(self.conn, self.who) as conn:
            row = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.team = thatch_team() "
                "AND m.store = %s AND m.slug = %s AND m.deleted_at IS NULL FOR UPDATE",
                (store, slug),
            ).fetchone()
            if row is None:
                # Forgotten already (a replayed forget carries no write id): the same ack,
                # the tombstone's rev, as the first.
                gone = conn.execute(
                    "SELECT rev FROM memories WHERE team = thatch_team() AND store = %s "
                    "AND slug = %s AND deleted_at IS NOT NULL",
                    (store, slug),
                ).fetchone()
                return None, None if gone is None else int(gone[0])
            updated = conn.execute(
                "UPDATE memories SET content = '', embedding = NULL, vector = NULL, "
                "deleted_at = %s, rev = rev + 1 "
                "WHERE team = thatch_team() AND store = %s AND slug = %s RETURNING rev",
                (self.clock(), store, slug),
            ).fetchone()
        assert updated is not None  # the row was locked above
        return memory_from_hub_row(row), int(updated[0])

    def purge_tombstones(self, before: datetime) -> int:
        """Remove tombstones (and their recall events) deleted before ``before``, and move
        the team's purge horizon past them (``feed``: older cursors must re-pull); forget
        the ids of writes applied before it (a machine offline that long is reset)."""
        with as_member(self.conn, self.who) as conn:
            conn.execute(
                "DELETE FROM applied_writes WHERE team = thatch_team() AND at < %s", (before,)
            )
            gone = conn.execute(
                "DELETE FROM memories WHERE team = thatch_team() AND deleted_at < %s "
                "RETURNING store, slug, txid::text, seq",
                (before,),
            ).fetchall()
            if gone:
                conn.execute(
                    "DELETE FROM recall_events e USING unnest(%s::text[], %s::text[]) "
                    "AS g(store, slug) WHERE e.team = thatch_team() "
                    "AND e.store = g.store AND e.slug = g.slug",
                    ([row[0] for row in gone], [row[1] for row in gone]),
                )
                txid, seq = max((int(row[2]), int(row[3])) for row in gone)
                conn.execute(
                    "UPDATE teams SET purged_txid = %s::text::xid8, purged_seq = %s "
                    "WHERE id = thatch_team() AND (purged_txid, purged_seq) < (%s::text::xid8, %s)",
                    (str(txid), seq, str(txid), seq),
                )
        if gone:
            self._restamp_below_horizon()
        return len(gone)

    def _restamp_below_horizon(self) -> None:
        """Give every row still below the purge horizon a new feed position (the stamp
        trigger, same values and revision), so that none stays below it: a machine
        pulling from the start then never holds a cursor under the horizon between two
        pages, which the feed would take for a stale one and reset, page after page.
        In a transaction of its own, begun after the purge committed: its txid is newer
        than every purged tombstone's, so the new positions are above the horizon.
        Machines pull those rows once more (unchanged); a stale one is still reset."""
        with as_member(self.conn, self.who) as conn:
            conn.execute(
                "UPDATE memories m SET seq = m.seq FROM teams t WHERE m.team = thatch_team() "
                "AND t.id = thatch_team() AND (m.txid, m.seq) < (t.purged_txid, t.purged_seq)"
            )

    # -- reads

    def list(self, store: str) -> list[Memory]:
        """Every live memory of the store, archived included, by label (byte order)."""
        with as_member(self.conn, self.who) as conn:
            rows = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.team = thatch_team() "
                "AND m.store = %s AND m.deleted_at IS NULL "
                'ORDER BY m.label COLLATE "C", m.slug COLLATE "C"',
                (store,),
            )
            return [memory_from_hub_row(row) for row in rows]

    def show(self, store: str, label: str) -> Memory | None:
        with as_member(self.conn, self.who) as conn:
            row = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.team = thatch_team() "
                "AND m.store = %s AND m.slug = %s AND m.deleted_at IS NULL",
                (store, slugify(label)),
            ).fetchone()
            return None if row is None else memory_from_hub_row(row)

    def revision(self, store: str, label: str) -> int | None:
        """The live memory's revision (what a writer passes as ``base_rev``), or None."""
        with as_member(self.conn, self.who) as conn:
            row = conn.execute(
                "SELECT rev FROM memories WHERE team = thatch_team() AND store = %s "
                "AND slug = %s AND deleted_at IS NULL",
                (store, slugify(label)),
            ).fetchone()
            return None if row is None else int(row[0])

    # -- ranking

    def search(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> builtins.list[Match]:
        """Best matches over the stores, ties by (store, slug), as the SQLite ``Store``
        ranks them. Records no usage. ``text`` is accepted and not yet used: PostgreSQL
        has no counterpart of the local lexical lift yet (docs/team.md §vectors).

        Up to ``exact_scan_max`` live memories in the stores asked, PostgreSQL screens by
        an exact halfvec scan: every row within ``HALF_MARGIN`` of the limit-th screened
        score comes back with its exact float32 vector, and ``scoring.exact_scores`` (the
        local store's own) decides in float64: the local answer. Above it, the HNSW index
        screens (``_hnsw_screen``), and the exact scan answers whenever its guard doubts.
        """
        query = as_vector(vector)
        names = store_list(stores)
        if limit <= 0 or query.size != DIMENSION:
            return []
        norm = float(np.linalg.norm(query.astype(np.float64)))
        if norm == 0.0:
            return []
        params = {
            "q": _halfvec(query.astype(np.float64) / norm),
            "stores": names,
            "archived": include_archived,
            "branch": branch,
            "limit": limit,
            "margin": HALF_MARGIN,
        }
        with as_member(self.conn, self.who) as conn:
            # None: the server's pgvector cannot walk the index as the screen needs
            # (schema.vector_problem), so every search scans exactly: slower, never wrong.
            most = self.exact_scan_max
            if most is not None and self._live_over(conn, names, most):
                found = self._hnsw_screen(conn, params, query, limit)
                self.screens["hnsw" if found is not None else "hnsw fell back"] += 1
                if found is not None:
                    return found
            else:
                self.screens["exact"] += 1
            rows = conn.execute(
                f"""WITH screened AS (
  SELECT store, slug, -(embedding <#> %(q)s::halfvec) AS screen FROM memories
  WHERE {_SCREEN_FILTER}
), cut AS (
  SELECT screen FROM screened ORDER BY screen DESC OFFSET %(limit)s - 1 LIMIT 1
)
SELECT {MEMORY_COLUMNS}, m.vector FROM screened s
JOIN memories m ON m.team = thatch_team() AND m.store = s.store AND m.slug = s.slug
WHERE s.screen >= COALESCE((SELECT screen FROM cut), '-Infinity') - %(margin)s""",
                params,
            ).fetchall()
        if not rows:
            return []
        scores = exact_scores([bytes(row[-1]) for row in rows], query)
        found = [
            Match(memory_from_hub_row(row), float(score))
            for row, score in zip(rows, scores, strict=True)
        ]
        found.sort(key=lambda match: (-match.score, match.memory.store, match.memory.slug))
        return found[:limit]

    @staticmethod
    def _live_over(conn: Connection[TupleRow], names: builtins.list[str], most: int) -> bool:
        """Whether the stores hold more than ``most`` live memories with a vector; counts
        at most ``most`` + 1 entries of m008's ``memories_live_vectors`` (an index-only
        scan), so a large store costs no more than the threshold."""
        row = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memories WHERE team = thatch_team() "
            "AND store = ANY(%s) AND deleted_at IS NULL AND embedding IS NOT NULL "
            "LIMIT %s) AS live",
            (names, most + 1),
        ).fetchone()
        return row is not None and int(row[0]) > most

    def _hnsw_screen(
        self,
        conn: Connection[TupleRow],
        params: dict[str, Any],
        query: np.ndarray[Any, Any],
        limit: int,
    ) -> builtins.list[Match] | None:
        """The matches through the HNSW index (m008), or None when the guard doubts them.

        The index returns limit + ``HNSW_OVERFETCH`` rows in approximate halfvec order
        (``relaxed_order`` iterative scan: it keeps walking the graph until that many rows
        pass the team, store and other filters), rescored in float64 as the exact path
        does. The guard, for a missed neighbourhood (the graph search converging on the
        wrong region, seen at 10,000 near-copies): fewer rows than asked (the walk gave
        up: ``hnsw.max_scan_tuples``), or a row of the store's fixed sample (slug hash
        mod ``SAMPLE_EVERY``, about one in 64, whatever its vector) outside the candidates
        scoring at least the limit-th match: either proves or risks a wrong answer, so
        the caller scans exactly.
        """
        wanted = limit + HNSW_OVERFETCH
        conn.execute(HNSW_SETTINGS, (str(min(max(HNSW_EF_SEARCH, wanted), HNSW_EF_MAX)),))
        rows = conn.execute(HNSW_SCREEN, {**params, "rows": wanted}).fetchall()
        if len(rows) < wanted:
            return None
        return self._guarded(conn, params, query, limit, rows)

    @staticmethod
    def _guarded(
        conn: Connection[TupleRow],
        params: dict[str, Any],
        query: np.ndarray[Any, Any],
        limit: int,
        rows: Sequence[Sequence[Any]],
    ) -> builtins.list[Match] | None:
        """The screen's candidate ``rows`` (store, slug, float32 vector) rescored and cut
        to ``limit``, or None when a sampled row outside them scores at least the
        limit-th (the index missed part of the answer)."""
        scores = exact_scores([bytes(row[2]) for row in rows], query)
        ranked = sorted(
            (
                (score, str(row[0]), str(row[1]))
                for score, row in zip(scores.tolist(), rows, strict=True)
            ),
            key=lambda found: (-found[0], found[1], found[2]),
        )[:limit]
        kth = ranked[-1][0]
        candidates = {(str(row[0]), str(row[1])) for row in rows}
        # From m008's sample index alone (it holds the embedding): the sampled rows whose
        # halfvec score could hide an exact one at the k-th's or above.
        sampled = conn.execute(
            f"""SELECT store, slug FROM memories
WHERE {_SCREEN_FILTER} AND {SAMPLE_PREDICATE}
  AND -(embedding <#> %(q)s::halfvec) >= %(kth)s - %(margin)s""",
            {**params, "kth": kth},
        ).fetchall()
        outside = [(str(r[0]), str(r[1])) for r in sampled if (r[0], r[1]) not in candidates]
        if outside:
            vectors = conn.execute(
                "SELECT m.vector FROM memories m "
                "JOIN unnest(%s::text[], %s::text[]) AS w(store, slug) "
                "ON m.team = thatch_team() AND m.store = w.store AND m.slug = w.slug",
                ([store for store, _ in outside], [slug for _, slug in outside]),
            ).fetchall()
            if len(vectors) != len(outside):
                return None  # a sampled row changed since: let one statement answer
            if float(exact_scores([bytes(row[0]) for row in vectors], query).max()) >= kth:
                return None
        screened = {(str(row[0]), str(row[1])): bytes(row[2]) for row in rows}
        full = {
            (str(row[1]), str(row[0])): row
            for row in conn.execute(
                f"SELECT {MEMORY_COLUMNS}, m.vector FROM memories m "
                "JOIN unnest(%s::text[], %s::text[]) AS w(store, slug) "
                "ON m.team = thatch_team() AND m.store = w.store AND m.slug = w.slug "
                "AND m.deleted_at IS NULL",
                ([found[1] for found in ranked], [found[2] for found in ranked]),
            )
        }
        # Each statement of this transaction sees the rows committed when it starts: a
        # match forgotten or rewritten since the screen would carry a score its row no
        # longer has, so the exact scan (one statement) answers instead.
        if any(
            key not in full or bytes(full[key][-1]) != screened[key]
            for key in ((store, slug) for _, store, slug in ranked)
        ):
            return None
        return [
            Match(memory_from_hub_row(full[(store, slug)]), float(score))
            for score, store, slug in ranked
        ]

    def recall(
        self,
        stores: Sequence[str],
        vector: Any,
        *,
        text: str | None = None,
        branch: str | None = None,
        limit: int = 10,
        include_archived: bool = False,
        floor: float | None = None,
    ) -> builtins.list[Match]:
        """``search`` (scores below ``floor`` dropped), then one recall event per match."""
        matches = self.search(
            stores,
            vector,
            text=text,
            branch=branch,
            limit=limit,
            include_archived=include_archived,
        )
        if floor is not None:
            matches = [match for match in matches if match.score >= floor]
        self.stamp_recalls(matches)
        return matches

    def stamp_recalls(self, matches: Sequence[Match], at: str | None = None) -> None:
        """Append a recall event per match (the member is stamped by trigger); ``at`` is
        a store timestamp, default now."""
        if not matches:
            return
        when: Any = self.clock() if at is None else at
        with as_member(self.conn, self.who) as conn, conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO recall_events (team, store, slug, at) "
                "VALUES (thatch_team(), %s, %s, %s)",
                [(match.memory.store, match.memory.slug, when) for match in matches],
            )

    def record_recall_events(self, events: Sequence[tuple[str, str, datetime]]) -> int:
        """Append a recall event per (store, slug, at) naming a live memory of the team
        (a machine's recalls on its replica); events naming nothing are dropped. How
        many were recorded."""
        if not events:
            return 0
        with as_member(self.conn, self.who) as conn:
            done = conn.execute(
                "INSERT INTO recall_events (team, store, slug, at) "
                "SELECT thatch_team(), e.store, e.slug, e.at "
                "FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) AS e(store, slug, at) "
                "JOIN memories m ON m.team = thatch_team() AND m.store = e.store "
                "AND m.slug = e.slug AND m.deleted_at IS NULL",
                (
                    [event[0] for event in events],
                    [event[1] for event in events],
                    [event[2] for event in events],
                ),
            )
            return max(done.rowcount, 0)


if TYPE_CHECKING:  # both implement the shared part (mypy checks it here)
    from thatch.frontend.store.memory_store import Store

    def _both_share(local: Store, hub: HubMemories) -> tuple[SharedOperations, SharedOperations]:
        return local, hub
