"""The server form's free-text boxes have a limit: past it the form is shown again naming the
field, and nothing is saved."""

from __future__ import annotations

import pytest
from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.registry.forms import SERVER_ARGS_MAX, SERVER_SECRETS_MAX
from aimon_admin.registry.models import McpServer

pytestmark = pytest.mark.django_db

FORM = {"name": "wordy", "transport": "STDIO", "command": "npx", "timeout_seconds": "30", "enabled": "on"}


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("args", "a" * (SERVER_ARGS_MAX + 1), SERVER_ARGS_MAX),
        ("env", "K=" + "v" * SERVER_SECRETS_MAX, SERVER_SECRETS_MAX),
    ],
)
def test_a_box_past_its_limit_is_refused_naming_the_field(
    operator: User, field: str, value: str, limit: int
) -> None:
    client = Client()
    client.force_login(operator)
    response = client.post("/registry/servers/new/", {**FORM, field: value}, follow=True)
    assert response.redirect_chain[0][1] == 303  # back to the form (post/redirect/get)
    assert f"Ensure this value has at most {limit} characters" in response.content.decode()
    assert f'id="id_{field}_error"' in response.content.decode()
    assert not McpServer.objects.exists()
    saved = client.post("/registry/servers/new/", {**FORM, field: value[:limit]})
    assert saved.status_code == 302
