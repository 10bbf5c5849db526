"""The inbox's filters: requests from your own sessions, and skill or tool requests (each count
on the home opens the inbox filtered to what it counted).

`?whose=mine` keeps requests whose principal is you (S13: the ones about your own sessions);
`?kind=SKILL` or `?kind=TOOL` keeps one kind (ApprovalRequest.kind); `?sent=operators` keeps the requests
nobody answered in their runtime's time, sent to the operators (P2). They narrow what the
inbox already shows the person; they never widen it. A value that cannot be read is a 400
naming the filter, never an inbox quietly showing everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse

from aimon_admin.accounts.models import User
from aimon_admin.approvals.choices import RequestKind
from aimon_admin.approvals.models import ApprovalRequest

MINE = "mine"
SENT_TO_OPERATORS = "operators"
# Messages people see (tests import these).
BAD_FILTER_TITLE = "This filter cannot be read"
BAD_WHOSE_MESSAGE = "Whose: {value!r} is not a choice here: leave it out for every request, or use mine."
BAD_KIND_MESSAGE = "Kind: {value!r} is not a kind of request: choose SKILL (skills) or TOOL (a tool call)."
BAD_SENT_MESSAGE = (
    "Sent: {value!r} is not a choice here: leave it out for every request, or use operators "
    "(the requests nobody answered in time)."
)
KIND_WORDS = {RequestKind.SKILL: "skill requests", RequestKind.TOOL: "tool requests"}


class InboxFilterError(ValueError):
    """A filter value the inbox cannot read; its message names the filter."""


@dataclass(frozen=True)
class InboxFilter:
    mine: bool = False
    kind: str = ""  # a RequestKind value, "" for both
    escalated: bool = False  # only those sent to the operators, nobody having answered in time (P2)

    @classmethod
    def parse(cls, query: QueryDict) -> InboxFilter:
        """The filters in `query` (other parameters, such as the poll's `v`, are not ours)."""
        whose, kind, sent = (query.get(name, "").strip() for name in ("whose", "kind", "sent"))
        if whose not in ("", MINE):
            raise InboxFilterError(BAD_WHOSE_MESSAGE.format(value=whose))
        if kind and kind not in RequestKind.values:
            raise InboxFilterError(BAD_KIND_MESSAGE.format(value=kind))
        if sent not in ("", SENT_TO_OPERATORS):
            raise InboxFilterError(BAD_SENT_MESSAGE.format(value=sent))
        return cls(mine=whose == MINE, kind=kind, escalated=sent == SENT_TO_OPERATORS)

    @property
    def active(self) -> bool:
        return self.mine or bool(self.kind) or self.escalated

    def apply(self, requests: QuerySet[ApprovalRequest], *, user: User) -> QuerySet[ApprovalRequest]:
        if self.mine:
            requests = requests.filter(principal=user.get_username())
        if self.kind:
            requests = requests.filter(kind=self.kind)
        if self.escalated:
            requests = requests.filter(escalated_at__isnull=False)
        return requests

    @property
    def querystring(self) -> str:
        given = {
            "whose": MINE if self.mine else "",
            "kind": self.kind,
            "sent": SENT_TO_OPERATORS if self.escalated else "",
        }
        return urlencode({name: value for name, value in given.items() if value})

    @property
    def url(self) -> str:
        """The inbox filtered so (the home's links)."""
        base = reverse("approvals:inbox")
        return f"{base}?{self.querystring}" if self.active else base

    @property
    def description(self) -> str:
        """What the filtered inbox shows, in words: "tool requests from your own sessions"."""
        what = KIND_WORDS.get(self.kind, "requests")  # type: ignore[call-overload]
        if self.escalated:
            what = f"{what} sent to operators"
        return f"{what} from your own sessions" if self.mine else what


def bad_filter(request: HttpRequest, message: str) -> HttpResponse:
    """The 400 page saying which filter could not be read (the inbox's, and the auditor's
    pages without a form)."""
    context = {
        "status": 400,
        "title": BAD_FILTER_TITLE,
        "message": message,
        "request_id": getattr(request, "request_id", ""),
    }
    return render(request, "core/error.html", context, status=400)
