"""API error shapes (docs/api.md "Basics"): JSON 4xx naming the field, 413, 401, 404, never 5xx."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient, APIRequestFactory, force_authenticate

from aimon_admin.core.api import (
    CONTROL_CHARS_MESSAGE,
    INVALID_CHOICE_MESSAGE,
    NESTED_TOO_DEEP_MESSAGE,
    NOT_A_STRING_MESSAGE,
    NOT_AN_OBJECT_BODY_MESSAGE,
    NULL_BODY_MESSAGE,
    REQUIRED_MESSAGE,
    UNKNOWN_FIELD_MESSAGE,
    EnumField,
    NameField,
    OptionalIdField,
    StrictSerializer,
    validate_flat,
)
from aimon_admin.core.parsers import DUPLICATE_KEY_MESSAGE, member_name
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


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"skill": "a", "skill": "b"}', "skill"),
        ('{"skill": "a", "session_id": {"x": 1, "x": 1}}', "x"),
        ('{"skill": "a", "session_id": [{"": 1, "": 2}]}', '""'),
    ],
)
def test_a_member_given_twice_is_400_naming_it(caller: RuntimeCaller, text: str, named: str) -> None:
    # A gateway reading the first of two members and the server the last would disagree.
    request = APIRequestFactory().post("/api/v1/example", text, content_type="application/json")
    force_authenticate(request, user=caller, token=caller.token)
    response = example_view(request)
    assert response.status_code == 400
    assert response.data["fields"] == {named: [DUPLICATE_KEY_MESSAGE]}
    assert response.data["detail"] == f"Invalid input: {named}."


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
    assert response.data == {"error": "invalid", "detail": NESTED_TOO_DEEP_MESSAGE}
    assert NESTED_TOO_DEEP_MESSAGE == "JSON parse error - nested too deeply."


# --- validate_flat: the one body check of every API view, each error worded once ------------


class EmptyExample(StrictSerializer):
    """A body with no fields."""


class CheckedExample(ExampleInput):
    @staticmethod
    def validate_skill(value: str) -> str:
        if value == "forbidden":
            raise ValidationError("Not this one.")
        return value.upper()


def flat_errors(serializer_class: type[StrictSerializer], body: object) -> dict:
    with pytest.raises(ValidationError) as raised:
        validate_flat(serializer_class, body)
    return raised.value.detail  # type: ignore[return-value]


def test_the_error_wordings_are_pinned_once() -> None:
    assert UNKNOWN_FIELD_MESSAGE == "Unknown field. Allowed fields: {allowed}."
    assert INVALID_CHOICE_MESSAGE == '"{input}" is not a valid value. Allowed values: {allowed}.'
    assert REQUIRED_MESSAGE == "This field is required."
    assert NOT_A_STRING_MESSAGE == "Not a valid string."
    assert NULL_BODY_MESSAGE == "No data provided"
    assert NOT_AN_OBJECT_BODY_MESSAGE == "Invalid data. Expected a dictionary, but got {datatype}."


def test_an_unknown_field_is_named_with_the_allowed_fields() -> None:
    allowed = UNKNOWN_FIELD_MESSAGE.format(allowed="level, session_id, skill")
    assert flat_errors(ExampleInput, {"skill": "x", "sesion_id": "s", "zz": 1}) == {
        "sesion_id": [allowed],
        "zz": [allowed],
    }


@pytest.mark.parametrize(
    ("key", "named"),
    [
        ("", '""'),
        (" ", '" "'),
        ("\t", '"\\t"'),
        (" skill", '" skill"'),
        ("a.b", '"a.b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("[0]", '"[0]"'),
        ("sesion_id", "sesion_id"),
        ("two words", "two words"),
        ("été", "été"),
    ],
)
def test_an_unknown_field_that_would_name_nothing_is_quoted(key: str, named: str) -> None:
    # An empty key, white space or a path's punctuation would read as nothing (or as a path):
    # the error names it JSON-quoted, as it stood in the body, in `fields` and in the detail.
    assert member_name(key) == named
    allowed = UNKNOWN_FIELD_MESSAGE.format(allowed="level, session_id, skill")
    assert flat_errors(ExampleInput, {"skill": "x", key: 1}) == {named: [allowed]}


def test_an_unknown_field_where_none_are_allowed_says_none() -> None:
    assert flat_errors(EmptyExample, {"agent": True}) == {
        "agent": [UNKNOWN_FIELD_MESSAGE.format(allowed="none")]
    }


def test_a_missing_field_a_wrong_type_and_an_unknown_enum_value_are_each_named() -> None:
    assert flat_errors(ExampleInput, {"session_id": 7, "level": "read_only"}) == {
        "skill": [REQUIRED_MESSAGE],
        "session_id": [NOT_A_STRING_MESSAGE],
        "level": [INVALID_CHOICE_MESSAGE.format(input="read_only", allowed="READ_ONLY, MUTATING")],
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, NULL_BODY_MESSAGE),
        ([], NOT_AN_OBJECT_BODY_MESSAGE.format(datatype="list")),
        ("text", NOT_AN_OBJECT_BODY_MESSAGE.format(datatype="str")),
    ],
)
def test_a_null_or_non_object_body_is_a_non_field_error(body: object, message: str) -> None:
    assert flat_errors(ExampleInput, body) == {"non_field_errors": [message]}


def test_no_body_at_all_is_an_empty_object() -> None:
    assert validate_flat(EmptyExample, empty) == {}
    assert flat_errors(ExampleInput, empty) == {"skill": [REQUIRED_MESSAGE]}


def test_the_class_checks_run_after_the_fields() -> None:
    assert validate_flat(CheckedExample, {"skill": "deploy"}) == {
        "skill": "DEPLOY",
        "session_id": None,
    }
    assert flat_errors(CheckedExample, {"skill": "forbidden"}) == {"skill": ["Not this one."]}


@pytest.mark.parametrize(
    "body",
    [
        {"skill": "deploy", "session_id": "s-1", "level": "READ_ONLY"},
        {"skill": "deploy"},
        {"skill": "", "sesion_id": "x"},
        {"skill": 7, "session_id": [], "level": "nope"},
        {},
        [],
        "text",
        None,
    ],
)
def test_validate_flat_answers_exactly_as_the_serializer(body: object) -> None:
    serializer = ExampleInput(data=body)
    if serializer.is_valid():
        assert validate_flat(ExampleInput, body) == serializer.validated_data
    else:
        assert flat_errors(ExampleInput, body) == serializer.errors


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/api/v1/sessions/s-1/revoke", "null"),
        ("/api/v1/sessions/s-1/clear", "null"),
        ("/api/v1/skill-decisions", "null"),
        ("/api/v1/tool-decisions", "null"),
    ],
)
def test_a_null_body_is_400_on_every_endpoint_never_read_as_no_body(
    api: APIClient, path: str, raw: str
) -> None:
    # The approvals endpoints read a JSON null as an absent body (a revoke went ahead), the
    # registry's refused it: one helper, one answer.
    response = api.generic("POST", path, raw, content_type="application/json")
    assert (response.status_code, response.json()) == (
        400,
        {
            "error": "invalid",
            "detail": "Invalid input: non_field_errors.",
            "fields": {"non_field_errors": [NULL_BODY_MESSAGE]},
        },
    )


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/mcp-servers/a%00b/tools", "name"),
        ("/api/v1/sessions/a%00b/clear", "session_id"),
        ("/api/v1/sessions/a%00b/revoke", "session_id"),
    ],
)
def test_a_path_value_with_a_control_character_is_400_naming_it(
    api: APIClient, path: str, field: str
) -> None:
    # The MCP server's name reached PostgreSQL, which refuses a NUL byte: a 500 there.
    response = api.post(path, {}, format="json")
    assert (response.status_code, response.json()) == (
        400,
        {
            "error": "invalid",
            "detail": f"Invalid input: {field}.",
            "fields": {field: [CONTROL_CHARS_MESSAGE]},
        },
    )
