"""The floor's two bare applications (benchmarks/floor.py), answering every path alike:

* `hello`: a plain WSGI callable, no Django at all: what granian behind nginx costs alone;
* `urlpatterns`: a URLconf whose one view answers the same small JSON, for Django with no
  middleware (benchmarks.settings_floor): what Django's request path costs on its own.
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


urlpatterns = [re_path(r"", django_hello)]
