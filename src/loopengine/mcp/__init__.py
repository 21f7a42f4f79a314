"""MCP adapter: the client of agent.yaml's ``mcp_servers`` (the one place the ``mcp`` SDK is imported).

``client`` lists and calls tools over streamable HTTP; ``agents`` lists an agent's servers when a
turn starts (so the turn pins what it listed). The rules they serve live in
:mod:`loopengine.authoring.mcp`.
"""
