"""The rules page (operators): skill rules (S2's rule layer), then tool rules (U1, U5). Each
kind is listed with what is wrong with a stored rule, is added on a page of its own (a form
with a live preview of what the typed rule would match), and is deleted behind a
confirmation. One set of views serves both kinds, each route naming its `RuleSection`
(urls.py); writes go through approvals/rules.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from aimon_admin.approvals import policy, rules, selectors, tool_rules
from aimon_admin.approvals.choices import RuleAction
from aimon_admin.approvals.forms import TOOL_RULE_TEXT_MAX, RuleForm, ToolRuleForm
from aimon_admin.approvals.models import SkillRule, ToolRule
from aimon_admin.approvals.tool_rule_grammar import tool_label
from aimon_admin.core.actors import Actor
from aimon_admin.core.plurals import counted
from aimon_admin.core.prg import form_from_draft, redirect_invalid
from aimon_admin.registry import selectors as registry_selectors
from aimon_admin.runtimes.models import RUNTIME_NAME_VALIDATOR, AgentRuntime

STILL_IN_FORCE = "Approvals already granted stay in force."
PREVIEW_EMPTY_MESSAGE = "Type a pattern to see how many known skills it matches."
TOOL_PREVIEW_EMPTY_MESSAGE = (
    "Type a rule, e.g. Bash(git status:*), to see the tool it names and the calls it matches."
)
PREVIEW_SAMPLE = 10
NO_SUBJECT_FLAG = (
    "{tool} has no subject argument named, so this pattern matches no call yet: name one on the "
    "tool's page, or in load_config's toolSubjects."
)
DELETE_SKILL_EFFECT = "Skills matching {pattern} fall to the next matching rule, or ask."
DELETE_DENY_EFFECT = (
    "Calls matching {text} are no longer refused by this rule: the answers and rules after it decide them."
)
DELETE_PRE_APPROVAL_EFFECT = (
    "Unattended calls of {runtime} matching {text} are refused again, as nobody can be asked."
)
DELETE_EFFECT = "Calls matching {text} fall to the next matching rule, or ask."
PREVIEW_MATCHED = (
    "Of the {count} subject asked about recently{by}, it would {verb} {matched}.",
    "Of the {count} subjects asked about recently{by}, it would {verb} {matched}.",
)
PREVIEW_VERBS = {RuleAction.ALLOW: "allow", RuleAction.ASK: "ask about", RuleAction.DENY: "refuse"}
PREVIEW_NOT_COVERED = (
    "{count} more begins the same way but chains another command, redirects, or steps up a path: "
    "an allow does not cover it, so it asks.",
    "{count} more begin the same way but chain another command, redirect, or step up a path: "
    "an allow does not cover them, so they ask.",
)
PREVIEW_MORE = ("and {count} more", "and {count} more")


def _runtime_named(name: str) -> AgentRuntime | None:
    # Only a well-formed name is looked up: anything else (a NUL byte, say) matches no
    # runtime, and PostgreSQL would refuse the query with an error instead.
    if not name or RUNTIME_NAME_VALIDATOR.regex.fullmatch(name) is None:
        return None
    return AgentRuntime.objects.filter(name=name).first()


class RuleSection:
    """What the rules page shows and does for one kind of rule; the views are the same."""

    name: str  # its part of the page's context
    kind: rules.RuleKind
    form: type[RuleForm] | type[ToolRuleForm]
    create: Callable[..., rules.Rule]  # takes its form's cleaned data, and the actor
    route: str  # its URL names' stem: -add, -create, -preview, -delete
    draft: str  # its form's name for post/redirect/get
    row: str  # its rows' ids on the rules page, before the rule's pk
    listed: str  # where on the rules page its rules are listed ("": the top)
    carried: tuple[str, ...]  # the fields *Check* carries to the preview's address
    preview_template: str
    heading: str  # and the rest of its wording
    check_label: str
    save_label: str
    saved_message: str
    delete_title: str
    deleted_message: str

    def prefixed(self, name: str) -> str:
        """A field's name as its form posts it (the tool rule form's is prefixed)."""
        return f"{self.form.prefix}-{name}" if self.form.prefix else name

    @property
    def check_name(self) -> str:  # of its *Check* button
        return self.prefixed("check")

    def typed(self, data: Mapping[str, Any]) -> dict[str, str]:
        """What `data` (a GET, a draft) holds for each of the form's fields, by field name."""
        return {name: str(data.get(self.prefixed(name), "")) for name in self.form.base_fields}

    def rows(self) -> list[dict[str, Any]]: ...  # each rule, with what is wrong with it

    def preview(self, typed: dict[str, str]) -> dict[str, Any]: ...  # what the typed rule would match

    def warnings(self, rule: Any) -> list[str]:  # what to know of a rule just saved
        return []

    def delete_effect(self, rule: Any) -> str: ...  # what deleting it changes


