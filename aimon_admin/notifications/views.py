"""Pages: a person's own channels (with their digest and quiet hours) and deliveries; the
operators' signed webhooks and the whole delivery log. Every write is a POST through a
service, then a redirect (post/redirect/get); an invalid form comes back with what was typed."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from aimon_admin.core.actors import Actor
from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.notifications import selectors, services
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus
from aimon_admin.notifications.forms import ChannelForm, LogFilterForm, PreferenceForm, WebhookForm
from aimon_admin.notifications.models import Channel, Delivery

ANSWER_PERMISSION = "approvals.answer_approvalrequest"
WEBHOOK_PERMISSION = "notifications.change_channel"
LOG_PERMISSION = "notifications.view_delivery"
_NEW_SECRET_KEY = "notifications:new-secret"  # noqa: S105 - a session key, not a secret # nosec B105

REMOVE_EFFECT = (
    "Nothing more is sent there, and what waits to be sent is not. Its deliveries stay in the log."
)
ROTATE_EFFECT = (
    "A new secret signs every message from now on; the old one stops at once, "
    "so the receiver needs the new one."
)
CHANNEL_ADDED = "Channel added. Press Send a test to check it."
CHANNEL_REMOVED = "Channel removed: nothing more is sent there."
PREFERENCES_SAVED = "Saved."
TEST_SENT = "The test message was sent."
TEST_QUEUED = "The test message is on its way; the delivery log shows how it went."
TEST_FAILED = "The test message did not arrive: {why}"
SECRET_ALREADY_SHOWN = "This secret was shown once already; rotate it to get a new one."  # noqa: S105 # nosec B105


def _actor(request: HttpRequest) -> Actor:
    return Actor.for_user(request.user)  # type: ignore[arg-type]


def _own_channel(request: HttpRequest, pk: int) -> Channel:
    """A channel the person may test or remove: their own, or (operators) a webhook. Anyone
    else's is a 404."""
    channel = get_object_or_404(Channel, pk=pk, removed_at__isnull=True)
    if channel.is_webhook:
        if not request.user.has_perm(WEBHOOK_PERMISSION):
            raise Http404
    elif channel.owner_id != request.user.pk:
        raise Http404
    return channel


def _back(channel: Channel) -> str:
    return reverse("notifications:webhooks" if channel.is_webhook else "notifications:channels")


# --- A person's channels ----------------------------------------------------------------------------


