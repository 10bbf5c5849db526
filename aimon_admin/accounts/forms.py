from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm, SetPasswordForm
from django.contrib.auth.validators import UnicodeUsernameValidator

from aimon_admin.accounts.models import RESERVED_USERNAMES, User
from aimon_admin.accounts.roles import Role


class LoginForm(AuthenticationForm):
    """Django's sign-in form, with the autocomplete hints browsers and password managers use."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].widget.attrs.update({"autocomplete": "username"})
        self.fields["password"].widget.attrs.update({"autocomplete": "current-password"})


ROLES_HELP = (
    "Operator: runtimes, tools, MCP servers, rules and people. Approver: answers requests for "
    "their own sessions. Auditor: reads everything, changes nothing. None: can sign in, sees nothing."
)


class PersonRolesForm(forms.Form):
    roles = forms.MultipleChoiceField(
        choices=Role.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=ROLES_HELP,
    )


class PersonCreateForm(PersonRolesForm):
    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="What they sign in with: letters, digits and @ . + - _ only.",
    )
    email = forms.EmailField(required=False, help_text="Optional; nothing is sent to it.")
    field_order = ["username", "email", "roles"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].widget.attrs.update({"autocomplete": "off"})
        self.fields["roles"].initial = [Role.APPROVER]

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if username.lower() in RESERVED_USERNAMES:
            raise forms.ValidationError(f"{username!r} names one of these pages' addresses; choose another.")
        if User.objects.filter(username__iexact=username).exists():
            raise forms.ValidationError(
                "Somebody already has this username (deactivated people keep theirs)."
            )
        return username


class PersonSetPasswordForm(SetPasswordForm):
    """Django's set-password form, its rules said in one sentence (Django's own help is a
    list, which the field layout cannot hold)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields[
            "new_password1"
        ].help_text = (
            "At least 8 characters, not a common password, not only digits, and not like your username."
        )
