"""A request's timeline: what other apps add to it.

The request page (approvals) shows when its request was opened, viewed and answered, and
when people were notified of it, which only notifications knows. approvals may not import
notifications (tests/test_layers.py), so, as core.home does for the home's sections, an app
registers a provider here when it is ready (its AppConfig.ready), and the request page asks
every provider for the entries that concern the request and the person reading it. One way
only: core knows no provider, a provider knows no other.

A provider shows a person only what they may see elsewhere: notifications shows operators
every delivery, and anyone else the deliveries to their own channels.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


@dataclass(frozen=True)
class Entry:
    """One line of the timeline: when, what happened (a short heading such as "Notified"),
    and the sentence that says it. `kind` names the step for styling and tests."""

    at: dt.datetime
    kind: str
    title: str
    text: str


Provider = Callable[[str, AbstractBaseUser | AnonymousUser], Iterable[Entry]]

_providers: dict[str, Provider] = {}


def provide(name: str, provider: Provider) -> None:
    """Register `provider(request_id, user)` under `name` (registering a name again replaces
    it, so a reloaded app does not add its entries twice)."""
    _providers[name] = provider


def entries_for(request_id: str, user: AbstractBaseUser | AnonymousUser) -> list[Entry]:
    """Every provider's entries for the request, in the providers' names' order."""
    found: list[Entry] = []
    for name in sorted(_providers):
        found.extend(_providers[name](request_id, user))
    return found
