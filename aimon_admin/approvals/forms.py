from __future__ import annotations

from typing import Any

from django import forms
from django.urls import reverse

from aimon_admin.approvals.choices import Answer, GrantScope, RuleAction
from aimon_admin.approvals.models import RULE_NOTE_MAX
from aimon_admin.approvals.policy import (
    PATTERN_GRAMMAR,
    SKILL_PATTERN_MAX,
    rule_allows_everything,
    skill_pattern_problems,
)
from aimon_admin.approvals.rules import ALLOW_EVERYTHING_MESSAGE
from aimon_admin.approvals.subject_patterns import SUBJECT_PATTERN_MAX
from aimon_admin.approvals.tool_rule_grammar import TOOL_NAME_MAX, RuleTextError, parse_rule_text
from aimon_admin.approvals.tool_rules import PRE_APPROVAL_NEEDS_ALLOW, PRE_APPROVAL_NEEDS_RUNTIME
from aimon_admin.runtimes.models import AgentRuntime


class AnswerForm(forms.Form):
    answer = forms.ChoiceField(choices=Answer.choices)
    skill = forms.CharField(max_length=200, required=False)
    # A tool request's subject pattern (U3): "" the whole tool; left out, the narrowest offered.
    pattern = forms.CharField(max_length=SUBJECT_PATTERN_MAX, required=False, strip=False)


PATTERN_HELP = (
    "A skill name, or a pattern where * stands for any run of characters: deploy-* matches "
    "deploy-prod and deploy-dev; * alone matches every skill. " + PATTERN_GRAMMAR
)
CONFIRM_EVERYTHING_LABEL = "Yes, allow every skill without asking anyone"
# P3: the two-person rule, in the words the rules page uses.
APPROVERS_LABEL = "People who must allow"
APPROVERS_CHOICES = [(1, "1"), (2, "2"), (3, "3")]
APPROVERS_HELP = (
    "When this rule asks, how many different people must allow before the approval is written. "
    "The person the request is for never counts, and one Deny from anyone refuses it."
)


class RuleFields(forms.Form):
    """The fields a rule of either kind has; each form sets their place among its own
    (`field_order`)."""

    runtime = forms.ModelChoiceField(
        queryset=AgentRuntime.objects.order_by("name"),
        required=False,
        to_field_name="name",
        empty_label="Every runtime",
    )
    approvers = forms.TypedChoiceField(
        label=APPROVERS_LABEL,
        choices=APPROVERS_CHOICES,
        coerce=int,
        initial=1,
        required=False,  # left out (an older page, a script): one person, as before
        empty_value=1,
        help_text=APPROVERS_HELP,
    )
    note = forms.CharField(
        required=False,
        max_length=RULE_NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=f"Why this rule exists; at most {RULE_NOTE_MAX} characters.",
    )


def live_preview(form: forms.Form, route: str, target: str, what: str, *names: str) -> None:
    """The preview beside a rule form follows the fields `names` as they change (the first as
    it is typed). Each sends the values of them all, never the whole form: its CSRF token
    does not belong in a URL."""
    preview = {"hx-get": reverse(route), "hx-target": target, "hx-swap": "outerHTML", "data-what": what}
    for name in names:
        others = ", ".join(f"[name='{form.add_prefix(other)}']" for other in names if other != name)
        trigger = "input changed delay:300ms, change" if name == names[0] else "change"
        form.fields[name].widget.attrs.update(preview, **{"hx-trigger": trigger, "hx-include": others})
    form.fields[names[0]].widget.attrs["autocomplete"] = "off"


class RuleForm(RuleFields):
    field_order = ("pattern", "runtime", "action", "widest_scope", "approvers", "note", "confirm_everything")
    pattern = forms.CharField(max_length=SKILL_PATTERN_MAX, help_text=PATTERN_HELP)
    action = forms.ChoiceField(
        choices=RuleAction.choices,
        initial=RuleAction.ASK,
        help_text="Applies when no turn, session or agent-wide answer decides the skill.",
    )
    widest_scope = forms.ChoiceField(
        label="Widest answer allowed",
        choices=GrantScope.choices,
        initial=GrantScope.AGENT,
        help_text="Choose “This session” to take 'Always allow for this agent' away for these skills.",
    )
    confirm_everything = forms.BooleanField(
        label=CONFIRM_EVERYTHING_LABEL,
        required=False,
        help_text="Needed only for Allow with the pattern * (it matches every skill).",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        what = "Counting the skills this pattern matches"
        live_preview(self, "approvals:rule-preview", "#pattern-preview", what, "pattern", "runtime")

    def clean_pattern(self) -> str:
        pattern = self.cleaned_data["pattern"]
        problems = skill_pattern_problems(pattern)
        if problems:
            raise forms.ValidationError(problems)
        return pattern

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        pattern, action = data.get("pattern"), data.get("action")
        if (
            pattern
            and action
            and rule_allows_everything(action=action, pattern=pattern)
            and not data.get("confirm_everything")
        ):
            runtime = data.get("runtime")
            where = f" of {runtime.name}" if runtime else " of every runtime"
            self.add_error("confirm_everything", ALLOW_EVERYTHING_MESSAGE.format(where=where))
        return data


# --- Tool rules (U1, U5) ------------------------------------------------------------------------

TOOL_RULE_TEXT_MAX = 100 + 1 + TOOL_NAME_MAX + 2 + SUBJECT_PATTERN_MAX  # server/tool(pattern)
TOOL_RULE_HELP = (
    "The tool, then the subject pattern in brackets: Bash(git status:*). A tool of an MCP "
    "server is written server/tool, e.g. git/git_push(origin:*); the tool's name alone covers "
    "every call of it."
)
PRE_APPROVAL_LABEL = "Pre-approval: only this runtime's unattended runs"
PRE_APPROVAL_HELP = (
    "An Allow that answers this runtime's calls when nobody can be asked (a scheduled run, say), "
    "instead of refusing them. Attended calls still ask a person. Needs Allow and a runtime."
)


class ToolRuleForm(RuleFields):
    field_order = ("text", "runtime", "action", "unattended", "approvers", "note")
    text = forms.CharField(label="Rule", max_length=TOOL_RULE_TEXT_MAX, help_text=TOOL_RULE_HELP)
    action = forms.ChoiceField(
        choices=RuleAction.choices,
        initial=RuleAction.ASK,
        help_text=(
            "Deny applies before any answer a person gave and cannot be granted away; Allow and Ask "
            "apply when no person's answer decides the call."
        ),
    )
    unattended = forms.BooleanField(label=PRE_APPROVAL_LABEL, required=False, help_text=PRE_APPROVAL_HELP)

    prefix = "tool"  # the skill rule form shares the page

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        what = "Looking up the tool and the calls this rule matches"
        live_preview(
            self, "approvals:tool-rule-preview", "#tool-rule-preview", what, "text", "runtime", "action"
        )

    def clean_text(self) -> str:
        text = self.cleaned_data["text"].strip()
        try:
            parse_rule_text(text)
        except RuleTextError as exc:
            raise forms.ValidationError(exc.problems) from exc
        return text

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("unattended"):
            if data.get("action") and data["action"] != RuleAction.ALLOW:
                self.add_error("unattended", PRE_APPROVAL_NEEDS_ALLOW)
            elif not data.get("runtime") and "runtime" not in self.errors:
                self.add_error("unattended", PRE_APPROVAL_NEEDS_RUNTIME)
        return data
