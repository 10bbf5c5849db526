"""Operator pages for agent runtimes: create, settings (ceiling and gate), tokens, how to
connect it through an enforcement point and which one last called (G1-G3)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from aimon_admin.core.actors import Actor
from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.runtimes import connect, selectors, services
from aimon_admin.runtimes.forms import RuntimeCreateForm, RuntimeSettingsForm, TokenIssueForm
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken

SETTINGS_SAVED_MESSAGE = "Settings saved."
SETTINGS_UNCHANGED_MESSAGE = "Nothing changed."
TOKEN_REVOKED_MESSAGE = "Token {prefix}… revoked. Requests that present it are refused from now on."  # noqa: S105 - not a secret # nosec B105
TOKEN_ALREADY_SHOWN_MESSAGE = "This token was already shown; issue a new one if you lost it."  # noqa: S105 - not a secret # nosec B105

# The session key under which a just-issued token waits for the one page that shows it.
_NEW_TOKEN_KEY = "runtimes:new-token"  # noqa: S105 - a key name, not a secret # nosec B105


def _runtime(name: str) -> AgentRuntime:
    return get_object_or_404(AgentRuntime.objects.select_related("owner"), name=name)


@require_GET
@login_required
@permission_required("runtimes.view_agentruntime", raise_exception=True)
def runtime_list_view(request: HttpRequest) -> HttpResponse:
    return render(request, "runtimes/list.html", {"runtimes": selectors.runtime_list()})


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.add_agentruntime", raise_exception=True)
def runtime_create_view(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        form = form_from_draft(request, "runtime-create", RuntimeCreateForm)
        return render(request, "runtimes/create.html", {"form": form})
    form = RuntimeCreateForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        runtime = services.runtime_create(
            name=data["name"],
            ceiling=data["ceiling"],
            exempt_at_or_below=data["exempt_at_or_below"],
            owner=data["owner"],
            description=data["description"],
            escalate_after_seconds=form.escalate_after_seconds(),
            actor=Actor.for_user(request.user),
        )
        messages.success(request, f"Runtime {runtime.name} created. Issue it a token below.")
        return redirect("runtimes:detail", name=runtime.name)
    return redirect_invalid(request, form, name="runtime-create", to=reverse("runtimes:create"))


def _settings_draft(runtime: AgentRuntime) -> str:
    return f"runtime-settings:{runtime.name}"


def _token_draft(runtime: AgentRuntime) -> str:
    return f"token-issue:{runtime.name}"


def _detail_context(request: HttpRequest, runtime: AgentRuntime, **extra: object) -> dict:
    # After an invalid POST (post/redirect/get), the form as typed and its errors.
    settings_form = form_from_draft(
        request, _settings_draft(runtime), lambda data: RuntimeSettingsForm.for_runtime(runtime, data=data)
    )
    can_issue = request.user.has_perm("runtimes.add_runtimetoken") and not runtime.is_retired
    context = {
        "runtime": runtime,
        "tokens": selectors.runtime_tokens(runtime=runtime),
        "point_calls": selectors.runtime_point_calls(runtime=runtime),
        # How to connect it needs a token: shown to those who may issue one.
        "connect": _connect_snippets(runtime) if can_issue else None,
        "settings_form": settings_form,
        "token_form": form_from_draft(request, _token_draft(runtime), TokenIssueForm),
        # A retired runtime is frozen: its settings shown, not a form; no new tokens.
        "can_manage": request.user.has_perm("runtimes.change_agentruntime"),
        "can_change": request.user.has_perm("runtimes.change_agentruntime") and not runtime.is_retired,
        "can_issue": can_issue,
    }
    context.update(extra)
    return context


def _connect_snippets(runtime: AgentRuntime) -> dict[str, str]:
    """G1-G3: the install command, a gateway.yaml and the Claude Code hook's settings and
    environment for this runtime, with the token's place named, never the token."""
    product_url = settings.AIMON_BASE_URL
    return {
        "install": connect.INSTALL_COMMAND,
        "gateway_yaml": connect.gateway_yaml(
            runtime_name=runtime.name, product_url=product_url, servers=connect.mcp_servers()
        ),
        "hook_settings": connect.hook_settings(),
        "hook_environment": connect.hook_environment(product_url=product_url),
    }


