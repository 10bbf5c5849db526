"""The content security policy goes on pages, not on the runtime API's JSON."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

HEADER = "Content-Security-Policy"


def test_a_page_carries_the_policy(client: Client) -> None:
    page = client.get("/accounts/login/")

    assert page.status_code == 200
    assert "script-src 'self'" in page[HEADER]
    assert "frame-ancestors 'none'" in page[HEADER]


def test_the_api_docs_page_carries_the_policy(client: Client) -> None:
    assert HEADER in client.get("/api/docs/")


def test_the_json_api_carries_none(api: APIClient) -> None:  # decisions stay lean
    answered = api.post("/api/v1/skill-decisions", {"skills": ["deploy"]}, format="json")
    refused = APIClient().post("/api/v1/skill-decisions", {"skills": ["deploy"]}, format="json")

    assert answered.status_code == 200
    assert refused.status_code == 401
    assert HEADER not in answered
    assert HEADER not in refused


def test_an_unknown_page_still_carries_the_policy(client: Client) -> None:
    assert HEADER in client.get("/no-such-page/")