class SkillRuleSection(RuleSection):
    name, kind, form, create = "skill", rules.SKILL, RuleForm, staticmethod(rules.rule_create)
    route, draft, row, listed = "approvals:rule", "rule-create", "rule", ""
    # Never the confirmation of an ALLOW for every skill: a link cannot tick it for anyone.
    carried = ("pattern", "runtime", "action", "widest_scope", "approvers", "note")
    preview_template = "approvals/rule_add.html#skill-preview"
    heading, check_label, save_label = "Add a skill rule", "Check pattern", "Save rule"
    saved_message, deleted_message = "Rule for {text} saved.", "Rule for {text} deleted."
    delete_title = "Delete the rule for {text}?"

    def rows(self) -> list[dict[str, Any]]:
        """A pattern stored before the grammar existed is flagged, and so is an ALLOW for
        every skill."""
        return [
            {
                "rule": rule,
                "problems": policy.skill_pattern_problems(rule.pattern),
                "allows_everything": policy.rule_allows_everything(action=rule.action, pattern=rule.pattern),
            }
            for rule in SkillRule.objects.select_related("runtime").order_by("pattern", "id")
        ]

    def preview(self, typed: dict[str, str]) -> dict[str, Any]:
        """How many known skills (seen in requests and grants) a pattern would match."""
        pattern = typed["pattern"][: policy.SKILL_PATTERN_MAX + 1]
        if not pattern:
            return {"empty": PREVIEW_EMPTY_MESSAGE}
        problems = policy.skill_pattern_problems(pattern)
        if problems:
            return {"pattern": pattern, "problems": problems}
        runtime = _runtime_named(typed["runtime"])
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

    def delete_effect(self, rule: SkillRule) -> str:
        return DELETE_SKILL_EFFECT.format(pattern=rule.pattern)


def _sample(subjects: list[str]) -> dict[str, Any]:
    more = len(subjects) - PREVIEW_SAMPLE
    return {"shown": subjects[:PREVIEW_SAMPLE], "more": counted(PREVIEW_MORE, more) if more > 0 else ""}


class ToolRuleSection(RuleSection):
    name, kind, form, create = "tool", rules.TOOL, ToolRuleForm, staticmethod(rules.tool_rule_create)
    warnings = staticmethod(tool_rules.tool_rule_warnings)
    route, draft, row, listed = "approvals:tool-rule", "tool-rule-create", "tool-rule", "#tool-rules"
    carried = ("text", "runtime", "action", "unattended", "approvers", "note")
    preview_template = "approvals/rule_add.html#tool-preview"
    heading, check_label, save_label = "Add a tool rule", "Check rule", "Save tool rule"
    saved_message, deleted_message = "Tool rule {text} saved.", "Tool rule {text} deleted."
    delete_title = "Delete the tool rule {text}?"

    def rows(self) -> list[dict[str, Any]]:
        """Text stored off the grammar is flagged (an ALLOW of it reads as ASK), and so is a
        pattern for a tool whose subject argument nobody named."""
        named = {(subject.server, subject.tool) for subject in registry_selectors.tool_subjects()}
        rows = []
        for rule in ToolRule.objects.select_related("runtime").order_by("server", "tool", "pattern", "id"):
            no_subject = bool(rule.pattern) and (rule.server, rule.tool) not in named
            label = tool_label(server=rule.server, tool=rule.tool)
            rows.append(
                {
                    "rule": rule,
                    "text": self.kind.text(rule),
                    "problems": self.kind.problems(rule),
                    "no_subject": NO_SUBJECT_FLAG.format(tool=label) if no_subject else "",
                }
            )
        return rows

    def preview(self, typed: dict[str, str]) -> dict[str, Any]:
        """The tool a rule names, its subject, and the recent calls it would match."""
        text = typed["text"].strip()[: TOOL_RULE_TEXT_MAX + 1]
        if not text:
            return {"empty": TOOL_PREVIEW_EMPTY_MESSAGE}
        runtime = _runtime_named(typed["runtime"])
        action = typed["action"] if typed["action"] in RuleAction.values else RuleAction.ASK
        result = tool_rules.tool_rule_preview(text=text, action=action, runtime=runtime)
        by = f" by {runtime.name}" if runtime else ""
        return {
            "result": result,
            "runtime": runtime,
            "matched_sentence": counted(
                PREVIEW_MATCHED,
                result.recent,
                by=by,
                verb=PREVIEW_VERBS[RuleAction(action)],
                matched=len(result.matched),
            ),
            "matched": _sample(result.matched),
            "not_covered_sentence": counted(PREVIEW_NOT_COVERED, len(result.not_covered)),
            "not_covered": _sample(result.not_covered),
        }

    def delete_effect(self, rule: ToolRule) -> str:
        text = self.kind.text(rule)
        if rule.action == RuleAction.DENY:
            return DELETE_DENY_EFFECT.format(text=text)
        if rule.unattended and rule.runtime is not None:
            return DELETE_PRE_APPROVAL_EFFECT.format(text=text, runtime=rule.runtime.name)
        return DELETE_EFFECT.format(text=text)


