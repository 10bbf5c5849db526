"""Notification pages for every role (P1, P2, P4): a person's channels with Send a test and
Remove, digest and quiet hours; operators' webhooks with the secret shown once and rotated;
the delivery logs, filtered and keyset paged. Bad input is a message beside its field."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.approvals.models import ApprovalRequest
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.audit.choices import AuditAction
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.actors import Actor
from aimon_admin.notifications import selectors, senders, services, views
from aimon_admin.notifications.choices import ChannelKind, DeliveryStatus, NotificationEvent
from aimon_admin.notifications.models import Channel, Delivery
from aimon_admin.runtimes.models import AgentRuntime
from tests.accounts.factories import logged_in
from tests.core.prg_support import assert_invalid_post_redirects_and_reloads
from tests.notifications.receivers import http_receiver

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


# (path, operator, auditor, approver)
PAGES = [
    ("/notifications/", 200, 403, 200),
    ("/notifications/deliveries/", 200, 403, 200),
    ("/notifications/log/", 200, 200, 403),
    ("/notifications/webhooks/", 200, 403, 403),
]


@pytest.mark.parametrize(("path", "as_operator", "as_auditor", "as_approver"), PAGES)
def test_each_role_reaches_exactly_its_notification_pages(
    operator: User,
    auditor: User,
    approver: User,
    path: str,
    as_operator: int,
    as_auditor: int,
    as_approver: int,
) -> None:
    for user, expected in ((operator, as_operator), (auditor, as_auditor), (approver, as_approver)):
        assert logged_in(user).get(path).status_code == expected, (user.username, path)


@pytest.mark.django_db(transaction=True)
def test_a_person_adds_a_channel_sends_a_test_and_removes_it(approver: User) -> None:
    # P1: the channel page; Send a test on every channel.
    client = logged_in(approver)
    with http_receiver() as receiver:
        url = f"json://{receiver.base}/chat?token=s3cret-token-value"
        response = client.post(
            "/notifications/channels/new/",
            {"kind": "APPRISE", "name": "team chat", "target": url},
            follow=True,
        )
        page = text(response)
        assert views.CHANNEL_ADDED in page
        assert "team chat" in page
        assert "s3cret-token-value" not in page  # the URL's secrets are never shown again
        assert "Nothing sent yet" in page
        channel = Channel.objects.get(owner=approver)
        response = client.post(f"/notifications/channels/{channel.pk}/test/", follow=True)
        assert len(receiver.got) == 1
    # Tasks run eagerly here, as under make run: the outcome is known before the answer.
    assert views.TEST_SENT in text(response)
    assert "Working" in text(response)
    assert "Nothing sent yet" not in text(response)
    assert client.get(f"/notifications/channels/{channel.pk}/remove/").status_code == 200
    response = client.post(f"/notifications/channels/{channel.pk}/remove/", follow=True)
    assert views.CHANNEL_REMOVED in text(response)
    assert "team chat" not in text(client.get("/notifications/"))
    assert AuditEvent.objects.filter(action=AuditAction.NOTIFICATION_CHANNEL_REMOVED).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_test_that_fails_says_why_on_the_page(approver: User) -> None:
    with http_receiver(answer=500) as receiver:
        channel = services.channel_add(
            owner=approver, kind=ChannelKind.APPRISE, name="chat", target=f"json://{receiver.base}/c",
            actor=Actor.for_user(approver),
        )  # fmt: skip
        response = logged_in(approver).post(f"/notifications/channels/{channel.pk}/test/", follow=True)
    assert "The test message did not arrive: The channel refused the message:" in text(response)


@pytest.mark.parametrize(
    ("data", "shows"),
    [
        ({"kind": "APPRISE", "name": "x", "target": "bogus://nothing"}, [senders.APPRISE_UNKNOWN_MESSAGE]),
        ({"kind": "EMAIL", "name": "x", "target": "nope"}, [senders.EMAIL_INVALID_MESSAGE, 'value="nope"']),
        ({"kind": "APPRISE", "name": "", "target": "json://127.0.0.1/x"}, ["This field is required."]),
        ({"kind": "SMS", "name": "x", "target": "x"}, ["Select a valid choice."]),
    ],
)
def test_a_channel_that_cannot_be_added_comes_back_with_its_reason(
    approver: User, data: dict, shows: list
) -> None:
    # Bad input: a clear message beside its field, what was typed kept, never a 500.
    assert_invalid_post_redirects_and_reloads(
        logged_in(approver), "/notifications/channels/new/", data, page="/notifications/", shows=shows
    )
    assert not Channel.objects.exists()


def test_preferences_are_saved_and_bad_ones_explained(approver: User) -> None:
    client = logged_in(approver)
    response = client.post(
        "/notifications/preferences/",
        {"digest_minutes": "30", "quiet_start": "22:00", "quiet_end": "07:00", "timezone": "Europe/Paris"},
        follow=True,
    )
    assert views.PREFERENCES_SAVED in text(response)
    pref = selectors.preference_of(user=approver)
    assert (pref.digest_minutes, str(pref.quiet_start), pref.timezone) == (30, "22:00:00", "Europe/Paris")
    assert_invalid_post_redirects_and_reloads(
        client,
        "/notifications/preferences/",
        {"digest_minutes": "5", "quiet_start": "22:00", "quiet_end": "", "timezone": "Mars/Olympus"},
        page="/notifications/",
        shows=["Unknown time zone; use a name such as Europe/Paris or UTC."],
    )


def test_an_operator_adds_a_webhook_and_sees_its_secret_once(operator: User) -> None:
    # P4: the secret is shown once; rotating shows the new one once.
    client = logged_in(operator)
    response = client.post(
        "/notifications/webhooks/new/",
        {"name": "siem", "url": "https://93.184.216.34/hook", "events": ["REQUESTED", "ANSWERED"]},
    )
    hook = Channel.objects.get(kind=ChannelKind.WEBHOOK)
    assert response["Location"] == f"/notifications/webhooks/{hook.pk}/secret/"
    shown = text(client.get(response["Location"]))
    assert hook.secret in shown
    again = text(client.get(response["Location"]))
    assert hook.secret not in again
    assert views.SECRET_ALREADY_SHOWN in again
    assert hook.secret not in text(client.get("/notifications/webhooks/"))
    old = hook.secret
    response = client.post(f"/notifications/webhooks/{hook.pk}/rotate/")
    hook.refresh_from_db()
    assert hook.secret != old
    assert hook.secret in text(client.get(response["Location"]))
    assert hook.events == ["REQUESTED", "ANSWERED"]


def test_a_webhook_to_a_private_address_is_refused_with_its_reason(operator: User, settings: Any) -> None:
    settings.AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = False
    assert_invalid_post_redirects_and_reloads(
        logged_in(operator),
        "/notifications/webhooks/new/",
        {"name": "internal", "url": "http://10.1.2.3/hook", "events": ["REQUESTED"]},
        page="/notifications/webhooks/",
        shows=["10.1.2.3 is a private, loopback or link-local address (10.1.2.3)", 'value="internal"'],
    )
    assert not Channel.objects.exists()


def test_someone_elses_channel_is_a_404(approver: User, other_approver: User, operator: User) -> None:
    channel = services.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="work",
        target="alice@example.test",
        actor=Actor.for_user(approver),
    )
    for user in (other_approver, operator):
        client = logged_in(user)
        assert client.post(f"/notifications/channels/{channel.pk}/test/").status_code == 404
        assert client.post(f"/notifications/channels/{channel.pk}/remove/").status_code == 404
    assert not Delivery.objects.exists()


def test_a_broken_channel_is_shown_to_its_owner(approver: User) -> None:
    # P2: its owner is told in the product.
    channel = services.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="work",
        target="alice@example.test",
        actor=Actor.for_user(approver),
    )
    Channel.objects.filter(pk=channel.pk).update(
        broken_at="2026-12-01T10:00:00Z", consecutive_failures=5, last_error="The receiver answered 500."
    )
    page = text(logged_in(approver).get("/notifications/"))
    assert "work is broken:" in page
    assert "The receiver answered 500." in page


# --- The delivery logs --------------------------------------------------------------------------------


@pytest.fixture
def deliveries(runtime: AgentRuntime, approver: User, other_approver: User) -> list[Delivery]:
    mine = services.channel_add(
        owner=approver,
        kind=ChannelKind.EMAIL,
        name="mine",
        target="a@example.test",
        actor=Actor.for_user(approver),
    )
    theirs = services.channel_add(
        owner=other_approver, kind=ChannelKind.EMAIL, name="theirs", target="b@example.test",
        actor=Actor.for_user(other_approver),
    )  # fmt: skip
    rows = []
    for n in range(60):
        request, _ = request_create(RequestInput(runtime=runtime, skills=["deploy"], session_id=f"s-{n}"))
        for channel in (mine, theirs):
            rows.append(
                Delivery.objects.create(
                    request=request,
                    channel=channel,
                    event=NotificationEvent.REQUESTED,
                    status=DeliveryStatus.SENT if n % 2 else DeliveryStatus.FAILED,
                    next_attempt_at=request.created_at,
                )
            )
    return rows


def _listed(page: str) -> list[str]:
    return re.findall(r'href="/approvals/requests/([0-9a-f-]+)/"', page)


def test_a_person_sees_only_their_own_deliveries_paged(approver: User, deliveries: list[Delivery]) -> None:
    client = logged_in(approver)
    first = client.get("/notifications/deliveries/")
    page = text(first)
    assert "theirs" not in page
    assert len(_listed(page)) == selectors.LOG_PAGE_SIZE
    older = re.search(r'href="(\?before=\d+)"', page)
    assert older is not None
    rest = text(client.get("/notifications/deliveries/" + older.group(1)))
    assert len(_listed(rest)) == 10
    assert not set(_listed(rest)) & set(_listed(page))


def test_operators_filter_the_log_by_channel_status_and_request(
    operator: User, deliveries: list[Delivery]
) -> None:
    client = logged_in(operator)
    theirs = Channel.objects.get(name="theirs")
    page = text(client.get(f"/notifications/log/?channel={theirs.pk}&status=FAILED"))
    assert len(_listed(page)) == 30
    request: ApprovalRequest = deliveries[0].request  # type: ignore[assignment]
    page = text(client.get(f"/notifications/log/?request={request.pk}"))
    assert _listed(page) == [str(request.pk), str(request.pk)]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("request=not-a-uuid", "Enter a valid UUID."),
        ("status=LOST", "Select a valid choice. LOST is not one of the available choices."),
        ("channel=abc", "Select a valid choice."),
        ("before=-3", "Ensure this value is greater than or equal to 1."),
    ],
)
def test_a_filter_that_cannot_be_read_is_a_400_naming_it(operator: User, query: str, error: str) -> None:
    response = logged_in(operator).get(f"/notifications/log/?{query}")
    assert response.status_code == 400
    assert error in text(response)


@pytest.mark.parametrize(
    "path",
    [
        "/notifications/",
        "/notifications/deliveries/",
        "/notifications/log/",
        "/notifications/log/?status=FAILED",
        "/notifications/webhooks/",
    ],
)
def test_every_empty_list_says_what_to_do_next(operator: User, path: str) -> None:
    # As every page's empty state does: a link to the next step.
    page = logged_in(operator).get(path).content.decode()
    (empty,) = re.findall(r'<p class="empty">(.*?)</p>', page, re.S)
    assert re.search(r'<a [^>]*href="[^"]+"', empty), empty
