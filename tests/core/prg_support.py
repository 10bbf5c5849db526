"""One check of post/redirect/get with errors kept, for every form's tests."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from django.test import Client

from aimon_admin.core.prg import DRAFT_PARAM


def assert_invalid_post_redirects_and_reloads(
    client: Client,
    url: str,
    data: Mapping[str, object],
    *,
    page: str,
    shows: Iterable[str],
    headers: Mapping[str, str] | None = None,
) -> str:
    """POST `data` (invalid) to the form at `url`: a 303 to `page` with a draft, whose GET
    shows every text of `shows` (the errors and what was typed) and does again on a
    reload; a GET on `url` itself is no 405. Returns the page as shown."""
    response = client.post(url, data, headers=headers or {})
    assert response.status_code == 303, (response.status_code, response.content[:300])
    location = response["Location"]
    assert urlsplit(location).path == page, location
    assert f"{DRAFT_PARAM}=" in urlsplit(location).query, location
    shown = ""
    for _ in range(2):  # the redirect's GET, then a reload
        answer = client.get(location)
        assert answer.status_code == 200, answer.status_code
        shown = html.unescape(answer.content.decode())
        for text in shows:
            assert text in shown, (text, location)
    assert client.get(url).status_code != 405
    return shown
