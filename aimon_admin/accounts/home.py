"""What accounts puts on the operators' home (core.home): sign-ins locked now, a link to
unlock them, and the people pages.

The count is what the locked sign-ins page lists (`selectors.locked_sign_ins`): django-axes'
records of failures within the cool-off (one row per name, address and browser, a short
table cleared as failures age out), and one lookup of the names among the people.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.http import HttpRequest
from django.urls import reverse

from aimon_admin.accounts import selectors
from aimon_admin.core.home import Figure, Section, Step

PERMISSION = "accounts.change_user"
ORDER = 50

# Words people see (tests import these).
TITLE = "People and access"
LOCKED_LABEL = ("sign-in locked now", "sign-ins locked now")
LOCKED_HELP = "Too many failed sign-ins from one address; each lifts by itself after a while, or unlock it."
PEOPLE_LINK = "People"
ADD_PERSON = "Add a person"


def people_section(request: HttpRequest) -> Iterator[Section]:
    if not request.user.has_perm(PERMISSION):
        return
    locked = len(selectors.locked_sign_ins())
    yield Section(
        key="people",
        title=TITLE,
        figures=(Figure("locked", locked, LOCKED_LABEL, reverse("accounts:locked"), help=LOCKED_HELP),),
        links=(
            Step("", PEOPLE_LINK, reverse("accounts:people")),
            Step("", ADD_PERSON, reverse("accounts:person-create")),
        ),
    )
