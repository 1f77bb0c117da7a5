"""The hub's migrations (docs/team.md §schema), in order; ``schema`` records and applies them.

Each migration is a function of (connection, the hub's role) run by the owner inside one
transaction. The hub's role gets only the grants named here, and row-level security
applies to it on every table: a transaction sees and writes the rows of the team it set
(``session.as_member``) and nothing when it set none.
"""

from __future__ import annotations

from psycopg import Connection, sql
from psycopg.rows import TupleRow

__all__ = [
    "TABLES",
    "m001_tables",
    "m002_row_security",
    "m003_stamps_and_auth",
    "m004_purge_horizon",
    "m005_applied_writes",
    "m006_hub_reads_migrations",
]

# Every table the migrations make; each has row-level security and one ``team_rows`` policy.
TABLES = ("teams", "members", "stores", "memories", "recall_events", "applied_writes")

DIMENSION = 384  # the pinned model's (docs/team.md §vectors)


def _run(conn: Connection[TupleRow], statements: str, role: str) -> None:
    """``statements`` with ``{role}`` as the quoted role name, one statement at a time."""
    for statement in statements.split(";\n\n"):
        if statement.strip():
            conn.execute(sql.SQL(statement).format(role=sql.Identifier(role)))


def m001_tables(conn: Connection[TupleRow], role: str) -> None:
    """Teams, members (tokens), stores, memories (with the feed position), recall events."""
    _run(
        conn,
        f"""CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE teams (
  id text PRIMARY KEY CHECK (id <> ''),
  name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members (
  team text NOT NULL REFERENCES teams (id),
  id text NOT NULL CHECK (id <> ''),
  token_sha256 bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz,
  PRIMARY KEY (team, id)
);

CREATE TABLE stores (
  team text NOT NULL REFERENCES teams (id),
  name text NOT NULL CHECK (name <> ''),
  PRIMARY KEY (team, name)
);

CREATE SEQUENCE memory_changes;

CREATE TABLE memories (
  team text NOT NULL,
  store text NOT NULL,
  slug text NOT NULL,
  label text NOT NULL,
  content text NOT NULL,
  embedding halfvec({DIMENSION}),
  vector bytea CHECK (vector IS NULL OR length(vector) = {DIMENSION * 4}),
  model text,
  branch text,
  confidence integer,
  archived boolean NOT NULL DEFAULT false,
  conflict_of text,
  rev bigint NOT NULL DEFAULT 1,
  author text NOT NULL DEFAULT '',
  updated_by text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  deleted_at timestamptz,
  txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  seq bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (team, store, slug),
  FOREIGN KEY (team, store) REFERENCES stores (team, name),
  CHECK ((embedding IS NULL) = (vector IS NULL))
);

CREATE INDEX memories_feed ON memories (team, txid, seq);

CREATE INDEX memories_tombstones ON memories (team, deleted_at) WHERE deleted_at IS NOT NULL;

CREATE TABLE recall_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  team text NOT NULL,
  store text NOT NULL,
  slug text NOT NULL,
  member text NOT NULL DEFAULT '',
  at timestamptz NOT NULL
);

CREATE INDEX recall_events_memory ON recall_events (team, store, slug);

GRANT SELECT ON teams TO {{role}};

GRANT SELECT, INSERT ON stores TO {{role}};

GRANT SELECT, INSERT, UPDATE, DELETE ON memories TO {{role}};

GRANT SELECT, INSERT, DELETE ON recall_events TO {{role}};

GRANT USAGE ON SEQUENCE memory_changes TO {{role}}""",
        role,
    )


