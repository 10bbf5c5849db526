from __future__ import annotations

from typing import Any

from django import forms

from aimon_admin.accounts.models import User
from aimon_admin.core.choices import SideEffectLevel
from aimon_admin.runtimes.models import (
    ESCALATE_AFTER_MAX_SECONDS,
    ESCALATE_AFTER_MIN_SECONDS,
    RUNTIME_DESCRIPTION_MAX,
    RUNTIME_NAME_VALIDATOR,
    AgentRuntime,
)

CEILING_HELP = "Read-only hides and refuses every tool that writes; Writes permits them."
ESCALATE_HELP = (
    "A request nobody has answered after this many minutes is sent to the operators and the "
    "runtime's owner, through their channels, even in their quiet hours. Empty: never."
)
THRESHOLD_HELP = (
    "Read-only (the default): every write asks. Writes: writes that are not destructive run "
    "without a question. Destructive tools always ask, whatever this says."
)


class _RuntimeSettingsFields(forms.Form):
    ceiling = forms.ChoiceField(choices=SideEffectLevel.choices, help_text=CEILING_HELP)
    exempt_at_or_below = forms.ChoiceField(
        label="Approval gate: no question at or below",
        choices=SideEffectLevel.choices,
        help_text=THRESHOLD_HELP,
    )
    owner = forms.ModelChoiceField(
        queryset=User.objects.filter(is_active=True).order_by("username"),
        required=False,
        to_field_name="username",
        help_text="May grant agent-wide approvals for this runtime.",
    )
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=RUNTIME_DESCRIPTION_MAX,
        help_text=f"At most {RUNTIME_DESCRIPTION_MAX} characters.",
    )
    # P2: kept in seconds, asked in minutes.
    escalate_after_minutes = forms.IntegerField(
        label="Send to operators after (minutes)",
        required=False,
        min_value=ESCALATE_AFTER_MIN_SECONDS // 60,
        max_value=ESCALATE_AFTER_MAX_SECONDS // 60,
        help_text=ESCALATE_HELP,
    )

    def escalate_after_seconds(self, current: int | None = None) -> int | None:
        """The cleaned minutes as the seconds the runtime keeps (None: never); `current`
        when the minutes shown for it were sent back unchanged (90 s shows as 1 minute)."""
        minutes = self.cleaned_data.get("escalate_after_minutes")
        if minutes is None:
            return None
        return current if current is not None and current // 60 == minutes else minutes * 60


class RuntimeCreateForm(_RuntimeSettingsFields):
    name = forms.CharField(max_length=100, validators=[RUNTIME_NAME_VALIDATOR])
    field_order = ["name", "ceiling", "exempt_at_or_below", "owner", "escalate_after_minutes", "description"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["ceiling"].initial = SideEffectLevel.MUTATING
        self.fields["exempt_at_or_below"].initial = SideEffectLevel.READ_ONLY

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if AgentRuntime.objects.filter(name=name).exists():
            raise forms.ValidationError("A runtime with this name already exists.")
        return name


class RuntimeSettingsForm(_RuntimeSettingsFields):
    @classmethod
    def for_runtime(cls, runtime: AgentRuntime, data: Any = None) -> RuntimeSettingsForm:
        return cls(
            data,
            initial={
                "ceiling": runtime.ceiling,
                "exempt_at_or_below": runtime.exempt_at_or_below,
                "owner": runtime.owner.username if runtime.owner else None,
                "description": runtime.description,
                "escalate_after_minutes": (
                    runtime.escalate_after_seconds // 60 if runtime.escalate_after_seconds else None
                ),
            },
        )


class TokenIssueForm(forms.Form):
    label = forms.CharField(
        max_length=100,
        required=False,
        help_text="What this token is for, e.g. the host it is installed on.",
    )
