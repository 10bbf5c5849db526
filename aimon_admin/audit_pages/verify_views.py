"""*Verify now* on the audit home: ask for the chain verification at once, and the Chain
verification card htmx polls while one runs (aimon_admin.audit.verify_now).

POST /audit/verify/ needs `audit.view_auditevent` (auditors and operators). Without htmx it
answers with a redirect to the audit home and the outcome as a message (post/redirect/get);
with htmx, with the card itself.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from aimon_admin.audit import verify_now
from aimon_admin.audit.verification import last_verification
from aimon_admin.audit_pages.page import auditor_page

CARD = "audit/_verification.html"


@require_POST
@login_required
@permission_required(verify_now.PERMISSION, raise_exception=True)
def verify_view(request: HttpRequest) -> HttpResponse:
    outcome, last = verify_now.verification_request(user=request.user)
    message = verify_now.outcome_message(outcome, last)
    if getattr(request, "htmx", False):
        card = verify_now.verification_card(user=request.user, last=last, message=message)
        return render(request, CARD, card)
    if outcome == verify_now.NOT_QUEUED or (last is not None and not last.ok and outcome == verify_now.DONE):
        messages.error(request, message)
    else:
        messages.success(request, message)
    return redirect("audit:home")


@auditor_page
def verification_view(request: HttpRequest) -> HttpResponse:
    """The card alone: what htmx polls while a verification runs."""
    return render(request, CARD, verify_now.verification_card(user=request.user, last=last_verification()))


urlpatterns: list[URLPattern] = [
    path("verify/", verify_view, name="verify"),
    path("verification/", verification_view, name="verification"),
]
