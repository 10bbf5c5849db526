"""The product's URLs plus `/bench/baseline`: the floor a decision endpoint is measured against.

The baseline does what every API call must do anyway, the same token lookup on the
Bearer header, and answers a small JSON body; the ratio of a real endpoint's
requests/s to the baseline's is what its own work costs.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from aimon_admin.runtimes.selectors import token_authenticate
from aimon_admin.urls import handler400, handler403, handler404, handler500
from aimon_admin.urls import urlpatterns as product_urlpatterns


@csrf_exempt
def baseline(request: HttpRequest) -> JsonResponse:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = token_authenticate(raw) if scheme.lower() == "bearer" else None
    if token is None:
        return JsonResponse({"error": "not_authenticated"}, status=401)
    return JsonResponse({"runtime": token.runtime.name, "decision": "ALLOW"})


urlpatterns = [path("bench/baseline", baseline, name="bench-baseline"), *product_urlpatterns]

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]
