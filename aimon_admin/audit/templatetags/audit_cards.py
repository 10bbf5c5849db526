"""The audit home's cards: Chain verification with its Verify now button, and Signed checkpoints."""

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


@register.inclusion_tag("audit/_checkpoint_card.html")
def checkpoint_card() -> dict[str, Any]:
    """`{% checkpoint_card %}`: the newest signed checkpoint and why signing is not keeping up (A4).
    Where no beat runs (make run), the checkpoint owed is signed first."""
    from aimon_admin.audit import checkpoints, proofs

    proofs.sign_if_due_without_beat()
    return {"status": checkpoints.signing_status()}
