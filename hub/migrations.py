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
    "CHAT_MAX_BODY",
    "TABLES",
    "m001_tables",
    "m002_row_security",
    "m003_stamps_and_auth",
    "m004_purge_horizon",
    "m005_applied_writes",
    "m006_hub_reads_migrations",
    "m007_chat",
    "m008_hnsw_screen",
    "m009_chat_peers_of_live_members",
    "m010_write_ids_per_member",
]

# Every table the migrations make; each has row-level security and one ``team_rows`` policy.
TABLES = (
    "teams",
    "members",
    "stores",
    "memories",
    "recall_events",
    "applied_writes",
    "chat_peers",
    "chat_mail",
)

DIMENSION = 384  # the pinned model's (docs/team.md §vectors)

# The rows of a store in the HNSW guard's fixed sample (hub/memories.py ``_hnsw_screen``):
# about one in 64, by slug hash, whatever their vectors. m008's partial index and the
# guard's query must spell it alike for the planner to use the index.
SCREEN_SAMPLE = "(hashtext(slug) & 63) = 0"


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


# The longest chat body the hub stores (docs/chat.md §4, THATCH_CHAT_MAX_BODY_CHARS's default).
CHAT_MAX_BODY = 20_000


def m007_chat(conn: Connection[TupleRow], role: str) -> None:
    """Chat across machines (docs/team.md §chat-across-machines): the sessions machines
    publish (``chat_peers``) and the mail between them (``chat_mail``).

    Who a row speaks for is stamped by trigger, never taken from the client: a peer's
    ``member`` and its team-unique ``display_name`` (``<local name>@<member>``, ``#<n>``
    on a collision), a mail's sender (member, name, peer) from the sender's own peer row
    and its recipient from the addressed peer. Every team member sees the team's peers,
    but changes only its own; a mail is visible to its sender's and recipient's member
    only, and only the recipient may mark it delivered.
    """
    _run(
        conn,
        f"""CREATE TABLE chat_peers (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  team text NOT NULL REFERENCES teams (id),
  member text NOT NULL DEFAULT '',
  machine text NOT NULL CHECK (machine ~ '^[A-Za-z0-9_.:-]+$' AND length(machine) <= 64),
  session_key text NOT NULL
    CHECK (session_key ~ '^[0-9a-f]+$' AND length(session_key) BETWEEN 16 AND 64),
  local_name text NOT NULL CHECK (local_name ~ '^[a-z]+-[0-9]+$' AND length(local_name) <= 32),
  display_name text NOT NULL DEFAULT '',
  topic text CHECK (length(topic) <= 80),
  project text NOT NULL CHECK (length(project) BETWEEN 1 AND 200),
  last_seen timestamptz NOT NULL,
  UNIQUE (team, member, machine, session_key)
);

CREATE UNIQUE INDEX chat_peers_name ON chat_peers (team, lower(display_name));

CREATE TABLE chat_mail (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  team text NOT NULL REFERENCES teams (id),
  client_id text NOT NULL CHECK (length(client_id) BETWEEN 1 AND 200),
  from_member text NOT NULL DEFAULT '',
  from_machine text NOT NULL,
  from_key text NOT NULL,
  from_peer bigint,
  from_name text NOT NULL DEFAULT '',
  to_peer bigint NOT NULL,
  to_member text NOT NULL DEFAULT '',
  to_machine text NOT NULL DEFAULT '',
  to_key text NOT NULL DEFAULT '',
  to_name text NOT NULL DEFAULT '',
  body text NOT NULL CHECK (body <> '' AND length(body) <= {CHAT_MAX_BODY}),
  via_broadcast boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  delivered_at timestamptz,
  UNIQUE (team, from_member, client_id)
);

CREATE INDEX chat_mail_inbox ON chat_mail (team, to_member, to_machine, id)
  WHERE delivered_at IS NULL;

CREATE INDEX chat_mail_created ON chat_mail (team, created_at);

CREATE FUNCTION thatch_stamp_chat_peer() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  base text;
  candidate text;
  n integer := 1;
BEGIN
  IF thatch_member() IS NULL THEN
    RAISE EXCEPTION 'no member set for this transaction: the hub stamps every write'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF TG_OP = 'DELETE' THEN
    IF OLD.member <> thatch_member() THEN
      RAISE EXCEPTION 'a member removes only its own chat sessions'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    NEW.member := OLD.member;
    NEW.display_name := OLD.display_name;
    NEW.local_name := OLD.local_name;
    RETURN NEW;
  END IF;
  NEW.member := thatch_member();
  -- One name assignment at a time per team: two machines publishing at once never
  -- both take the same free name.
  PERFORM pg_advisory_xact_lock(hashtextextended('thatch chat names ' || NEW.team, 0));
  -- A member id is the operator's text: in a name it keeps only plain characters, so a
  -- name is always one plain word wherever it is printed.
  base := NEW.local_name || '@'
    || left(regexp_replace(NEW.member, '[^A-Za-z0-9_.-]', '-', 'g'), 64);
  candidate := base;
  WHILE EXISTS (SELECT 1 FROM chat_peers p
                WHERE p.team = NEW.team AND lower(p.display_name) = lower(candidate)) LOOP
    n := n + 1;
    candidate := base || '#' || n;
  END LOOP;
  NEW.display_name := candidate;
  RETURN NEW;
END $$;

CREATE TRIGGER stamp BEFORE INSERT OR UPDATE OR DELETE ON chat_peers
  FOR EACH ROW EXECUTE FUNCTION thatch_stamp_chat_peer();

CREATE FUNCTION thatch_stamp_chat_mail() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  sender chat_peers%ROWTYPE;
  recipient chat_peers%ROWTYPE;
BEGIN
  IF thatch_member() IS NULL THEN
    RAISE EXCEPTION 'no member set for this transaction: the hub stamps every write'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF TG_OP = 'UPDATE' THEN
    IF OLD.to_member <> thatch_member() THEN
      RAISE EXCEPTION 'only its recipient marks a chat mail delivered'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
  END IF;
  NEW.from_member := thatch_member();
  SELECT * INTO sender FROM chat_peers p WHERE p.team = NEW.team
    AND p.member = NEW.from_member AND p.machine = NEW.from_machine
    AND p.session_key = NEW.from_key;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'the sending session is not published by this member'
      USING ERRCODE = 'foreign_key_violation';
  END IF;
  SELECT * INTO recipient FROM chat_peers p WHERE p.team = NEW.team AND p.id = NEW.to_peer;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no such chat session in this team' USING ERRCODE = 'foreign_key_violation';
  END IF;
  NEW.from_peer := sender.id;
  NEW.from_name := sender.display_name;
  NEW.to_member := recipient.member;
  NEW.to_machine := recipient.machine;
  NEW.to_key := recipient.session_key;
  NEW.to_name := recipient.display_name;
  NEW.delivered_at := NULL;
  RETURN NEW;
END $$;

CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON chat_mail
  FOR EACH ROW EXECUTE FUNCTION thatch_stamp_chat_mail();

ALTER TABLE chat_peers ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON chat_peers
  USING (team = thatch_team())
  WITH CHECK (team = thatch_team() AND member = thatch_member());

ALTER TABLE chat_mail ENABLE ROW LEVEL SECURITY;

CREATE POLICY team_rows ON chat_mail
  USING (team = thatch_team()
         AND (to_member = thatch_member() OR from_member = thatch_member()))
  WITH CHECK (team = thatch_team()
              AND (to_member = thatch_member() OR from_member = thatch_member()));

GRANT SELECT, INSERT, UPDATE (topic, project, last_seen), DELETE ON chat_peers TO {{role}};

GRANT SELECT, INSERT, UPDATE (delivered_at), DELETE ON chat_mail TO {{role}}""",
        role,
    )


