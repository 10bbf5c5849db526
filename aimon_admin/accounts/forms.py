from __future__ import annotations

from django.contrib.auth.forms import AuthenticationForm


class LoginForm(AuthenticationForm):
    """Django's sign-in form, with the autocomplete hints browsers and password managers use."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].widget.attrs.update({"autocomplete": "username"})
        self.fields["password"].widget.attrs.update({"autocomplete": "current-password"})
