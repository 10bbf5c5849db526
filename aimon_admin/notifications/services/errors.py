"""The one error channel writes raise, naming the field it is about."""

from __future__ import annotations


class ChannelError(ValueError):
    """A channel write refused, with plain words and the form field they are about."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


NOT_YOURS_MESSAGE = "This channel is not yours."
REMOVED_MESSAGE = "This channel was removed."
NOT_A_WEBHOOK_MESSAGE = "Only a signed webhook has a secret to rotate."
NAME_MESSAGE = "Give the channel a name (at most {limit} characters)."
TARGET_LENGTH_MESSAGE = "An address is at most {limit} characters."
EVENTS_MESSAGE = "Choose at least one event to send."
TIMEZONE_MESSAGE = "Unknown time zone {name!r}; use a name such as Europe/Paris or UTC."
DIGEST_MESSAGE = "A digest comes every 1 to {limit} minutes (0: one message per request)."
QUIET_MESSAGE = "Quiet hours need both a start and an end."
CHANNEL_KIND_MESSAGE = "A person's channel is an email address or a chat or phone URL."
SIGNING_KEY_MESSAGE = (
    "A webhook secret is whsec_ followed by {low} to {high} random bytes in base64, as "
    "Standard Webhooks specifies; leave it out and one is made for you."
)
