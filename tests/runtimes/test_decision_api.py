"""The decision endpoints answer their errors as every API view does (docs/api.md "Basics"):
DRF views, the skill decision with its lazy (fused) authentication included."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

DECISIONS = ["/api/v1/skill-decisions", "/api/v1/tool-decisions"]
VALID = {"/api/v1/skill-decisions": {"skills": ["deploy"]}, "/api/v1/tool-decisions": {"tool": "read"}}

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", DECISIONS)
def test_no_token_is_401_with_the_challenge(path: str) -> None:
    response = APIClient().post(path, VALID[path], format="json")
    assert response.status_code == 401
    assert response.json() == {
        "error": "not_authenticated",
        "detail": "Authentication credentials were not provided.",
    }
    assert response["WWW-Authenticate"] == 'Bearer realm="aimon"'


@pytest.mark.parametrize("path", DECISIONS)
def test_a_bad_token_is_401_and_never_a_decision(path: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer aimon_not-a-real-token-at-all-000000000000")
    response = client.post(path, VALID[path], format="json")
    assert response.status_code == 401
    assert "decision" not in response.content.decode()
    assert response["WWW-Authenticate"] == 'Bearer realm="aimon"'


@pytest.mark.parametrize("path", DECISIONS)
def test_the_wrong_method_is_405_naming_the_allowed_one(api: APIClient, path: str) -> None:
    response = api.get(path)
    assert (response.status_code, response.json()) == (
        405,
        {"error": "method_not_allowed", "detail": 'Method "GET" not allowed.'},
    )
    assert set(response["Allow"].split(", ")) == {"POST", "OPTIONS"}


@pytest.mark.parametrize("path", DECISIONS)
@pytest.mark.parametrize(
    ("raw", "content_type", "status", "detail"),
    [
        ("x=1", "text/plain", 415, 'Unsupported media type "text/plain" in request.'),
        ("{not json", "application/json", 400, "JSON parse error - Expecting property name"),
        ('{"skills": NaN}', "application/json", 400, "JSON parse error - Out of range float values"),
        ("[" * 100_000 + "]" * 100_000, "application/json", 400, "JSON parse error - nested too deeply."),
    ],
)
def test_bodies_are_read_as_drfs_json_parser_reads_them(
    api: APIClient, path: str, raw: str, content_type: str, status: int, detail: str
) -> None:
    response = api.generic("POST", path, raw, content_type=content_type)
    assert response.status_code == status
    assert response.json()["detail"].startswith(detail)


@pytest.mark.parametrize("path", DECISIONS)
def test_no_body_is_an_empty_object_whose_missing_field_is_named(api: APIClient, path: str) -> None:
    response = api.generic("POST", path, "", content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert list(body["fields"]) == [next(iter(VALID[path]))]


@pytest.mark.parametrize("path", DECISIONS)
def test_a_valid_call_answers_json(api: APIClient, path: str) -> None:
    response = api.post(path, VALID[path], format="json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content)


@pytest.mark.parametrize("fused_read", [True, False])
@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ('{"skills": ["deploy"], "session_id": "s-1"}', 200),
        ('{"skills": []}', 400),
        ('{"skills": ["deploy"], "sesion_id": "s-1"}', 400),
        ("{not json", 400),
        ("null", 400),
    ],
)
def test_the_fused_and_the_two_step_skill_views_answer_alike(
    runtime_token: str, fused_read: bool, raw: str, status: int
) -> None:
    # The fused read is lazy authentication: with it or without it (benchmarks/urls.py's
    # two-step route), the same body gets the same answer, and no token is always a 401.
    from rest_framework.test import APIRequestFactory

    from aimon_admin.approvals.api.decisions import SkillDecisionsView

    view = SkillDecisionsView.as_view(fused_read=fused_read)
    factory = APIRequestFactory()
    path = "/api/v1/skill-decisions"
    signed = factory.generic(
        "POST", path, raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {runtime_token}"
    )
    response = view(signed)
    response.render()
    expected = APIClient().generic(
        "POST", path, raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {runtime_token}"
    )
    assert (response.status_code, json.loads(response.content)) == (status, expected.json())
    anonymous = view(factory.generic("POST", path, raw, content_type="application/json"))
    anonymous.render()
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == 'Bearer realm="aimon"'
