"""The auditor's checkpoint page and the proofs it offers (A4).

    GET  /audit/checkpoints/                  the newest signed checkpoint, where and when it was
                                              published, the last verification, the public key,
                                              every reason signing is not keeping up
    POST /audit/checkpoints/sign/             sign one now (on demand)
    GET  /audit/checkpoints/public-key.pem    the public key auditors verify with
    GET  /audit/checkpoints/latest.json       the newest checkpoint as published
    GET  /audit/checkpoints/export.jsonl      a proved export: whole, or ?first=&last= with proofs
    GET  /audit/events/<seq>/proof.jsonl      one event's Download proof

All need `audit.view_auditevent` (auditors and operators). Where no beat runs (make run), the
page signs the checkpoint owed before it shows it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from aimon_admin.audit import checkpoints, proofs
from aimon_admin.audit.models import AuditCheckpoint, AuditEvent
from aimon_admin.audit.publication import document_text
from aimon_admin.audit.verification import last_verification

PERMISSION = "audit.view_auditevent"
RECENT = 10
# Words people see (tests import these).
SIGNED_MESSAGE = "Checkpoint of {size} events signed and published."
UNCHANGED_MESSAGE = (
    "Checkpoint of {size} events signed and published. No event was written since the checkpoint "
    "of {time}: this one shows the log unchanged until now."
)
NOT_PUBLISHED_MESSAGE = "Checkpoint of {size} events signed, but not published everywhere: {problem}"
REFUSED_MESSAGE = "No checkpoint signed: {reason}"
NOT_A_NUMBER = "{name}: give an event number (seq), a whole number."


def _auditor(view):  # type: ignore[no-untyped-def]
    return login_required(permission_required(PERMISSION, raise_exception=True)(view))


def _refusal_page(request: HttpRequest, title: str, message: str, status: int) -> HttpResponse:
    context = {
        "status": status,
        "title": title,
        "message": message,
        "request_id": getattr(request, "request_id", ""),
    }
    return render(request, "core/error.html", context, status=status)


def _download(body: str, name: str, content_type: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@_auditor
def checkpoints_view(request: HttpRequest) -> HttpResponse:
    proofs.sign_if_due_without_beat()
    status = checkpoints.signing_status()
    verification = last_verification()
    newest = status.newest
    context = {
        "status": status,
        "newest": newest,
        "recent": AuditCheckpoint.objects.order_by("-signed_at", "-pk")[:RECENT],
        "verification": verification,
        "verified_covers": bool(
            newest and verification and verification.ok and verification.event_count >= newest.tree_size
        ),
        "interval_minutes": int(checkpoints.interval().total_seconds() // 60),
    }
    return render(request, "audit/checkpoints.html", context)


@require_POST
@_auditor
def sign_view(request: HttpRequest) -> HttpResponse:
    previous = checkpoints.newest()
    try:
        checkpoint = checkpoints.checkpoint_sign()
    except checkpoints.CheckpointRefusedError as exc:
        messages.error(request, REFUSED_MESSAGE.format(reason=exc))
        return redirect("audit:checkpoints")
    size = checkpoint.tree_size
    if checkpoint.publish_problem:
        problem = " ".join(checkpoint.publish_problem.splitlines())
        messages.warning(request, NOT_PUBLISHED_MESSAGE.format(size=size, problem=problem))
    elif previous is not None and previous.tree_size == size:
        time = previous.signed_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        messages.success(request, UNCHANGED_MESSAGE.format(size=size, time=time))
    else:
        messages.success(request, SIGNED_MESSAGE.format(size=size))
    return redirect("audit:checkpoints")


@require_GET
@_auditor
def public_key_view(request: HttpRequest) -> HttpResponse:
    status = checkpoints.signing_status()
    if not status.public_pem:
        return _refusal_page(request, "No signing key", status.problems[0], 404)
    return _download(status.public_pem, f"aimon-audit-{status.key_id}.pem", "application/x-pem-file")


@require_GET
@_auditor
def latest_view(request: HttpRequest) -> HttpResponse:
    newest = checkpoints.newest()
    if newest is None:
        return _refusal_page(request, "No checkpoint yet", checkpoints.NEVER_SIGNED, 404)
    name = f"checkpoint-{newest.tree_size:012d}.json"
    return _download(document_text(newest.document), name, "application/json")


def _seq_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise proofs.ProofUnavailableError(NOT_A_NUMBER.format(name=name))
    return int(value)


async def _stream(lines: Iterator[str]) -> AsyncIterator[bytes]:
    """Each chunk read in a worker thread, sent as it comes (as the plain exports are)."""
    done = object()
    while True:
        chunk = await sync_to_async(next, thread_sensitive=True)(lines, done)
        if chunk is done:
            return
        yield chunk.encode()  # type: ignore[union-attr]


@require_GET
@_auditor
def export_view(request: HttpRequest) -> HttpResponse:
    try:
        first, last = _seq_param(request, "first"), _seq_param(request, "last")
        checkpoint = proofs.checkpoint_covering()
        span = proofs.span_for(checkpoint, first, last, request.GET.get("proofs") == "1")
    except proofs.ProofUnavailableError as exc:
        return _refusal_page(request, "No proved export", str(exc), 400)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(
        _stream(proofs.chunks(checkpoint, span)), content_type="application/x-ndjson; charset=utf-8"
    )
    name = f"audit-proved-{span.first}-{span.last}-{stamp}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@_auditor
def event_proof_view(request: HttpRequest, seq: int) -> HttpResponse:
    if not AuditEvent.objects.filter(seq=seq).exists():
        raise Http404("No such event")
    try:
        body = proofs.event_proof(seq)
    except proofs.ProofUnavailableError as exc:
        return _refusal_page(request, "No proof yet", str(exc), 409)
    return _download(body, f"audit-event-{seq}-proof.jsonl", "application/x-ndjson; charset=utf-8")


urlpatterns: list[URLPattern] = [
    path("checkpoints/", checkpoints_view, name="checkpoints"),
    path("checkpoints/sign/", sign_view, name="checkpoint-sign"),
    path("checkpoints/public-key.pem", public_key_view, name="checkpoint-public-key"),
    path("checkpoints/export.jsonl", export_view, name="checkpoint-export"),
    path("checkpoints/latest.json", latest_view, name="checkpoint-latest"),
    path("events/<int:seq>/proof.jsonl", event_proof_view, name="event-proof"),
]
