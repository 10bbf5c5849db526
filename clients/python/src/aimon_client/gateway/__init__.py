"""The MCP gateway (G2): `aimon-gateway --config gateway.yaml`."""
