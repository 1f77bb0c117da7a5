"""``thatch ui``: a local web page over the shared database (docs/ui.md).

A frontend like the MCP server and the CLI: it opens the SQLite file through the Store,
embeds queries through the shared embedder, and runs every operation through the tool
layer. ``security`` guards the page (token, Host, CSRF), ``html`` renders, ``app`` routes,
``server`` binds and serves with uvicorn.
"""
