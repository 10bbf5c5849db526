"""The OpenAPI schema (drf-spectacular) and docs pages that need nothing from the internet."""

from __future__ import annotations

import io
import re

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def test_schema_is_served_and_describes_the_v1_api(client: Client) -> None:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json() if "json" in response["Content-Type"] else yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/runtime" in schema["paths"]
    assert schema["components"]["securitySchemes"]["RuntimeToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A runtime token: Authorization: Bearer aimon_…",
    }


def test_schema_generation_is_valid_and_warning_free() -> None:
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "openapi:" in out.getvalue()


def test_docs_page_loads_nothing_from_the_internet(client: Client) -> None:
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    external = [u for u in re.findall(r'(?:src|href)="([^"]+)"', html) if re.match(r"(https?:)?//", u)]
    assert external == []
    assert "/static/drf_spectacular_sidecar/" in html


def test_each_decision_endpoint_documents_its_own_body() -> None:
    # The plain views' schema-only classes shared one function, so the skill decision was
    # documented with the tool decision's body and answer; every endpoint is a DRF view now.
    out = io.StringIO()
    call_command("spectacular", stdout=out)
    paths = yaml.safe_load(out.getvalue())["paths"]
    skill = paths["/api/v1/skill-decisions"]["post"]
    tool = paths["/api/v1/tool-decisions"]["post"]
    assert skill["summary"] == "Decide skills for a session"
    assert skill["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/SkillDecisionInRequest"
    )
    assert skill["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/SkillDecisionsOut"
    )
    assert tool["summary"] == "May this runtime run this tool now?"
    assert tool["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ToolDecisionInRequest"
    )


def test_docs_page_carries_the_products_header_and_a_way_back(client: Client) -> None:
    # /api/docs/ once had no header and no way back to the product.
    html = client.get("/api/docs/").content.decode()
    header = re.search(r'<header class="docs-topbar">.*?</header>', html, re.S)
    assert header is not None
    assert '<a class="docs-brand" href="/">AIMON Admin</a>' in header.group(0)
    assert '<a href="/" data-testid="docs-back">Back to AIMON Admin</a>' in header.group(0)
    assert '<a href="/api/schema/">The OpenAPI schema</a>' in header.group(0)
    assert html.index("</header>") < html.index('<main id="swagger-ui">')
