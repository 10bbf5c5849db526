"""How the runtime token appears in the OpenAPI schema (drf-spectacular extension)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class RuntimeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "aimon_admin.runtimes.authentication.RuntimeTokenAuthentication"
    name = "RuntimeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A runtime token: Authorization: Bearer aimon_…",
        }
