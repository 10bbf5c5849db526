"""The refusals approval writes raise, and the messages people are shown (constants tests import)."""

from __future__ import annotations

PRINCIPAL_CONFLICT_MESSAGE = (
    "Session {session!r} belongs to principal {fixed!r}; its principal is fixed when first seen."
)
REQUEST_CLOSED_MESSAGE = "This request is already {status}."
NOT_YOURS_MESSAGE = "This request is not yours to answer."
ANSWER_NOT_OFFERED_MESSAGE = (
    "{answer} is not offered for {skill}: use one of the buttons the request shows you."
)
# S13: an answer that would hold beyond this one request, refused to someone who may not give it.
STANDING_ANSWER_REFUSED_MESSAGE = (
    "{answer} is not yours to give for {skill}: this request has no session, so it would hold "
    "for every session of {runtime}, and only an operator or the runtime's owner may answer "
    "that way. Use Deny this request instead: the runtime is told Deny for this request and "
    "nothing is stored."
)
CAPPED_ANSWER_MESSAGE = (
    "{answer} is not offered for {skill}: a rule allows answers no wider than {widest}. "
    "Use one of the buttons shown (Deny this request refuses it for this request only)."
)
# What ends an agent-wide grant (S5, S6): it can be revoked on its own (the session and
# agent pages' Revoke), or with every other one by Revoke agent-wide.
AGENT_WIDE_ENDS = "until it is revoked, on its own or with Revoke agent-wide"
ESCALATION_REACH = (
    f"applies to all sessions of the runtime, has no expiry, survives clear, and holds {AGENT_WIDE_ENDS}"
)
REQUEST_DENY_REACH = "the runtime is told Deny for this request only; nothing is stored in any grant store"
# S2: a second answer for a key a grant already holds (another request's answer).
SETTLED_SAME_MESSAGE = (
    "{skill}: {who} gave the same answer a moment ago on another request ({how}); this request "
    "is answered by it."
)
SETTLED_DENY_STANDS_MESSAGE = (
    "{skill}: {who} denied it a moment ago on another request, and a Deny made now beats an "
    "approval, so this request is answered Deny. To allow it, revoke that denial on the "
    "session's page, then let the agent ask again."
)
DENY_REPLACED_MESSAGE = (
    "{skill}: your Deny replaced the approval {who} gave a moment ago on another request: a Deny "
    "made now beats older approvals."
)
# P3: a rule that needs several people to allow.
OWN_REQUEST_ALLOW_MESSAGE = (
    "You cannot allow {skill} yourself: this request is yours, and a rule needs {needed} people "
    "other than you to allow it. You may still Deny it."
)
ALREADY_ALLOWED_MESSAGE = (
    "You already allowed {skill}. It is waiting for another person: {given} of {needed} approvals."
)
ALLOW_MUST_MATCH_MESSAGE = (
    "{skill}: {who} allowed it as {first}. A rule needs {needed} people to allow it, so your allow "
    "must be the same ({first}), or you may Deny it."
)
# S14: why an answer cannot be undone (policy.UndoRefusal's words).
UNDO_NOT_THEIRS_MESSAGE = "Only the person who gave an answer may undo it."
UNDO_DENY_MESSAGE = (
    "A Deny is not undone: the agent has been told no. To let it ask again, revoke the denial "
    "on the session's page."
)
UNDO_TOO_LATE_MESSAGE = (
    "Too late to undo: an answer can be undone for {minutes} minutes after it was given. Revoke "
    "it on the session's page (an agent-wide one on the agent's page) instead."
)
UNKNOWN_INVOKING_SESSION_MESSAGE = (
    "No session {session!r} has been seen for this runtime, so there is nothing to inherit. "
    "Name the session that launched this run as it was named in its own calls, or leave "
    "invoking_session_id out."
)


class ApprovalError(ValueError):
    """A refused approval write, with a message fit to show as it is."""


class PrincipalConflictError(ApprovalError):
    pass


class RequestClosedError(ApprovalError):
    pass


class NotAllowedError(ApprovalError):
    pass


class UnknownInvokingSessionError(ApprovalError):
    """`invoking_session_id` names no session of this runtime (API: 400 on that field)."""

    field = "invoking_session_id"

    def __init__(self, session_id: str) -> None:
        super().__init__(UNKNOWN_INVOKING_SESSION_MESSAGE.format(session=session_id))


class AllowRefusedError(ApprovalError):
    """P3: an allow that, once the item was locked, turned out not to match an allow another
    person had just recorded (or this person's own, a double click): rolled back."""


UNATTENDED_TOOL_REQUEST_MESSAGE = (
    "An unattended call opens no request: nobody can be asked. Name the session asking "
    "(session_id), or the session that launched this run (invoking_session_id)."
)
ARGUMENTS_NUL_MESSAGE = "Text must not contain NUL characters (\\u0000), which cannot be stored."


class BadToolCallError(ApprovalError):
    """A tool call that cannot be asked about (API: 400 on `field`)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field
