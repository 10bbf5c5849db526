"""Operators' administration pages: people (add, roles, deactivate, set-password links),
the sign-ins that are locked and their unlock, and the page a set-password link opens."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.views import INTERNAL_RESET_SESSION_TOKEN, PasswordResetConfirmView
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse, reverse_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from aimon_admin.accounts import selectors, services
from aimon_admin.accounts.forms import PersonCreateForm, PersonRolesForm, PersonSetPasswordForm
from aimon_admin.accounts.models import User
from aimon_admin.core.actors import Actor
from aimon_admin.core.prg import form_from_draft, redirect_invalid

PERSON_ADDED_MESSAGE = "{username} added. Pass them the link below so they can set their password."
# Password sign-in off (AIMON_PASSWORD_SIGN_IN): nobody is added by hand. A person added here
# could not sign in, and would hold the username their first sign-in through the provider needs.
PEOPLE_FROM_PROVIDER_MESSAGE = (
    "Password sign-in is off: people are added by their first sign-in through {provider}, with "
    "the roles its claims give them."
)
ROLES_SAVED_MESSAGE = "Roles of {username} saved."
NOTHING_CHANGED_MESSAGE = "Nothing changed."
DEACTIVATED_MESSAGE = (
    "{username} is deactivated: they cannot sign in, and an open session of theirs has ended."
)
ALREADY_INACTIVE_MESSAGE = "{username} was already deactivated."
REACTIVATED_MESSAGE = "{username} can sign in again, with the roles they had."
ALREADY_ACTIVE_MESSAGE = "{username} was already active."
UNLOCKED_MESSAGE = "Sign-in for {username} is unlocked from every address."
LINK_ALREADY_SHOWN_MESSAGE = (
    "This link was shown once already. If it was lost, make a new one: each works until it is "
    "used, until the person signs in, or until it expires."
)
PASSWORD_SET_MESSAGE = "Your password is set. Sign in with it now."  # noqa: S105 - not a secret # nosec B105

# The session key under which a just-made link waits for the one page that shows it.
_NEW_LINK_KEY = "accounts:new-password-link"


def _person(username: str) -> User:
    return get_object_or_404(User.objects.prefetch_related("groups"), username=username)


def _actor(request: HttpRequest) -> Actor:
    return Actor.for_user(request.user)  # type: ignore[arg-type]  # login_required


def _valid_for(hours: int) -> str:
    if hours % 24 == 0 and hours >= 48:
        return f"{hours // 24} days"
    return f"{hours} hours" if hours != 1 else "1 hour"


def _make_link(request: HttpRequest, user: User) -> HttpResponse:
    """Make a set-password link and send the browser to the one page that shows it
    (post/redirect/get: a reload never makes a second one). The link waits in the session
    row, never in a URL or a cookie, for exactly one read."""
    uidb64, token = services.user_password_link(user=user, actor=_actor(request))
    url = request.build_absolute_uri(reverse("accounts:set-password", args=[uidb64, token]))
    request.session[_NEW_LINK_KEY] = {"user": user.pk, "url": url}
    return redirect("accounts:person-link", username=user.username)


# --- People ---------------------------------------------------------------------------------------


def _added_by_provider() -> str | None:
    """Why nobody is added by hand (password sign-in is off), or None."""
    if settings.AIMON_PASSWORD_SIGN_IN:
        return None
    return PEOPLE_FROM_PROVIDER_MESSAGE.format(provider=settings.AIMON_OIDC_PROVIDER_NAME)


@require_GET
@login_required
@permission_required("accounts.view_user", raise_exception=True)
def people_view(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "accounts/people.html",
        {
            "people": selectors.people(),
            "locked": len(selectors.locked_sign_ins()),
            "from_provider": _added_by_provider(),
        },
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("accounts.add_user", raise_exception=True)
def person_create_view(request: HttpRequest) -> HttpResponse:
    refusal = _added_by_provider()
    if refusal is not None:
        messages.error(request, refusal)
        return redirect("accounts:people")
    if request.method == "GET":
        # After an invalid POST (post/redirect/get), the form as typed and its errors.
        form = form_from_draft(request, "person-create", PersonCreateForm)
        return render(request, "accounts/person_create.html", {"form": form})
    form = PersonCreateForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            user = services.user_create(
                username=data["username"],
                password=None,
                roles=data["roles"],
                email=data["email"],
                actor=_actor(request),
            )
        except services.UserExistsError:
            form.add_error("username", "Somebody already has this username (deactivated people keep theirs).")
        else:
            messages.success(request, PERSON_ADDED_MESSAGE.format(username=user.username))
            return _make_link(request, user)
    return redirect_invalid(request, form, name="person-create", to=reverse("accounts:person-create"))


def _roles_draft(person: User) -> str:
    return f"person-roles:{person.pk}"


def _person_page(request: HttpRequest, person: User) -> HttpResponse:
    # After an invalid POST (post/redirect/get), the form as sent and its errors.
    form = form_from_draft(
        request, _roles_draft(person), lambda data: PersonRolesForm(data, initial={"roles": person.roles})
    )
    context = {
        "person": person,
        "form": form,
        "is_me": person.pk == request.user.pk,
        "locks": selectors.locked_sign_ins_of(person.username),
        "oidc_identity": selectors.oidc_identity_of(person),
        "oidc_provider": settings.AIMON_OIDC_PROVIDER_NAME,
        "password_sign_in": settings.AIMON_PASSWORD_SIGN_IN,
    }
    return render(request, "accounts/person.html", context)


@require_GET
@login_required
@permission_required("accounts.view_user", raise_exception=True)
def person_view(request: HttpRequest, username: str) -> HttpResponse:
    return _person_page(request, _person(username))


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def person_roles_view(request: HttpRequest, username: str) -> HttpResponse:
    person = _person(username)
    if request.method == "GET":
        # A typed address, or a reload after an error: the form lives on the person's page.
        return redirect("accounts:person", username=person.username)
    form = PersonRolesForm(request.POST)
    back = reverse("accounts:person", args=[person.username])
    if not form.is_valid():
        return redirect_invalid(request, form, name=_roles_draft(person), to=back, anchor="person-roles")
    before = list(person.roles)
    try:
        services.user_set_roles(user=person, roles=form.cleaned_data["roles"], actor=_actor(request))
    except services.AccessChangeRefusedError as exc:
        form.add_error("roles", str(exc))
        return redirect_invalid(request, form, name=_roles_draft(person), to=back, anchor="person-roles")
    changed = sorted(before) != sorted(form.cleaned_data["roles"])
    text = ROLES_SAVED_MESSAGE.format(username=person.username) if changed else NOTHING_CHANGED_MESSAGE
    messages.success(request, text)
    return redirect("accounts:person", username=person.username)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def person_deactivate_view(request: HttpRequest, username: str) -> HttpResponse:
    person = _person(username)
    back = reverse("accounts:person", args=[person.username])
    if request.method == "POST":
        try:
            done = services.user_deactivate(user=person, actor=_actor(request))
        except services.AccessChangeRefusedError as exc:
            messages.error(request, str(exc))
        else:
            text = DEACTIVATED_MESSAGE if done else ALREADY_INACTIVE_MESSAGE
            messages.success(request, text.format(username=person.username))
        return redirect(back)
    if not person.is_active:
        messages.info(request, ALREADY_INACTIVE_MESSAGE.format(username=person.username))
        return redirect(back)
    refusal = None
    if person.pk == request.user.pk:
        refusal = services.SELF_DEACTIVATE_MESSAGE
    return render(
        request,
        "core/confirm.html",
        {
            "title": f"Deactivate {person.username}?",
            "effect": (
                f"{person.username} will not be able to sign in, and an open session of theirs ends "
                "at its next click. Nothing of theirs is deleted: their answers, grants and events "
                "keep naming them, their roles stay, and you can reactivate them at any time."
            ),
            "refusal": refusal,
            "confirm_label": "Deactivate",
            "danger": True,
            "cancel_href": back,
            "crumbs": [(reverse("accounts:people"), "People"), (back, person.username)],
        },
    )


@require_POST
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def person_reactivate_view(request: HttpRequest, username: str) -> HttpResponse:
    person = _person(username)
    done = services.user_reactivate(user=person, actor=_actor(request))
    text = REACTIVATED_MESSAGE if done else ALREADY_ACTIVE_MESSAGE
    messages.success(request, text.format(username=person.username))
    return redirect("accounts:person", username=person.username)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def person_link_view(request: HttpRequest, username: str) -> HttpResponse:
    """POST makes a set-password link; GET shows a just-made one, once."""
    person = _person(username)
    if request.method == "POST":
        try:
            return _make_link(request, person)
        except services.AccessChangeRefusedError as exc:
            messages.error(request, str(exc))
            return redirect("accounts:person", username=person.username)
    url = None
    waiting = request.session.get(_NEW_LINK_KEY)
    if isinstance(waiting, dict) and waiting.get("user") == person.pk:
        url = waiting.get("url")
        del request.session[_NEW_LINK_KEY]
    response = render(
        request,
        "accounts/person_link.html",
        {
            "person": person,
            "url": url,
            "already_shown": LINK_ALREADY_SHOWN_MESSAGE,
            "valid_for": _valid_for(selectors.password_link_valid_hours()),
        },
    )
    response["Cache-Control"] = "no-store"
    return response


# --- Locked sign-ins ------------------------------------------------------------------------------


@require_GET
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def locked_view(request: HttpRequest) -> HttpResponse:
    context = {
        "locks": selectors.locked_sign_ins(),
        "limit": settings.AXES_FAILURE_LIMIT,
        "minutes": int(settings.AXES_COOLOFF_TIME.total_seconds() // 60),
    }
    return render(request, "accounts/locked.html", context)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("accounts.change_user", raise_exception=True)
def unlock_view(request: HttpRequest, username: str) -> HttpResponse:
    back = reverse("accounts:locked")
    if request.method == "POST":
        services.login_unlock(username=username, actor=_actor(request))
        messages.success(request, UNLOCKED_MESSAGE.format(username=username))
        return redirect(back)
    locks = selectors.locked_sign_ins_of(username)
    addresses = [lock.ip_address or "an unknown address" for lock in locks]
    if locks:
        effect = (
            f"The failed sign-ins counted against {username} are cleared from every address, so "
            "the next attempt is let through to the password check. Unlock only when you know "
            "the failures were theirs (a forgotten password), not someone guessing."
        )
    else:
        effect = (
            f"Sign-in for {username} is not locked just now. Unlocking clears any failed sign-ins "
            "still counted against it, from every address."
        )
    return render(
        request,
        "core/confirm.html",
        {
            "title": f"Unlock sign-in for {username}?",
            "effect": effect,
            "items": [f"Locked from {address}" for address in addresses],
            "confirm_label": "Unlock",
            "danger": False,
            "cancel_href": back,
            "crumbs": [(back, "Locked sign-ins")],
        },
    )


# --- The page a set-password link opens -----------------------------------------------------------


class SetPasswordView(PasswordResetConfirmView):
    """Django's password-reset confirmation, for the link an operator passed on. The password
    is set through the audited service; a deactivated person's link does not work."""

    template_name = "accounts/set_password.html"
    form_class = PersonSetPasswordForm
    success_url = reverse_lazy("accounts:login")
    post_reset_login = False

    def dispatch(self, *args: Any, **kwargs: Any) -> HttpResponse:
        refusal = selectors.password_links_refusal()  # a link made before sign-in changed
        if refusal is not None:
            messages.error(self.request, refusal)
            return redirect("accounts:login")
        return super().dispatch(*args, **kwargs)

    def get_user(self, uidb64: str) -> User | None:
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None

    def get_form(self, form_class: type[PersonSetPasswordForm] | None = None) -> PersonSetPasswordForm:
        """After an invalid POST (post/redirect/get), the errors it was sent back with (no
        password is ever kept: both boxes are empty again)."""
        make = form_class or self.get_form_class()
        if self.request.method == "GET":
            return form_from_draft(self.request, "set-password", lambda data: make(self.user, data))
        return super().get_form(make)

    def form_invalid(self, form: PersonSetPasswordForm) -> HttpResponse:
        return redirect_invalid(self.request, form, name="set-password", to=self.request.path)

    def form_valid(self, form: PersonSetPasswordForm) -> HttpResponse:
        user = self.user
        services.user_set_password(
            user=user, password=form.cleaned_data["new_password1"], actor=Actor.for_user(user)
        )
        self.request.session.pop(INTERNAL_RESET_SESSION_TOKEN, None)
        messages.success(self.request, PASSWORD_SET_MESSAGE)
        return HttpResponseRedirect(self.get_success_url())


set_password_view = SetPasswordView.as_view()
