from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_answers_ok_when_the_database_is_up(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "up"}