@require_GET
@login_required
@permission_required("runtimes.view_agentruntime", raise_exception=True)
def runtime_detail_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = _runtime(name)
    return render(request, "runtimes/detail.html", _detail_context(request, runtime))


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.change_agentruntime", raise_exception=True)
def runtime_settings_view(request: HttpRequest, name: str) -> HttpResponse:
    runtime = _runtime(name)
    if request.method == "GET":
        # A reload of an invalid form's page, or a typed address: the form lives on the runtime's page.
        return redirect("runtimes:detail", name=runtime.name)
    if runtime.is_retired:
        messages.error(request, services.RUNTIME_RETIRED_MESSAGE)
        return redirect("runtimes:detail", name=runtime.name)
    form = RuntimeSettingsForm.for_runtime(runtime, data=request.POST)
    saved = None
    if form.is_valid():
        data = form.cleaned_data
        changed = services.runtime_update_settings(
            runtime=runtime,
            ceiling=data["ceiling"],
            exempt_at_or_below=data["exempt_at_or_below"],
            owner=data["owner"],
            description=data["description"],
            escalate_after_seconds=form.escalate_after_seconds(current=runtime.escalate_after_seconds),
            actor=Actor.for_user(request.user),
        )
        saved = SETTINGS_SAVED_MESSAGE if changed else SETTINGS_UNCHANGED_MESSAGE
        runtime.refresh_from_db()
        form = RuntimeSettingsForm.for_runtime(runtime)
    if request.htmx:
        # An invalid form re-renders with 200: htmx 2 does not swap 4xx responses.
        context = _detail_context(request, runtime, settings_form=form, settings_saved=saved)
        return render(request, "runtimes/detail.html#settings", context)
    if saved:
        messages.success(request, saved)
        return redirect("runtimes:detail", name=runtime.name)
    return redirect_invalid(
        request,
        form,
        name=_settings_draft(runtime),
        to=reverse("runtimes:detail", args=[runtime.name]),
        anchor="runtime-settings",
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.add_runtimetoken", raise_exception=True)
def token_issue_view(request: HttpRequest, name: str) -> HttpResponse:
    """Issue a token, then redirect to the one page that shows it (post/redirect/get), so a
    reload never issues a second one."""
    runtime = _runtime(name)
    if request.method == "GET":
        return redirect("runtimes:detail", name=runtime.name)
    if runtime.is_retired:
        messages.error(request, services.RUNTIME_RETIRED_MESSAGE)
        return redirect("runtimes:detail", name=runtime.name)
    form = TokenIssueForm(request.POST)
    if not form.is_valid():
        return redirect_invalid(
            request,
            form,
            name=_token_draft(runtime),
            to=reverse("runtimes:detail", args=[runtime.name]),
            anchor="runtime-tokens",
        )
    token, plaintext = services.token_issue(
        runtime=runtime, label=form.cleaned_data["label"], actor=Actor.for_user(request.user)
    )
    # Kept server-side (the session row, never a URL or a cookie) for exactly one read.
    request.session[_NEW_TOKEN_KEY] = {"id": token.pk, "plaintext": plaintext}
    return redirect("runtimes:token-issued", name=runtime.name, token_id=token.pk)


@require_GET
@login_required
@permission_required("runtimes.add_runtimetoken", raise_exception=True)
def token_issued_view(request: HttpRequest, name: str, token_id: int) -> HttpResponse:
    """Shows a just-issued token once; any later visit says it was already shown."""
    runtime = _runtime(name)
    token = get_object_or_404(RuntimeToken, pk=token_id, runtime=runtime)
    plaintext = None
    waiting = request.session.get(_NEW_TOKEN_KEY)
    if isinstance(waiting, dict) and waiting.get("id") == token.pk:
        plaintext = waiting.get("plaintext")
        del request.session[_NEW_TOKEN_KEY]
    response = render(
        request,
        "runtimes/token_issued.html",
        {
            "runtime": runtime,
            "token": token,
            "plaintext": plaintext,
            "already_shown": TOKEN_ALREADY_SHOWN_MESSAGE,
        },
    )
    response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("runtimes.change_runtimetoken", raise_exception=True)
def token_revoke_view(request: HttpRequest, name: str, token_id: int) -> HttpResponse:
    runtime = _runtime(name)
    token = get_object_or_404(RuntimeToken, pk=token_id, runtime=runtime)
    if request.method == "POST":
        try:
            services.token_revoke(token=token, actor=Actor.for_user(request.user))
        except services.TokenAlreadyRevokedError:
            messages.info(request, services.TOKEN_ALREADY_REVOKED_MESSAGE)
        else:
            messages.success(request, TOKEN_REVOKED_MESSAGE.format(prefix=token.prefix))
        return redirect("runtimes:detail", name=runtime.name)
    return render(request, "runtimes/token_revoke.html", {"runtime": runtime, "token": token})
