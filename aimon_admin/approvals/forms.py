from __future__ import annotations

from django import forms

from aimon_admin.approvals.choices import Answer, GrantScope, RuleAction
from aimon_admin.runtimes.models import AgentRuntime


class AnswerForm(forms.Form):
    answer = forms.ChoiceField(choices=Answer.choices)
    skill = forms.CharField(max_length=200, required=False)


class RuleForm(forms.Form):
    pattern = forms.CharField(
        max_length=200, help_text="A skill name, or a glob: deploy-* matches deploy-prod and deploy-dev."
    )
    runtime = forms.ModelChoiceField(
        queryset=AgentRuntime.objects.order_by("name"),
        required=False,
        to_field_name="name",
        empty_label="Every runtime",
    )
    action = forms.ChoiceField(
        choices=RuleAction.choices,
        help_text="Applies when no turn, session or agent-wide answer decides the skill.",
    )
    widest_scope = forms.ChoiceField(
        label="Widest answer allowed",
        choices=GrantScope.choices,
        initial=GrantScope.AGENT,
        help_text="Choose SESSION to take 'Always allow for this agent' away for these skills.",
    )
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
