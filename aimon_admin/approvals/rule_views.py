"""Skill rules on the rules page (operators; S2's rule layer): the list with what is wrong
with each stored rule, the form with its live preview of the known skills a pattern
matches, and deletion. The tool rules below them are tool_rule_views.py's; writes go
through approvals/rules.py."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from aimon_admin.approvals import policy, rules, selectors, tool_rule_views
from aimon_admin.approvals.forms import RuleForm
from aimon_admin.approvals.models import SkillRule
from aimon_admin.core.actors import Actor
from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.runtimes.models import RUNTIME_NAME_VALIDATOR, AgentRuntime

RULE_SAVED_MESSAGE = "Rule for {pattern} saved."
RULE_DRAFT = "rule-create"
PREVIEW_EMPTY_MESSAGE = "Type a pattern to see how many known skills it matches."
PREVIEW_SAMPLE = 10


def _rule_rows() -> list[dict[str, Any]]:
    """Each rule, with what is wrong with it: a pattern stored before the grammar existed
    is flagged, and so is an ALLOW for every skill."""
    return [
        {
            "rule": rule,
            "problems": policy.skill_pattern_problems(rule.pattern),
            "allows_everything": policy.rule_allows_everything(action=rule.action, pattern=rule.pattern),
        }
        for rule in SkillRule.objects.select_related("runtime").order_by("pattern", "id")
    ]


def _pattern_preview(pattern: str, runtime_name: str) -> dict[str, Any]:
    """How many known skills (seen in requests and grants) a pattern would match, before saving."""
    if not pattern:
        return {"empty": PREVIEW_EMPTY_MESSAGE}
    problems = policy.skill_pattern_problems(pattern)
    if problems:
        return {"pattern": pattern, "problems": problems}
    # Only a well-formed name is looked up: anything else (a NUL byte, say) matches no
    # runtime, and PostgreSQL would refuse the query with an error instead.
    well_formed = bool(runtime_name) and RUNTIME_NAME_VALIDATOR.regex.fullmatch(runtime_name) is not None
    runtime = AgentRuntime.objects.filter(name=runtime_name).first() if well_formed else None
    known = selectors.known_skills(runtime=runtime)
    matched = policy.pattern_matching(pattern, known)
    return {
        "pattern": pattern,
        "runtime": runtime,
        "known": len(known),
        "count": len(matched),
        "sample": matched[:PREVIEW_SAMPLE],
        "more": max(0, len(matched) - PREVIEW_SAMPLE),
        "everything": policy.pattern_matches_everything(pattern),
    }


def _rules_page(
    request: HttpRequest,
    form: RuleForm,
    preview: dict[str, Any] | None = None,
    *,
    tool_rules: dict[str, Any] | None = None,
) -> HttpResponse:
    """The rules page: skill rules, then tool rules (tool_rule_views.py, U1)."""
    return render(
        request,
        "approvals/rules.html",
        {
            "rows": _rule_rows(),
            "form": form,
            "preview": preview or {"empty": PREVIEW_EMPTY_MESSAGE},
            "can_change": request.user.has_perm("approvals.add_skillrule"),
            "tool_rules": tool_rules or tool_rule_views.tool_rules_context(request),
        },
    )


@require_GET
@login_required
@permission_required("approvals.view_skillrule", raise_exception=True)
def rule_list_view(request: HttpRequest) -> HttpResponse:
    # After an invalid POST (post/redirect/get): the form as typed, its errors and its preview.
    form = form_from_draft(request, RULE_DRAFT, RuleForm)
    if not form.is_bound:
        return _rules_page(request, form)
    pattern = form.data.get("pattern", "")[: policy.SKILL_PATTERN_MAX + 1]
    return _rules_page(request, form, _pattern_preview(pattern, form.data.get("runtime", "")))


@require_GET
@login_required
@permission_required("approvals.add_skillrule", raise_exception=True)
def rule_preview_view(request: HttpRequest) -> HttpResponse:
    """What the typed pattern matches: the preview fragment for htmx, else the rules page
    with the form as given in the address."""
    pattern = request.GET.get("pattern", "")[: policy.SKILL_PATTERN_MAX + 1]
    preview = _pattern_preview(pattern, request.GET.get("runtime", ""))
    if request.htmx:
        return render(request, "approvals/rules.html#preview", {"preview": preview})
    fields = ("pattern", "runtime", "action", "widest_scope", "approvers", "note")
    form = RuleForm(initial={name: request.GET[name] for name in fields if name in request.GET})
    return _rules_page(request, form, preview)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("approvals.add_skillrule", raise_exception=True)
def rule_create_view(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        # A reload of an invalid form's page, or a typed address: the form lives on the rules page.
        return redirect(reverse("approvals:rules") + "#new-rule")
    if request.POST.get("check"):
        # "Check pattern" (the no-script preview): the form as typed and what it would
        # match, on a page of its own address (a GET, so a reload asks nothing).
        fields = ("pattern", "runtime", "action", "widest_scope", "approvers", "note")
        query = urlencode({f: request.POST[f] for f in fields if f in request.POST})
        return HttpResponseRedirect(f"{reverse('approvals:rule-preview')}?{query}#new-rule", status=303)
    form = RuleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            rules.rule_create(
                runtime=data["runtime"],
                pattern=data["pattern"],
                action=data["action"],
                widest_scope=data["widest_scope"],
                approvers=data["approvers"],
                note=data["note"],
                allow_everything_confirmed=data["confirm_everything"],
                actor=Actor.for_user(request.user),
            )
        except ValidationError as exc:  # e.g. a rule for this pattern exists already
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else "pattern", error)
        else:
            messages.success(request, RULE_SAVED_MESSAGE.format(pattern=data["pattern"]))
            return redirect("approvals:rules")
    return redirect_invalid(request, form, name=RULE_DRAFT, to=reverse("approvals:rules"), anchor="new-rule")


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("approvals.delete_skillrule", raise_exception=True)
def rule_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    rule = get_object_or_404(SkillRule.objects.select_related("runtime"), pk=pk)
    if request.method == "POST":
        rules.rule_delete(rule=rule, actor=Actor.for_user(request.user))
        messages.success(request, f"Rule for {rule.pattern} deleted.")
        return redirect("approvals:rules")
    return render(
        request,
        "approvals/confirm.html",
        {
            "title": f"Delete the rule for {rule.pattern}?",
            "effect": (
                f"Skills matching {rule.pattern} fall to the next matching rule, or ask. "
                "Approvals already granted stay in force."
            ),
            "items": [],
            "confirm_label": "Delete rule",
            "cancel_url": "approvals:rules",
            "danger": True,
        },
    )
