"""The product's URLs plus `/bench/baseline`: the floor a decision endpoint is measured against.

The baseline does what every API call must do anyway, the same token lookup on the
Bearer header, and answers a small JSON body; the ratio of a real endpoint's
requests/s to the baseline's is what its own work costs.

`/bench/skill-decisions-two-step` is the skill-decision endpoint without its fused read
(the token looked up first, then the decision's own read: two round trips), so one run
compares the two paths in alternating rounds. `/bench/baseline-prepared` is the
baseline with its token lookup as a prepared statement on PostgreSQL, as the fused read
is: what the ratio would be against a token lookup made as cheap.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from aimon_admin.approvals.api.decisions import SkillDecisionsView
from aimon_admin.core import rawsql
from aimon_admin.runtimes.selectors import token_authenticate, token_from_row, token_select
from aimon_admin.runtimes.tokens import token_hash, token_looks_valid
from aimon_admin.urls import handler400, handler403, handler404, handler500
from aimon_admin.urls import urlpatterns as product_urlpatterns


@csrf_exempt
def baseline(request: HttpRequest) -> JsonResponse:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = token_authenticate(raw) if scheme.lower() == "bearer" else None
    if token is None:
        return JsonResponse({"error": "not_authenticated"}, status=401)
    return JsonResponse({"runtime": token.runtime.name, "decision": "ALLOW"})


@csrf_exempt
def baseline_prepared(request: HttpRequest) -> JsonResponse:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    token = None
    if scheme.lower() == "bearer" and token_looks_valid(raw):
        columns, source = token_select()
        rows = rawsql.fetchall_prepared(f"SELECT {columns} {source}", [token_hash(raw)])  # nosec B608
        token = token_from_row(rows[0]) if rows else None
    if token is None:
        return JsonResponse({"error": "not_authenticated"}, status=401)
    return JsonResponse({"runtime": token.runtime.name, "decision": "ALLOW"})


# The same view, served the usual way only (authentication first, then the decision).
skill_decisions_two_step = SkillDecisionsView.as_view(fused_read=False)

urlpatterns = [
    path("bench/baseline", baseline, name="bench-baseline"),
    path("bench/baseline-prepared", baseline_prepared, name="bench-baseline-prepared"),
    path("bench/skill-decisions-two-step", skill_decisions_two_step, name="bench-skill-decisions-two-step"),
    *product_urlpatterns,
]

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]
