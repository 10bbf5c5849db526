"""HTTP clients for the fault tests: a runtime (bearer token) and a person (signed in).

Both keep every response they got, so a test can assert that none was a 5xx.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx2

_CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    status: int
    seconds: float


class Recorder:
    """Every response any client of one test received."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    def add(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def server_errors(self, *, allowed: set[tuple[str, int]] = frozenset()) -> list[Seen]:  # type: ignore[assignment]
        """5xx responses, except (path prefix, status) pairs a test expects (PostgreSQL down)."""
        return [
            s
            for s in self.seen
            if s.status >= 500 and not any(s.path.startswith(p) and s.status == c for p, c in allowed)
        ]


class _Client:
    def __init__(self, base_url: str, recorder: Recorder, **kwargs: Any) -> None:
        self.recorder = recorder
        self.http = httpx2.Client(base_url=base_url, trust_env=False, timeout=30.0, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx2.Response:
        start = time.monotonic()
        response = self.http.request(method, path, **kwargs)
        self.recorder.add(Seen(method, path, response.status_code, time.monotonic() - start))
        return response

    def close(self) -> None:
        self.http.close()


class Runtime(_Client):
    """An agent runtime calling the API with its token."""

    def __init__(self, base_url: str, token: str, recorder: Recorder) -> None:
        super().__init__(base_url, recorder, headers={"Authorization": f"Bearer {token}"})

    def skill_decisions(
        self, skills: list[str], session_id: str | None, **extra: Any
    ) -> list[tuple[str, str, str]]:
        response = self.request(
            "POST", "/api/v1/skill-decisions", json={"skills": skills, "session_id": session_id, **extra}
        )
        assert response.status_code == 200, (response.status_code, response.text)
        return [(d["skill"], d["decision"], d["source"]) for d in response.json()["decisions"]]

    def tool_decision(self, tool: str, session_id: str | None) -> tuple[str, str]:
        response = self.request(
            "POST", "/api/v1/tool-decisions", json={"tool": tool, "server": None, "session_id": session_id}
        )
        assert response.status_code == 200, (response.status_code, response.text)
        body = response.json()
        return body["decision"], body["reason"]

    def open_request(self, skills: list[str], session_id: str, principal: str) -> dict[str, Any]:
        response = self.request(
            "POST",
            "/api/v1/approval-requests",
            json={"skills": skills, "session_id": session_id, "principal": principal},
        )
        assert response.status_code == 201, (response.status_code, response.text)
        return response.json()

    def poll(self, request_id: str, wait: int) -> httpx2.Response:
        return self.request("GET", f"/api/v1/approval-requests/{request_id}", params={"wait": wait})


class Person(_Client):
    """Someone signed in to the pages, with the session cookie and CSRF token a browser keeps."""

    def __init__(self, base_url: str, recorder: Recorder) -> None:
        super().__init__(base_url, recorder)
        self.origin = base_url

    def _csrf(self, path: str) -> str:
        page = self.request("GET", path)
        assert page.status_code == 200, (path, page.status_code, page.text[:500])
        match = _CSRF_INPUT.search(page.text)
        assert match, f"no CSRF token on {path}"
        return match.group(1)

    def sign_in(self, username: str, password: str) -> None:
        token = self._csrf("/accounts/login/")
        response = self.request(
            "POST",
            "/accounts/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": token},
            headers={"Referer": f"{self.origin}/accounts/login/"},
        )
        assert response.status_code == 302, (response.status_code, response.text[:500])

    def post(self, path: str, data: dict[str, str]) -> httpx2.Response:
        """A button on a page, as htmx posts it (CSRF token in the header)."""
        return self.request(
            "POST",
            path,
            data=data,
            headers={
                "X-CSRFToken": self.http.cookies.get("csrftoken") or "",
                "HX-Request": "true",
                "Referer": f"{self.origin}/",
            },
        )

    def answer(self, request_id: str, answer: str) -> httpx2.Response:
        """Click an answer on the request's card."""
        response = self.post(f"/approvals/requests/{request_id}/answer/", {"answer": answer})
        assert response.status_code == 200, (response.status_code, response.text[:500])
        return response


class BackgroundPoll:
    """A runtime's long-poll running in a thread; `result()` waits for its answer."""

    def __init__(self, base_url: str, token: str, recorder: Recorder, request_id: str, wait: int) -> None:
        self.client = Runtime(base_url, token, recorder)
        self.response: httpx2.Response | None = None
        self.returned_at: float | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(request_id, wait), daemon=True)
        self.started_at = time.monotonic()
        self.thread.start()

    def _run(self, request_id: str, wait: int) -> None:
        try:
            self.response = self.client.poll(request_id, wait)
        except BaseException as exc:  # surfaced by result()
            self.error = exc
        finally:
            self.returned_at = time.monotonic()
            self.client.close()

    def result(self, timeout: float = 40.0) -> httpx2.Response:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the long-poll never returned"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def readiness(base_url: str) -> httpx2.Response:
    """GET /readyz as a balancer would: no token, no cookie, and not recorded (a node here
    is never wholly ready: the folder starts no Celery worker and sets no signing key)."""
    response = httpx2.get(f"{base_url}/readyz", trust_env=False, timeout=30.0)
    assert response.status_code in (200, 503), response.text
    return response


def database_ready(base_url: str) -> bool:
    """Whether the node's readiness says its database answers."""
    return readiness(base_url).json()["checks"]["database"]["status"] == "ok"
