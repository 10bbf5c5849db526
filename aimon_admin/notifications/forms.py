"""Browser forms for channels, preferences and webhooks. The checks that need the network
(an address this server may send to, a URL the library understands) are the services'."""

from __future__ import annotations

import zoneinfo

from django import forms

from aimon_admin.notifications.choices import APPROVAL_EVENTS, WEBHOOK_EVENTS, ChannelKind
from aimon_admin.notifications.models import CHANNEL_NAME_MAX, CHANNEL_TARGET_MAX, DIGEST_MINUTES_MAX


class ChannelForm(forms.Form):
    kind = forms.ChoiceField(
        label="Kind",
        choices=[(ChannelKind.EMAIL, "Email"), (ChannelKind.APPRISE, "Chat or phone (a notification URL)")],
    )
    name = forms.CharField(label="Name", max_length=CHANNEL_NAME_MAX, help_text="Yours to recognise it by.")
    target = forms.CharField(
        label="Address or URL",
        max_length=CHANNEL_TARGET_MAX,
        help_text=(
            "An email address, or a notification URL: ntfys://ntfy.sh/my-topic (phone push), "
            "slack://…, discord://…, matrix://…, tgram://…, json://host/path. The URL is "
            "kept secret: only a masked form is shown again."
        ),
    )


def _clock(example: str) -> forms.TimeInput:
    """A time typed as HH:MM, in a text box styled like every other (empty: no quiet hours)."""
    return forms.TimeInput(format="%H:%M", attrs={"placeholder": example, "inputmode": "numeric"})


class PreferenceForm(forms.Form):
    digest_minutes = forms.IntegerField(
        label="Digest every (minutes)",
        min_value=0,
        max_value=DIGEST_MINUTES_MAX,
        initial=0,
        help_text=(
            "0: one message per request, as it opens. Otherwise one message every N minutes "
            "naming each request still waiting."
        ),
    )
    quiet_start = forms.TimeField(label="Quiet hours from", required=False, widget=_clock("22:00"))
    quiet_end = forms.TimeField(label="Quiet hours until", required=False, widget=_clock("07:00"))
    timezone = forms.CharField(
        label="Time zone",
        max_length=64,
        initial="UTC",
        help_text=(
            "For your quiet hours, e.g. Europe/Paris. During them only escalations reach you; "
            "what waited is sent in one message when they end."
        ),
    )

    def clean_timezone(self) -> str:
        name = self.cleaned_data["timezone"].strip()
        try:
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise forms.ValidationError("Unknown time zone; use a name such as Europe/Paris or UTC.") from exc
        return name

    def clean(self) -> dict:
        data = super().clean()
        if (data.get("quiet_start") is None) != (data.get("quiet_end") is None) and not self.errors:
            raise forms.ValidationError("Quiet hours need both a start and an end.")
        return data


class WebhookForm(forms.Form):
    name = forms.CharField(label="Name", max_length=CHANNEL_NAME_MAX)
    url = forms.CharField(
        label="Endpoint URL",
        max_length=CHANNEL_TARGET_MAX,
        help_text="https://… Each POST is signed as Standard Webhooks specifies; redirects are not followed.",
    )
    events = forms.MultipleChoiceField(
        label="Events",
        choices=[(event.value, event.label) for event in WEBHOOK_EVENTS],
        initial=[event.value for event in APPROVAL_EVENTS],
        widget=forms.CheckboxSelectMultiple,
    )


class LogFilterForm(forms.Form):
    """The delivery log's filters; a value that cannot be read is an error beside its field."""

    channel = forms.TypedChoiceField(label="Channel", required=False, coerce=int, empty_value=None)
    status = forms.ChoiceField(label="Status", required=False)
    request = forms.UUIDField(label="Request id", required=False)
    before = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(
        self,
        *args: object,
        channels: list[tuple[int, str]],
        statuses: list[tuple[str, str]],
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["channel"].choices = [("", "Any channel"), *channels]
        self.fields["status"].choices = [("", "Any status"), *statuses]
