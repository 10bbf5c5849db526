"""OpenAPI schema hooks (drf-spectacular)."""

from __future__ import annotations

from typing import Any

_SLASH_OPTIONAL = ("/api/v1/", "/access/v1/", "/.well-known/")


def strip_optional_trailing_slash(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Show API paths as docs/api.md writes them: without the optional trailing slash (the
    runtime API's and the AuthZEN endpoints')."""
    result["paths"] = {
        (path.rstrip("/") if path.startswith(_SLASH_OPTIONAL) else path): item
        for path, item in result.get("paths", {}).items()
    }
    return result
