"""The team hub's side (docs/team.md): team stores on PostgreSQL with pgvector.

Installed as ``thatch.hub``, a layer above the frontend and below the CLI: it uses the
store's value types and scoring (one recall path), and no frontend imports it or psycopg
(docs/architecture.md §layers). Needs the ``team`` extra.
"""