def m002_row_security(conn: Connection[TupleRow], role: str) -> None:
    """Row-level security on every table: a transaction sees its own team's rows only."""
    _run(
        conn,
        """CREATE FUNCTION thatch_team() RETURNS text LANGUAGE sql STABLE
  AS $$ SELECT NULLIF(current_setting('thatch.team', true), '') $$;

CREATE FUNCTION thatch_member() RETURNS text LANGUAGE sql STABLE
  AS $$ SELECT NULLIF(current_setting('thatch.member', true), '') $$;

ALTER TABLE teams ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON teams USING (id = thatch_team()) WITH CHECK (id = thatch_team());

ALTER TABLE members ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON members
  USING (team = thatch_team()) WITH CHECK (team = thatch_team());

ALTER TABLE stores ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON stores
  USING (team = thatch_team()) WITH CHECK (team = thatch_team());

ALTER TABLE memories ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON memories
  USING (team = thatch_team()) WITH CHECK (team = thatch_team());

ALTER TABLE recall_events ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON recall_events
  USING (team = thatch_team()) WITH CHECK (team = thatch_team());

GRANT EXECUTE ON FUNCTION thatch_team(), thatch_member() TO {role}""",
        role,
    )


def m003_stamps_and_auth(conn: Connection[TupleRow], role: str) -> None:
    """The author and feed position stamped by trigger (never by the client), and the one
    way to read a token's team before a team is set (``thatch_authenticate``)."""
    _run(
        conn,
        """CREATE FUNCTION thatch_stamp_memory() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF thatch_member() IS NULL THEN
    RAISE EXCEPTION 'no member set for this transaction: the hub stamps every write'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF TG_OP = 'INSERT' THEN
    NEW.author := thatch_member();
  ELSE
    NEW.author := OLD.author;
  END IF;
  NEW.updated_by := thatch_member();
  NEW.txid := pg_current_xact_id();
  NEW.seq := nextval('memory_changes');
  RETURN NEW;
END $$;

CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON memories
  FOR EACH ROW EXECUTE FUNCTION thatch_stamp_memory();

CREATE FUNCTION thatch_stamp_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF thatch_member() IS NULL THEN
    RAISE EXCEPTION 'no member set for this transaction: the hub stamps every write'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  NEW.member := thatch_member();
  RETURN NEW;
END $$;

CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON recall_events
  FOR EACH ROW EXECUTE FUNCTION thatch_stamp_event();

CREATE FUNCTION thatch_authenticate(token bytea)
  RETURNS TABLE (team text, member text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
  AS $$ SELECT m.team, m.id FROM public.members m
        WHERE m.token_sha256 = token AND m.revoked_at IS NULL $$;

REVOKE ALL ON FUNCTION thatch_authenticate(bytea) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION thatch_authenticate(bytea) TO {role}""",
        role,
    )


def m004_purge_horizon(conn: Connection[TupleRow], role: str) -> None:
    """Where each team's feed was purged through: a cursor before it may have missed a
    purged tombstone, so its machine re-pulls (``feed.Page.reset``)."""
    _run(
        conn,
        """ALTER TABLE teams ADD COLUMN purged_txid xid8 NOT NULL DEFAULT '0';

ALTER TABLE teams ADD COLUMN purged_seq bigint NOT NULL DEFAULT 0;

GRANT UPDATE (purged_txid, purged_seq) ON teams TO {role}""",
        role,
    )


def m005_applied_writes(conn: Connection[TupleRow], role: str) -> None:
    """The writes already applied, by the id their machine gave them: a push retried after
    a lost acknowledgement gets the first outcome instead of a spurious conflict."""
    _run(
        conn,
        """CREATE TABLE applied_writes (
  team text NOT NULL,
  id text NOT NULL CHECK (id <> ''),
  outcome text,
  slug text,
  rev bigint,
  at timestamptz NOT NULL,
  PRIMARY KEY (team, id)
);

CREATE INDEX applied_writes_at ON applied_writes (team, at);

ALTER TABLE applied_writes ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON applied_writes
  USING (team = thatch_team()) WITH CHECK (team = thatch_team());

GRANT SELECT, INSERT, UPDATE, DELETE ON applied_writes TO {role}""",
        role,
    )


def m006_hub_reads_migrations(conn: Connection[TupleRow], role: str) -> None:
    """The hub reads which migrations are applied before it reports SERVING (``thatch hub
    serve``): a hub newer than its database says so instead of failing on every call."""
    _run(conn, "GRANT SELECT ON _thatch_migrations TO {role}", role)
