"""The audit home's Chain verification card, with its Verify now button (issue 17)."""

from __future__ import annotations

from typing import Any

from django import template

from aimon_admin.audit.verification import last_verification
from aimon_admin.audit.verify_now import verification_card

register = template.Library()


@register.inclusion_tag("audit/_verification.html", takes_context=True)
def verification_card_for(context: template.Context) -> dict[str, Any]:
    """`{% verification_card_for %}`: the card for the signed-in person; it reads the newest
    verification from the page's `verification` when the page has it."""
    last = context["verification"] if "verification" in context else last_verification()
    card = verification_card(user=context["request"].user, last=last)
    card["csrf_token"] = context.get("csrf_token")
    return card
