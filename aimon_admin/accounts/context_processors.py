"""The signed-in person's roles on every page, shown beside their name (the menu they see
is the project's: aimon_admin.navigation)."""

from __future__ import annotations

from django.http import HttpRequest


def roles(request: HttpRequest) -> dict[str, object]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"user_roles": user.roles if hasattr(user, "roles") else []}
