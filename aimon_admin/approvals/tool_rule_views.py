"""Tool rules on the rules page (U1, U5): the list, the form with its live preview, and
deletion. The rules page (rule_views.rule_list_view) shows them under the skill rules through
`tool_rules_context`; writes go through approvals/tool_rules.py."""

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

from aimon_admin.approvals import rules, tool_rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.forms import TOOL_RULE_TEXT_MAX, ToolRuleForm
from aimon_admin.approvals.models import ToolRule
from aimon_admin.approvals.tool_rule_grammar import RuleTextError, parse_rule_text, rule_text, tool_label
from aimon_admin.core.actors import Actor
from aimon_admin.core.plurals import counted
from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.runtimes.models import RUNTIME_NAME_VALIDATOR, AgentRuntime

TOOL_RULE_SAVED_MESSAGE = "Tool rule {text} saved."
TOOL_RULE_DELETED_MESSAGE = "Tool rule {text} deleted."
TOOL_RULE_DRAFT = "tool-rule-create"
TOOL_PREVIEW_EMPTY_MESSAGE = (
    "Type a rule, e.g. Bash(git status:*), to see the tool it names and the calls it matches."
)
NO_SUBJECT_FLAG = (
    "{tool} has no subject argument named, so this pattern matches no call yet: name one on the "
    "tool's page, or in load_config's toolSubjects."
)
DELETE_DENY_EFFECT = (
    "Calls matching {text} are no longer refused by this rule: the answers and rules after it decide them."
)
DELETE_PRE_APPROVAL_EFFECT = (
    "Unattended calls of {runtime} matching {text} are refused again, as nobody can be asked."
)
DELETE_EFFECT = "Calls matching {text} fall to the next matching rule, or ask."
FIELDS = ("text", "runtime", "action", "unattended", "approvers", "note")


def _rows() -> list[dict[str, Any]]:
    """Each tool rule with what is wrong with it: text stored off the grammar (an ALLOW of
    it reads as ASK), or a pattern for a tool whose subject argument nobody named."""
    named = {(subject.server, subject.tool) for subject in registry_selectors.tool_subjects()}
    rows = []
    for rule in ToolRule.objects.select_related("runtime").order_by("server", "tool", "pattern", "id"):
        text = rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)
        try:
            parse_rule_text(text)
            problems: list[str] = []
        except RuleTextError as exc:
            problems = exc.problems
        no_subject = bool(rule.pattern) and (rule.server, rule.tool) not in named
        rows.append(
            {
                "rule": rule,
                "text": text,
                "problems": problems,
                "no_subject": NO_SUBJECT_FLAG.format(tool=tool_label(server=rule.server, tool=rule.tool))
                if no_subject
                else "",
            }
        )
    return rows


def _runtime_named(name: str) -> AgentRuntime | None:
    # Only a well-formed name is looked up: PostgreSQL refuses a NUL byte with an error.
    if not name or RUNTIME_NAME_VALIDATOR.regex.fullmatch(name) is None:
        return None
    return AgentRuntime.objects.filter(name=name).first()


PREVIEW_MATCHED = {
    RuleAction.ALLOW: (
        "Of the {count} subject asked about recently{by}, it would allow {matched}.",
        "Of the {count} subjects asked about recently{by}, it would allow {matched}.",
    ),
    RuleAction.ASK: (
        "Of the {count} subject asked about recently{by}, it would ask about {matched}.",
        "Of the {count} subjects asked about recently{by}, it would ask about {matched}.",
    ),
    RuleAction.DENY: (
        "Of the {count} subject asked about recently{by}, it would refuse {matched}.",
        "Of the {count} subjects asked about recently{by}, it would refuse {matched}.",
    ),
}
PREVIEW_NOT_COVERED = (
    "{count} more begins the same way but chains another command, redirects, or steps up a path: "
    "an allow does not cover it, so it asks.",
    "{count} more begin the same way but chain another command, redirect, or step up a path: "
    "an allow does not cover them, so they ask.",
)
PREVIEW_MORE = ("and {count} more", "and {count} more")


def _sample(subjects: list[str]) -> dict[str, Any]:
    more = len(subjects) - tool_rules.PREVIEW_SAMPLE
    return {
        "shown": subjects[: tool_rules.PREVIEW_SAMPLE],
        "more": counted(PREVIEW_MORE, more) if more > 0 else "",
    }


