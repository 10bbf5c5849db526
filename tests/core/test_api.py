"""API error shapes (API.md "General"): JSON 4xx naming the field, 413, 401, 404, never 5xx."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory, force_authenticate

from aimon_admin.core.api import EnumField, NameField, OptionalIdField, StrictSerializer
from aimon_admin.registry.choices import SideEffectLevel
from aimon_admin.runtimes.authentication import RuntimeCaller

pytestmark = pytest.mark.django_db


class ExampleInput(StrictSerializer):
    skill = NameField()
    session_id = OptionalIdField()
    level = EnumField(SideEffectLevel.choices, required=False)


@api_view(["POST"])
def example_view(request: Request) -> Response:
    serializer = ExampleInput(data=request.data)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.validated_data)


@api_view(["GET"])
def database_down_view(request: Request) -> Response:
    raise OperationalError("connection refused")


def call(view, runtime_caller: RuntimeCaller, body: object) -> Response:  # type: ignore[no-untyped-def]
    request = APIRequestFactory().post("/api/v1/example", body, format="json")
    force_authenticate(request, user=runtime_caller, token=runtime_caller.token)
    return view(request)


@pytest.fixture
def caller(runtime, runtime_token) -> RuntimeCaller:  # type: ignore[no-untyped-def]
    from aimon_admin.runtimes.models import RuntimeToken

    return RuntimeCaller(runtime=runtime, token=RuntimeToken.objects.get(runtime=runtime))


def test_valid_input_passes(caller: RuntimeCaller) -> None:
    response = call(example_view, caller, {"skill": "deploy", "session_id": "s-1", "level": "READ_ONLY"})
    assert response.status_code == 200
    assert response.data == {"skill": "deploy", "session_id": "s-1", "level": "READ_ONLY"}


def test_a_misspelt_field_is_400_naming_it_never_read_as_absent(caller: RuntimeCaller) -> None:
    response = call(example_view, caller, {"skill": "deploy", "sesion_id": "s-1"})
    assert response.status_code == 400
    assert response.data == {
        "error": "invalid",
        "detail": "Invalid input: sesion_id.",
        "fields": {"sesion_id": ["Unknown field. Allowed fields: level, session_id, skill."]},
    }


def test_an_unknown_enum_value_is_400_naming_the_allowed_values(caller: RuntimeCaller) -> None:
    response = call(example_view, caller, {"skill": "deploy", "level": "read_only"})
    assert response.status_code == 400
    assert response.data["fields"] == {
        "level": ['"read_only" is not a valid value. Allowed values: READ_ONLY, MUTATING.']
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"skill": ""}, "skill"),
        ({"skill": "x" * 201}, "skill"),
        ({"skill": "bad\nname"}, "skill"),
        ({"skill": "bad\x00name"}, "skill"),
        ({"skill": 7}, "skill"),
        ({"skill": None}, "skill"),
        ({"skill": ["a"]}, "skill"),
        ({"skill": "ok", "session_id": ""}, "session_id"),
        ({"skill": "ok", "session_id": "s" * 201}, "session_id"),
        ({"skill": "ok", "session_id": 12}, "session_id"),
        ({"skill": "ok", "session_id": {"a": 1}}, "session_id"),
        ({}, "skill"),
    ],
)
def test_bad_names_and_ids_are_400_naming_the_field(caller: RuntimeCaller, body: dict, field: str) -> None:
    response = call(example_view, caller, body)
    assert response.status_code == 400
    assert list(response.data["fields"]) == [field]
    assert response.data["error"] == "invalid"


def test_a_null_session_id_is_allowed(caller: RuntimeCaller) -> None:
    response = call(example_view, caller, {"skill": "ok", "session_id": None})
    assert response.status_code == 200
    assert response.data["session_id"] is None


@pytest.mark.parametrize("body", [[], "text", 3, [{"skill": "x"}]])
def test_a_body_that_is_not_an_object_is_400(caller: RuntimeCaller, body: object) -> None:
    response = call(example_view, caller, body)
    assert response.status_code == 400
    assert "non_field_errors" in response.data["fields"]


def test_a_database_outage_is_503_never_a_decision(caller: RuntimeCaller) -> None:
    request = APIRequestFactory().get("/api/v1/example")
    force_authenticate(request, user=caller, token=caller.token)
    response = database_down_view(request)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.data["error"] == "unavailable"
    assert "Treat this as a refusal" in response.data["detail"]


def test_malformed_json_is_400_json(caller: RuntimeCaller) -> None:
    request = APIRequestFactory().post("/api/v1/example", "{not json", content_type="application/json")
    force_authenticate(request, user=caller, token=caller.token)
    response = example_view(request)
    assert response.status_code == 400
    assert response.data["error"] == "invalid"
    assert response.data["detail"].startswith("JSON parse error")


def test_a_body_that_is_not_json_is_415(caller: RuntimeCaller) -> None:
    request = APIRequestFactory().post("/api/v1/example", "skill=x", content_type="text/plain")
    force_authenticate(request, user=caller, token=caller.token)
    response = example_view(request)
    assert response.status_code == 415
    assert response.data["error"] == "unsupported_media_type"


def test_a_body_over_one_mebibyte_is_413(api: APIClient) -> None:
    body = json.dumps({"skill": "x" * (1024 * 1024)})
    response = api.generic("POST", "/api/v1/runtime", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {
        "error": "payload_too_large",
        "detail": "Request body is larger than the 1 MiB limit.",
    }


def test_a_non_numeric_content_length_is_400(api: APIClient) -> None:
    response = api.generic(
        "POST", "/api/v1/runtime", "{}", content_type="application/json", CONTENT_LENGTH="lots"
    )
    assert response.status_code == 400
    assert response.json()["detail"] == "Content-Length is not a number."


def test_unknown_api_paths_are_404_json_even_in_debug(api: APIClient, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = True
    response = api.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "No such API endpoint."}


def test_a_wrong_method_is_405_json(api: APIClient) -> None:
    response = api.delete("/api/v1/runtime")
    assert response.status_code == 405
    assert response.json() == {"error": "method_not_allowed", "detail": 'Method "DELETE" not allowed.'}


def test_trailing_slash_is_optional(api: APIClient) -> None:
    assert api.get("/api/v1/runtime").status_code == 200
    assert api.get("/api/v1/runtime/").status_code == 200


def test_every_response_carries_a_request_id_and_echoes_a_good_one(api: APIClient) -> None:
    assert len(api.get("/api/v1/runtime")["X-Request-ID"]) == 32
    assert api.get("/api/v1/runtime", HTTP_X_REQUEST_ID="abc-123")["X-Request-ID"] == "abc-123"
    forged = api.get("/api/v1/runtime", HTTP_X_REQUEST_ID="<script>")["X-Request-ID"]
    assert forged != "<script>"


def test_browser_sessions_do_not_authenticate_the_api(operator, runtime) -> None:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_login(operator)
    assert client.get("/api/v1/runtime").status_code == 401


def test_json_nested_past_the_recursion_limit_is_400(caller: RuntimeCaller) -> None:
    body = "[" * 100_000 + "]" * 100_000
    request = APIRequestFactory().post("/api/v1/example", body, content_type="application/json")
    force_authenticate(request, user=caller, token=caller.token)
    response = example_view(request)
    assert response.status_code == 400
    assert response.data == {"error": "invalid", "detail": "The JSON body is nested too deeply."}
