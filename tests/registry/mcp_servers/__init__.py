"""Real MCP servers, built with the official SDK, for the sync tests and the benchmark.

Each module runs over stdio (``python -m tests.registry.mcp_servers.<name> …``) and
offers ``build_server(…)`` so the same server can be served over streamable HTTP
in-process (`tests.registry.mcp_servers.http.serve_http`):

- ``catalog``: every combination of claims the sync must store verbatim, and a second
  variant of the definitions (drift), chosen by a file read on every ``tools/list``.
- ``paginated``: many well-formed tools across pages (pagination, the benchmark).
- ``hanging``: answers ``initialize`` but never ``tools/list`` (or never anything).
- ``misbehaving``: exits at once, answers errors or malformed listings, never stops
  paging, repeats its cursor, dies half-way.
"""
