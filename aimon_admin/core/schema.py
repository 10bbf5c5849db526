"""OpenAPI schema hooks (drf-spectacular)."""

from __future__ import annotations

from typing import Any


def strip_optional_trailing_slash(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Show API paths as API.md writes them: without the optional trailing slash."""
    result["paths"] = {
        (path.rstrip("/") if path.startswith("/api/v1/") else path): item
        for path, item in result.get("paths", {}).items()
    }
    return result
