"""The floor's bare applications (benchmarks/floor.py):

* `hello`: a plain WSGI callable, no Django at all: what granian behind nginx costs alone;
* `urlpatterns`: a URLconf for Django with no middleware (benchmarks.settings_floor). Its
  `/read` is the bare endpoint whose token lookup is a prepared statement
  (benchmarks/urls.py `baseline_prepared`): Django's request path, a pooled connection and
  one indexed read, the least any decision does; every other path answers the same small JSON
  with no database: what Django's request path costs on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

BODY = b'{"decision": "ALLOW"}'


def hello(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    environ["wsgi.input"].read()  # the request body is read, as every endpoint reads it
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))])
    return [BODY]


@csrf_exempt
def django_hello(request: HttpRequest) -> JsonResponse:
    request.body  # noqa: B018 - read, as every endpoint reads it
    return JsonResponse({"decision": "ALLOW"})


@csrf_exempt
def django_read(request: HttpRequest) -> JsonResponse:
    # Imported here: `hello` is served with no Django set up, and this module with it.
    from benchmarks.urls import baseline_prepared

    return baseline_prepared(request)


urlpatterns = [re_path(r"^read$", django_read), re_path(r"", django_hello)]