def _preview(text: str, runtime_name: str, action: str) -> dict[str, Any]:
    text = text.strip()[: TOOL_RULE_TEXT_MAX + 1]
    if not text:
        return {"empty": TOOL_PREVIEW_EMPTY_MESSAGE}
    runtime = _runtime_named(runtime_name)
    action = action if action in RuleAction.values else RuleAction.ASK
    result = tool_rules.tool_rule_preview(text=text, action=action, runtime=runtime)
    by = f" by {runtime.name}" if runtime else ""
    return {
        "result": result,
        "runtime": runtime,
        "matched_sentence": counted(
            PREVIEW_MATCHED[RuleAction(action)], result.recent, by=by, matched=len(result.matched)
        ),
        "matched": _sample(result.matched),
        "not_covered_sentence": counted(PREVIEW_NOT_COVERED, len(result.not_covered)),
        "not_covered": _sample(result.not_covered),
    }


def _given(data: Any, name: str) -> str:
    return str(data.get(f"tool-{name}", ""))


def tool_rules_context(
    request: HttpRequest, *, form: ToolRuleForm | None = None, preview: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The rules page's tool rules section: the rows, the form (after an invalid POST, as
    typed with its errors) and what its rule would match."""
    if form is None:
        form = form_from_draft(request, TOOL_RULE_DRAFT, ToolRuleForm)
    if preview is None:
        source = form.data if form.is_bound else form.initial
        preview = _preview(_given(source, "text"), _given(source, "runtime"), _given(source, "action"))
    return {
        "rows": _rows(),
        "form": form,
        "preview": preview,
        "can_change": request.user.has_perm("approvals.add_toolrule"),
    }


@require_GET
@login_required
@permission_required("approvals.add_toolrule", raise_exception=True)
def tool_rule_preview_view(request: HttpRequest) -> HttpResponse:
    """What the typed rule names and matches: the fragment for htmx, else the rules page with
    the form as given in the address (the no-script *Check rule*)."""
    preview = _preview(
        _given(request.GET, "text"), _given(request.GET, "runtime"), _given(request.GET, "action")
    )
    if request.htmx:
        return render(request, "approvals/_tool_rules.html#tool-preview", {"preview": preview})
    from aimon_admin.approvals import rule_views  # the rules page is the skill rules' view's

    initial = {name: request.GET[f"tool-{name}"] for name in FIELDS if f"tool-{name}" in request.GET}
    form = ToolRuleForm(initial=initial)
    context = tool_rules_context(request, form=form, preview=preview)
    return rule_views._rules_page(request, rule_views.RuleForm(), tool_rules=context)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("approvals.add_toolrule", raise_exception=True)
def tool_rule_create_view(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return redirect(reverse("approvals:rules") + "#new-tool-rule")
    if request.POST.get("tool-check"):
        # *Check rule* without script: the form as typed and what it would match, at an
        # address of its own (a GET, so a reload asks nothing).
        query = urlencode(
            {f"tool-{f}": request.POST[f"tool-{f}"] for f in FIELDS if f"tool-{f}" in request.POST}
        )
        return HttpResponseRedirect(
            f"{reverse('approvals:tool-rule-preview')}?{query}#new-tool-rule", status=303
        )
    form = ToolRuleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            rule = rules.tool_rule_create(
                text=data["text"],
                action=data["action"],
                runtime=data["runtime"],
                unattended=data["unattended"],
                approvers=data["approvers"],
                note=data["note"],
                actor=Actor.for_user(request.user),
            )
        except ValidationError as exc:  # e.g. the rule exists, or allows a destructive tool whole
            for name, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(name if name in form.fields else "text", error)
        else:
            text = rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)
            messages.success(request, TOOL_RULE_SAVED_MESSAGE.format(text=text))
            for warning in tool_rules.tool_rule_warnings(rule):
                messages.warning(request, warning)
            return redirect(reverse("approvals:rules") + "#tool-rules")
    return redirect_invalid(
        request, form, name=TOOL_RULE_DRAFT, to=reverse("approvals:rules"), anchor="new-tool-rule"
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("approvals.delete_toolrule", raise_exception=True)
def tool_rule_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    rule = get_object_or_404(ToolRule.objects.select_related("runtime"), pk=pk)
    text = rule_text(server=rule.server, tool=rule.tool, pattern=rule.pattern)
    if request.method == "POST":
        rules.rule_delete(rule=rule, actor=Actor.for_user(request.user))
        messages.success(request, TOOL_RULE_DELETED_MESSAGE.format(text=text))
        return redirect(reverse("approvals:rules") + "#tool-rules")
    if rule.action == RuleAction.DENY:
        effect = DELETE_DENY_EFFECT.format(text=text)
    elif rule.unattended and rule.runtime is not None:
        effect = DELETE_PRE_APPROVAL_EFFECT.format(text=text, runtime=rule.runtime.name)
    else:
        effect = DELETE_EFFECT.format(text=text)
    return render(
        request,
        "approvals/confirm.html",
        {
            "title": f"Delete the tool rule {text}?",
            "effect": f"{effect} Approvals already granted stay in force.",
            "items": [],
            "confirm_label": "Delete rule",
            "cancel_url": "approvals:rules",
            "danger": True,
        },
    )
