"""What notifications put on the operators' home (core.home): channels whose stored address or
signing secret no configured key decrypts (core.encryption). Such a channel is sent nothing
(each message is given up at once) until its key is restored or the channel is added again.

Every live channel's two values are read and decrypted (a few microseconds each); the section
is shown only when one fails, as an incident rather than routine work.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

from django.http import HttpRequest
from django.urls import reverse

from aimon_admin.core.encryption import unreadable_rows
from aimon_admin.core.home import Figure, Line, Section
from aimon_admin.notifications.models import Channel

PERMISSION = "notifications.change_channel"
ORDER = 25
LINES_SHOWN = 5
# Words people see (tests import these).
TITLE = "Notifications"
SECRETS_LABEL = (
    "channel whose stored address or secret cannot be decrypted",
    "channels whose stored address or secret cannot be decrypted",
)
SECRETS_HELP = (
    "No configured key opens it, so nothing is sent there: restore the key (AIMON_SECRETS_KEY), "
    "or add the channel again."
)
SECRETS_NOTE = "cannot be decrypted: nothing sent"


def channels_with_unreadable_secrets() -> list[Channel]:
    """Live channels whose address or webhook secret no configured key decrypts."""
    return unreadable_rows(Channel.objects.live().select_related("owner"), "target", "secret")


def _line(channel: Channel) -> Line:
    if channel.is_webhook:
        return Line(channel.name, reverse("notifications:webhooks"), note=SECRETS_NOTE)
    log = f"{reverse('notifications:log')}?{urlencode({'channel': channel.pk})}"
    return Line(f"{channel.name} ({channel.owner.username})", log, note=SECRETS_NOTE)


def secrets_section(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(PERMISSION):
        return
    unreadable = channels_with_unreadable_secrets()
    if not unreadable:
        return
    yield Section(
        key="notifications",
        title=TITLE,
        figures=(
            Figure(
                "secrets",
                len(unreadable),
                SECRETS_LABEL,
                reverse("notifications:webhooks"),
                help=SECRETS_HELP,
            ),
        ),
        lines=tuple(_line(channel) for channel in unreadable[:LINES_SHOWN]),
    )
