"""What a person's answer comes to (S7, S8, P3): the outcome they are told of, and the loss of
one item's claim to someone else. Below every module that answers (answers, two_person,
item_answers), so none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest


@dataclass
class AnswerOutcome:
    written: list[ApprovalItem] = field(default_factory=list)
    already_answered: list[ApprovalItem] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    request_answered: bool = False
    # What the person must be told of an answer another request's answer decided (S2).
    notes: list[str] = field(default_factory=list)
    # The request as it now stands, when this call knows all of it: it closed the request
    # with every skill's answer in hand (S7). None: read it again to show it.
    request: ApprovalRequest | None = None
    # P3: allows recorded on items that need more people: (skill, allows given, needed).
    allows_recorded: list[tuple[str, int, int]] = field(default_factory=list)


class ClaimLost(Exception):
    """The item was answered (or its request closed) by someone else after this answer's
    grant was written: raised inside the item's transaction so the write rolls back."""
