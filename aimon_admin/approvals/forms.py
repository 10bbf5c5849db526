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
from aimon_admin.runtimes.models import AgentRuntime


class AnswerForm(forms.Form):
    answer = forms.ChoiceField(choices=Answer.choices)
    skill = forms.CharField(max_length=200, required=False)


PATTERN_HELP = (
    "A skill name, or a pattern where * stands for any run of characters: deploy-* matches "
    "deploy-prod and deploy-dev; * alone matches every skill. " + PATTERN_GRAMMAR
)
CONFIRM_EVERYTHING_LABEL = "Yes, allow every skill without asking anyone"


class RuleForm(forms.Form):
    pattern = forms.CharField(max_length=SKILL_PATTERN_MAX, help_text=PATTERN_HELP)
    runtime = forms.ModelChoiceField(
        queryset=AgentRuntime.objects.order_by("name"),
        required=False,
        to_field_name="name",
        empty_label="Every runtime",
    )
    action = forms.ChoiceField(
        choices=RuleAction.choices,
        initial=RuleAction.ASK,
        help_text="Applies when no turn, session or agent-wide answer decides the skill.",
    )
    widest_scope = forms.ChoiceField(
        label="Widest answer allowed",
        choices=GrantScope.choices,
        initial=GrantScope.AGENT,
        help_text="Choose SESSION to take 'Always allow for this agent' away for these skills.",
    )
    note = forms.CharField(
        required=False,
        max_length=RULE_NOTE_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=f"Why this rule exists; at most {RULE_NOTE_MAX} characters.",
    )
    confirm_everything = forms.BooleanField(
        label=CONFIRM_EVERYTHING_LABEL,
        required=False,
        help_text="Needed only for ALLOW with the pattern * (it matches every skill).",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The preview of what the pattern matches follows the pattern and the runtime as they change.
        preview = {
            "hx-get": reverse("approvals:rule-preview"),
            "hx-target": "#pattern-preview",
            "hx-swap": "outerHTML",
            "data-what": "Counting the skills this pattern matches",
        }
        # Each sends its own value and the other's; never the whole form, whose CSRF token
        # does not belong in a URL.
        self.fields["pattern"].widget.attrs.update(
            preview,
            **{
                "hx-trigger": "input changed delay:300ms, change",
                "hx-include": "[name='runtime']",
                "autocomplete": "off",
            },
        )
        self.fields["runtime"].widget.attrs.update(
            preview, **{"hx-trigger": "change", "hx-include": "[name='pattern']"}
        )

    def clean_pattern(self) -> str:
        pattern = self.cleaned_data["pattern"]
        problems = skill_pattern_problems(pattern)
        if problems:
            raise forms.ValidationError(problems)
        return pattern

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        pattern = data.get("pattern")
        action = data.get("action")
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