@require_GET
@login_required
@permission_required(ANSWER_PERMISSION, raise_exception=True)
def channels_view(request: HttpRequest) -> HttpResponse:
    pref = selectors.preference_of(user=request.user)  # type: ignore[arg-type]
    initial = {
        "digest_minutes": pref.digest_minutes,
        "quiet_start": pref.quiet_start,
        "quiet_end": pref.quiet_end,
        "timezone": pref.timezone,
    }
    channels = list(selectors.with_last_sent(selectors.channels_of(user=request.user)))  # type: ignore[arg-type]
    return render(
        request,
        "notifications/channels.html",
        {
            "channels": channels,
            "broken": [c for c in channels if c.broken_at],
            "channel_form": form_from_draft(request, "channel", lambda data: ChannelForm(data)),
            "preference_form": form_from_draft(
                request, "preference", lambda data: PreferenceForm(data, initial=initial)
            ),
        },
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(ANSWER_PERMISSION, raise_exception=True)
def channel_add_view(request: HttpRequest) -> HttpResponse:
    to = reverse("notifications:channels")
    if request.method == "GET":
        return redirect(to + "#add-channel")
    form = ChannelForm(request.POST)
    if form.is_valid():
        try:
            services.channel_add(
                owner=request.user,  # type: ignore[arg-type]
                kind=form.cleaned_data["kind"],
                name=form.cleaned_data["name"],
                target=form.cleaned_data["target"],
                actor=_actor(request),
            )
        except services.ChannelError as exc:
            form.add_error("target" if exc.field in {"url", "address"} else (exc.field or None), exc.message)
        else:
            messages.success(request, CHANNEL_ADDED)
            return redirect(to)
    return redirect_invalid(request, form, name="channel", to=to, anchor="add-channel")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(ANSWER_PERMISSION, raise_exception=True)
def preferences_view(request: HttpRequest) -> HttpResponse:
    to = reverse("notifications:channels")
    if request.method == "GET":
        return redirect(to + "#preferences")
    form = PreferenceForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.preference_set(
                user=request.user,  # type: ignore[arg-type]
                digest_minutes=data["digest_minutes"],
                quiet_start=data["quiet_start"],
                quiet_end=data["quiet_end"],
                timezone_name=data["timezone"],
                actor=_actor(request),
            )
        except services.ChannelError as exc:
            form.add_error(exc.field or None, exc.message)
        else:
            messages.success(request, PREFERENCES_SAVED)
            return redirect(to + "#preferences")
    return redirect_invalid(request, form, name="preference", to=to, anchor="preferences")


@require_POST
@login_required
def channel_test_view(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _own_channel(request, pk)
    delivery = services.channel_test(channel=channel, actor=_actor(request))
    delivery.refresh_from_db()
    if delivery.status == DeliveryStatus.SENT:
        messages.success(request, TEST_SENT)
    elif delivery.status == DeliveryStatus.FAILED:
        messages.error(request, TEST_FAILED.format(why=delivery.last_error))
    else:
        messages.info(request, TEST_QUEUED)
    return redirect(_back(channel))


@require_http_methods(["GET", "POST"])
@login_required
def channel_remove_view(request: HttpRequest, pk: int) -> HttpResponse:
    channel = _own_channel(request, pk)
    if request.method == "POST":
        services.channel_remove(channel=channel, actor=_actor(request))
        messages.success(request, CHANNEL_REMOVED)
        return redirect(_back(channel))
    return render(
        request,
        "core/confirm.html",
        {
            "title": f"Remove {channel.name}?",
            "effect": REMOVE_EFFECT,
            "confirm_label": "Remove",
            "danger": True,
            "cancel_href": _back(channel),
        },
    )


# --- Operators' webhooks ----------------------------------------------------------------------------


@require_GET
@login_required
@permission_required(WEBHOOK_PERMISSION, raise_exception=True)
def webhooks_view(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "notifications/webhooks.html",
        {
            "webhooks": list(selectors.with_last_sent(selectors.webhooks())),
            "form": form_from_draft(request, "webhook", lambda data: WebhookForm(data)),
        },
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(WEBHOOK_PERMISSION, raise_exception=True)
def webhook_create_view(request: HttpRequest) -> HttpResponse:
    to = reverse("notifications:webhooks")
    if request.method == "GET":
        return redirect(to + "#add-webhook")
    form = WebhookForm(request.POST)
    if form.is_valid():
        try:
            hook, secret = services.webhook_create(
                name=form.cleaned_data["name"],
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
                actor=_actor(request),
            )
        except services.ChannelError as exc:
            form.add_error(exc.field if exc.field in form.fields else "url", exc.message)
        else:
            return _show_secret_once(request, hook, secret)
    return redirect_invalid(request, form, name="webhook", to=to, anchor="add-webhook")


def _show_secret_once(request: HttpRequest, hook: Channel, secret: str) -> HttpResponse:
    # Kept server-side (the session row, never a URL or a cookie) for exactly one read.
    request.session[_NEW_SECRET_KEY] = {"id": hook.pk, "secret": secret}
    return redirect("notifications:webhook-secret", pk=hook.pk)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(WEBHOOK_PERMISSION, raise_exception=True)
def webhook_rotate_view(request: HttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(Channel, pk=pk, kind=ChannelKind.WEBHOOK, removed_at__isnull=True)
    if request.method == "POST":
        hook, secret = services.webhook_rotate(channel=hook, actor=_actor(request))
        return _show_secret_once(request, hook, secret)
    return render(
        request,
        "core/confirm.html",
        {
            "title": f"Rotate the secret of {hook.name}?",
            "effect": ROTATE_EFFECT,
            "confirm_label": "Rotate secret",
            "danger": True,
            "cancel_href": reverse("notifications:webhooks"),
        },
    )


@require_GET
@login_required
@permission_required(WEBHOOK_PERMISSION, raise_exception=True)
def webhook_secret_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Shows a new secret once; a later visit says it was shown already."""
    hook = get_object_or_404(Channel, pk=pk, kind=ChannelKind.WEBHOOK)
    secret = None
    waiting = request.session.get(_NEW_SECRET_KEY)
    if isinstance(waiting, dict) and waiting.get("id") == hook.pk:
        secret = waiting.get("secret")
        del request.session[_NEW_SECRET_KEY]
    response = render(
        request,
        "notifications/webhook_secret.html",
        {"hook": hook, "secret": secret, "already_shown": SECRET_ALREADY_SHOWN},
    )
    response["Cache-Control"] = "no-store"
    return response


# --- Delivery logs ----------------------------------------------------------------------------------


def _log(request: HttpRequest, *, user: Any, title: str, url_name: str) -> HttpResponse:
    channels = [(c.pk, f"{c.name} ({c.get_kind_display()})") for c in selectors.log_channels(user=user)]
    form = LogFilterForm(request.GET or None, channels=channels, statuses=list(DeliveryStatus.choices))
    rows: list[Delivery] = []
    more = None
    status = 200
    if form.is_bound and not form.is_valid():
        status = 400
    else:
        data = form.cleaned_data if form.is_bound else {}
        filters = selectors.LogFilter(
            channel=data.get("channel"),
            status=data.get("status") or "",
            request=str(data["request"]) if data.get("request") else "",
            before=data.get("before"),
        )
        rows = selectors.delivery_log(user=user, filters=filters)
        if len(rows) > selectors.LOG_PAGE_SIZE:
            rows = rows[: selectors.LOG_PAGE_SIZE]
            query = request.GET.copy()
            query["before"] = str(rows[-1].pk)
            more = f"?{query.urlencode()}"
    return render(
        request,
        "notifications/deliveries.html",
        {
            "title": title,
            "form": form,
            "rows": rows,
            "more": more,
            "url_name": url_name,
            "mine": user is not None,
        },
        status=status,
    )


@require_GET
@login_required
@permission_required(ANSWER_PERMISSION, raise_exception=True)
def my_deliveries_view(request: HttpRequest) -> HttpResponse:
    return _log(request, user=request.user, title="My deliveries", url_name="notifications:my-deliveries")


@require_GET
@login_required
@permission_required(LOG_PERMISSION, raise_exception=True)
def delivery_log_view(request: HttpRequest) -> HttpResponse:
    return _log(request, user=None, title="Delivery log", url_name="notifications:log")
