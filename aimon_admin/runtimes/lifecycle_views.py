"""Operator pages that stop a runtime: disable (its tokens refused until enabled again),
enable, and retire (for good). Each a POST after a confirmation page, then a redirect."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from aimon_admin.core.actors import Actor
from aimon_admin.runtimes import services
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken

DISABLED_MESSAGE = "{name} is disabled: every call with its tokens is refused until you enable it again."
ALREADY_DISABLED_MESSAGE = "{name} was already disabled."
ENABLED_MESSAGE = "{name} is enabled: its tokens that are not revoked work again."
ALREADY_ENABLED_MESSAGE = "{name} was already enabled."
RETIRED_MESSAGE = "{name} is retired: its tokens are revoked and it cannot be enabled again."


def _runtime(name: str) -> AgentRuntime:
    return get_object_or_404(AgentRuntime, name=name)


def _actor(request: HttpRequest) -> Actor:
    return Actor.for_user(request.user)  # type: ignore[arg-type]  # login_required


def _confirm(request: HttpRequest, runtime: AgentRuntime, **context: object) -> HttpResponse:
    back = reverse("runtimes:detail", args=[runtime.name])
    crumbs = [(reverse("runtimes:list"), "Agent runtimes"), (back, runtime.name)]
    return render(request, "core/confirm.html", {"cancel_href": back, "crumbs": crumbs, **context})


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.change_agentruntime", raise_exception=True)
def runtime_disable_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = _runtime(name)
    if request.method == "POST":
        try:
            done = services.runtime_disable(runtime=runtime, actor=_actor(request))
        except services.RuntimeRetiredError as exc:
            messages.error(request, str(exc))
        else:
            text = DISABLED_MESSAGE if done else ALREADY_DISABLED_MESSAGE
            messages.success(request, text.format(name=runtime.name))
        return redirect("runtimes:detail", name=runtime.name)
    refusal = None
    if runtime.is_retired:
        refusal = services.RUNTIME_RETIRED_MESSAGE
    elif not runtime.is_active:
        refusal = ALREADY_DISABLED_MESSAGE.format(name=runtime.name)
    return _confirm(
        request,
        runtime,
        title=f"Disable {runtime.name}?",
        effect=(
            f"From the moment you confirm, every API call {runtime.name} makes is refused with a "
            "401 saying it is disabled: no decisions, no requests, no tool lists. Its tokens, "
            "settings, sessions and approvals stay as they are, and enabling it again lets the "
            "same tokens in."
        ),
        refusal=refusal,
        confirm_label="Disable",
        danger=True,
    )


@require_POST
@login_required
@permission_required("runtimes.change_agentruntime", raise_exception=True)
def runtime_enable_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = _runtime(name)
    try:
        done = services.runtime_enable(runtime=runtime, actor=_actor(request))
    except services.RuntimeRetiredError as exc:
        messages.error(request, str(exc))
    else:
        text = ENABLED_MESSAGE if done else ALREADY_ENABLED_MESSAGE
        messages.success(request, text.format(name=runtime.name))
    return redirect("runtimes:detail", name=runtime.name)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.change_agentruntime", raise_exception=True)
def runtime_retire_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = _runtime(name)
    if request.method == "POST":
        try:
            services.runtime_retire(runtime=runtime, actor=_actor(request))
        except services.RuntimeRetiredError as exc:
            messages.info(request, str(exc))
        else:
            messages.success(request, RETIRED_MESSAGE.format(name=runtime.name))
        return redirect("runtimes:detail", name=runtime.name)
    active = RuntimeToken.objects.filter(runtime=runtime, revoked_at__isnull=True).order_by("pk")
    return _confirm(
        request,
        runtime,
        title=f"Retire {runtime.name}?",
        effect=(
            f"{runtime.name} is stopped for good: every call it makes is refused from the moment "
            "you confirm, each of its tokens is revoked, and it can be neither enabled nor changed "
            "again. Its history stays: its sessions, approvals and audit events keep naming it, "
            "and so does its name (a new runtime needs another). This cannot be undone: to pause "
            "it instead, disable it."
        ),
        items=[
            f"Token {token.prefix}…{f' ({token.label})' if token.label else ''} will be revoked"
            for token in active
        ],
        refusal=services.RUNTIME_RETIRED_MESSAGE if runtime.is_retired else None,
        confirm_label="Retire for good",
        danger=True,
    )