def m008_hnsw_screen(conn: Connection[TupleRow], role: str) -> None:
    """The HNSW index that screens recall in stores over ``EXACT_SCAN_MAX`` memories, a
    partial index counting a store's live memories with a vector up to that threshold
    without reading the table, and the guard's sample, read from the index alone
    (docs/team.md §vectors).

    One index over every team's rows: the search's team and store filters apply during
    the graph walk (``hnsw.iterative_scan``). ``IF NOT EXISTS``: on a large table an
    operator builds both ``CONCURRENTLY`` under these names first (docs/deploy.md), so
    this transaction does not block writes while they are built.
    """
    _run(
        conn,
        f"""CREATE INDEX IF NOT EXISTS memories_embedding_hnsw ON memories
  USING hnsw (embedding halfvec_ip_ops) WITH (m = 16, ef_construction = 64);

CREATE INDEX IF NOT EXISTS memories_live_vectors ON memories (team, store)
  WHERE deleted_at IS NULL AND embedding IS NOT NULL;

CREATE INDEX IF NOT EXISTS memories_screen_sample ON memories (team, store)
  INCLUDE (slug, embedding, archived, branch)
  WHERE {SCREEN_SAMPLE} AND deleted_at IS NULL AND embedding IS NOT NULL""",
        role,
    )


def m009_chat_peers_of_live_members(conn: Connection[TupleRow], role: str) -> None:
    """Only a live member publishes chat sessions. A request authenticates in one
    transaction and publishes in the next, so a publish that authenticated before
    ``hub member revoke`` could put back the sessions the revoke removed, listed for a
    week. The check takes a share lock on the member's row: a revoke in progress waits
    for such a publish and then removes its rows, or the publish waits for the revoke
    and is refused. Definer's rights: the hub's role cannot read ``members``."""
    _run(
        conn,
        """CREATE FUNCTION thatch_member_is_live(member_team text, member_id text)
  RETURNS boolean LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
  AS $$ SELECT EXISTS (SELECT 1 FROM public.members m WHERE m.team = member_team
        AND m.id = member_id AND m.revoked_at IS NULL FOR SHARE) $$;

REVOKE ALL ON FUNCTION thatch_member_is_live(text, text) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION thatch_member_is_live(text, text) TO {role};

CREATE FUNCTION thatch_chat_peer_member_live() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT thatch_member_is_live(NEW.team, thatch_member()) THEN
    RAISE EXCEPTION 'the member is revoked: a revoked member publishes no chat session'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER live_member BEFORE INSERT OR UPDATE ON chat_peers
  FOR EACH ROW EXECUTE FUNCTION thatch_chat_peer_member_live()""",
        role,
    )


def m010_write_ids_per_member(conn: Connection[TupleRow], role: str) -> None:
    """A write id is claimed by the member pushing it: keyed by team and id alone, another
    member who pushed an id first (ids are ``<machine>:<outbox row>``, and the chat shows
    every machine's id to the team) made the owner's later push of it "already applied",
    and the owner's machine dropped the write from its outbox. Rows from before keep
    ``member = ''`` and still answer their id's retry until they expire."""
    _run(
        conn,
        """ALTER TABLE applied_writes ADD COLUMN member text NOT NULL DEFAULT '';

ALTER TABLE applied_writes DROP CONSTRAINT applied_writes_pkey;

ALTER TABLE applied_writes ADD PRIMARY KEY (team, member, id)""",
        role,
    )