SKILL = SkillRuleSection()
TOOL = ToolRuleSection()
SECTIONS = (SKILL, TOOL)  # in the page's order


def _add_page(request: HttpRequest, section: RuleSection, form: Any, preview: dict[str, Any]) -> HttpResponse:
    return render(request, "approvals/rule_add.html", {"section": section, "form": form, "preview": preview})


def _perm(verb: str, section: RuleSection) -> str:
    return f"approvals.{verb}_{section.kind.model._meta.model_name}"


def _require(request: HttpRequest, verb: str, section: RuleSection) -> None:
    """The permission `verb` on the kind of rule the route names."""
    if not request.user.has_perm(_perm(verb, section)):
        raise PermissionDenied


@require_GET
@login_required
@permission_required("approvals.view_skillrule", raise_exception=True)
def rule_list_view(request: HttpRequest) -> HttpResponse:
    """Each kind's rules, with an *Add* button for those who may add them."""
    context = {
        section.name: {
            "section": section,
            "rows": section.rows(),
            "can_change": request.user.has_perm(_perm("add", section)),
        }
        for section in SECTIONS
    }
    return render(request, "approvals/rules.html", context)


@require_GET
@login_required
def rule_add_view(request: HttpRequest, section: RuleSection) -> HttpResponse:
    """The form for a new rule, fresh, or after an invalid POST as typed with its errors and
    its preview (post/redirect/get)."""
    _require(request, "add", section)
    form = form_from_draft(request, section.draft, section.form)
    return _add_page(request, section, form, section.preview(section.typed(form.data)))


@require_GET
@login_required
def rule_preview_view(request: HttpRequest, section: RuleSection) -> HttpResponse:
    """What the typed rule matches: the preview fragment for htmx, else the add page with
    the form as given in the address (the no-script *Check*)."""
    _require(request, "add", section)
    typed = section.typed(request.GET)
    preview = section.preview(typed)
    if request.htmx:
        return render(request, section.preview_template, {"preview": preview})
    initial = {name: typed[name] for name in section.carried if section.prefixed(name) in request.GET}
    return _add_page(request, section, section.form(initial=initial), preview)


@require_http_methods(["GET", "POST"])
@login_required
def rule_create_view(request: HttpRequest, section: RuleSection) -> HttpResponse:
    _require(request, "add", section)
    add_page = reverse(f"{section.route}-add")
    if request.method == "GET":
        # A typed address, or one kept from before the form had a page of its own.
        return redirect(add_page)
    if request.POST.get(section.check_name):
        # *Check* without script: the form as typed and what it would match, at an address of
        # its own (a GET, so a reload asks nothing).
        fields = [section.prefixed(name) for name in section.carried]
        query = urlencode({name: request.POST[name] for name in fields if name in request.POST})
        preview = reverse(f"{section.route}-preview")
        return HttpResponseRedirect(f"{preview}?{query}", status=303)
    form = section.form(request.POST)
    if form.is_valid():
        try:
            rule = section.create(actor=Actor.for_user(request.user), **form.cleaned_data)
        except ValidationError as exc:  # e.g. the rule exists, or allows a destructive tool whole
            for name, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(name if name in form.fields else section.kind.field, error)
        else:
            messages.success(request, section.saved_message.format(text=section.kind.text(rule)))
            for warning in section.warnings(rule):
                messages.warning(request, warning)
            return redirect(f"{reverse('approvals:rules')}#{section.row}-{rule.pk}")
    return redirect_invalid(request, form, name=section.draft, to=add_page)


@require_http_methods(["GET", "POST"])
@login_required
def rule_delete_view(request: HttpRequest, pk: int, section: RuleSection) -> HttpResponse:
    _require(request, "delete", section)
    rule = get_object_or_404(section.kind.model.objects.select_related("runtime"), pk=pk)
    text = section.kind.text(rule)
    if request.method == "POST":
        rules.rule_delete(rule=rule, actor=Actor.for_user(request.user))
        messages.success(request, section.deleted_message.format(text=text))
        return redirect(reverse("approvals:rules") + section.listed)
    return render(
        request,
        "approvals/confirm.html",
        {
            "title": section.delete_title.format(text=text),
            "effect": f"{section.delete_effect(rule)} {STILL_IN_FORCE}",
            "items": [],
            "confirm_label": "Delete rule",
            "cancel_url": "approvals:rules",
            "danger": True,
        },
    )
