"""Sign-in through an OpenID Connect provider: mozilla-django-oidc's authorization code flow
(with PKCE and a nonce), configured from the AIMON_OIDC_* settings.

What this adds to the library: the provider's endpoints read from its discovery document at
sign-in time (a provider that is down never stops the product, and the sign-in page says so);
the ID token verified in full (signature, issuer, audience, expiry, nonce), not only its
signature; people found by the provider's subject, their roles read from a claim at every
sign-in (policy.roles_from_claims, services.oidc_person_sign_in); and every way a sign-in can
fail ending on the sign-in page with words for the person and an audit event, never a 500.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from aimon_admin.accounts import services
from aimon_admin.accounts.models import User
from aimon_admin.accounts.policy import roles_from_claims

logger = logging.getLogger(__name__)

# Words people read on the sign-in page (tests import these).
PROVIDER_UNREACHABLE_MESSAGE = (
    "{provider} cannot be reached right now, or did not answer as an OpenID Connect provider does."
)
PASSWORD_STILL_WORKS = " You can still sign in with your username and password."  # noqa: S105 - not a secret # nosec B105
UNVERIFIED_MESSAGE = (
    "The sign-in from {provider} was refused: its ID token did not verify (altered, expired, or not "
    "issued for this site). Try again; if it keeps happening, tell an operator."
)
NOT_FINISHED_MESSAGE = "The sign-in at {provider} did not finish ({error}). Try again."
EXPIRED_MESSAGE = "That sign-in had expired or was started in another browser. Try again."
PASSWORD_OFF_TITLE = "Password sign-in is off"  # noqa: S105 - not a secret # nosec B105
PASSWORD_OFF_MESSAGE = "This site signs people in through {provider} only."  # noqa: S105 - not a secret # nosec B105

# How long the provider's endpoints, once read, are used without asking again.
DISCOVERY_SECONDS = 300
_ENDPOINT_FIELDS = {
    "authorization": "authorization_endpoint",
    "token": "token_endpoint",  # nosec B105 # an endpoint's name in the discovery document
    "userinfo": "userinfo_endpoint",
    "jwks": "jwks_uri",
}
# Clock difference allowed between the provider and this site when reading exp and iat.
LEEWAY_SECONDS = 30


class SignInFailed(Exception):
    """A sign-in through the provider that did not happen: the words for the person, and the
    reason the audit log keeps."""

    def __init__(self, message: str, reason: str, username: str = "") -> None:
        super().__init__(reason)
        self.message = message
        self.reason = reason
        self.username = username


def provider_name() -> str:
    return settings.AIMON_OIDC_PROVIDER_NAME


def unreachable_message() -> str:
    message = PROVIDER_UNREACHABLE_MESSAGE.format(provider=provider_name())
    return message + PASSWORD_STILL_WORKS if settings.AIMON_PASSWORD_SIGN_IN else message


def _unreachable(reason: str) -> SignInFailed:
    logger.warning("OpenID Connect provider %s: %s", settings.AIMON_OIDC_ISSUER, reason)
    return SignInFailed(unreachable_message(), reason)


def _get_json(url: str) -> Any:
    try:
        response = requests.get(url, timeout=settings.AIMON_OIDC_TIMEOUT_SECONDS, allow_redirects=False)
        response.raise_for_status()
        return response.json()
    except (requests.RequestException, ValueError) as exc:
        raise _unreachable(f"{url}: {exc.__class__.__name__}: {str(exc)[:200]}") from exc


def endpoints() -> dict[str, str]:
    """The provider's authorization, token, userinfo and JWKS addresses, checked to be there.

    From the AIMON_OIDC_*_ENDPOINT settings when given (then its JWKS is fetched, to know the
    provider answers), else from its discovery document, whose issuer must be the configured
    one (OpenID Connect Discovery 4.3). Kept DISCOVERY_SECONDS; a failure is never kept.
    """
    issuer = settings.AIMON_OIDC_ISSUER
    configured = dict(settings.AIMON_OIDC_ENDPOINTS)
    configuration = json.dumps([issuer, configured], sort_keys=True)
    key = "accounts:oidc-endpoints:" + hashlib.sha256(configuration.encode()).hexdigest()
    found = cache.get(key)
    if found:
        return found
    if all(configured.values()):
        keys = _get_json(configured["jwks"])
        if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
            raise _unreachable(f"{configured['jwks']} holds no JSON Web Key Set")
        found = configured
    else:
        document = _get_json(f"{issuer}/.well-known/openid-configuration")
        if not isinstance(document, dict):
            raise _unreachable("the discovery document is not a JSON object")
        if document.get("issuer") != issuer:
            raise _unreachable(f"the discovery document names issuer {document.get('issuer')!r}")
        found = {name: document.get(field) for name, field in _ENDPOINT_FIELDS.items()}
        for name, address in found.items():
            if not isinstance(address, str) or not address.startswith(("https://", "http://")):
                raise _unreachable(f"the discovery document has no {_ENDPOINT_FIELDS[name]}")
    cache.set(key, found, DISCOVERY_SECONDS)
    return found


# mozilla-django-oidc reads its settings through get_settings: these come from ours, read at
# each call (so a test's settings override reaches them), or are fixed here.
_FROM_OURS = {
    "OIDC_RP_CLIENT_ID": "AIMON_OIDC_CLIENT_ID",
    "OIDC_RP_CLIENT_SECRET": "AIMON_OIDC_CLIENT_SECRET",  # nosec B105 # the name of the variable that holds it
    "OIDC_RP_SCOPES": "AIMON_OIDC_SCOPES",
    "OIDC_TIMEOUT": "AIMON_OIDC_TIMEOUT_SECONDS",
}
_FIXED: dict[str, Any] = {
    "OIDC_RP_SIGN_ALGO": "RS256",
    "OIDC_RP_IDP_SIGN_KEY": None,
    "OIDC_TOKEN_USE_BASIC_AUTH": True,  # nosec B105 # a setting of the library, not a secret
    "OIDC_USE_PKCE": True,
    "OIDC_USE_NONCE": True,
    "OIDC_VERIFY_SSL": True,
    "OIDC_ALLOW_UNSECURED_JWT": False,
    "OIDC_STORE_ACCESS_TOKEN": False,  # nosec B105 # a setting of the library, not a secret
    "OIDC_STORE_ID_TOKEN": False,  # nosec B105 # a setting of the library, not a secret
    "OIDC_AUTHENTICATION_CALLBACK_URL": "accounts:oidc-callback",
    "OIDC_REDIRECT_FIELD_NAME": "next",
}


def oidc_setting(name: str, *default: Any) -> Any:
    if name in _FROM_OURS:
        return getattr(settings, _FROM_OURS[name])
    if name in _FIXED:
        return _FIXED[name]
    return import_from_settings(name, *default)


class OidcBackend(OIDCAuthenticationBackend):
    """Answers only the callback of a sign-in this site started (a code, a state and the
    session's nonce); any other authenticate() call (a password) is not its business."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library reads the endpoints here; ours are read per sign-in, in authenticate.
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if request is None or "nonce" not in kwargs or not settings.AIMON_OIDC_ENABLED:
            return None
        try:
            found = endpoints()
            self.OIDC_OP_TOKEN_ENDPOINT = found["token"]
            self.OIDC_OP_USER_ENDPOINT = found["userinfo"]
            self.OIDC_OP_JWKS_ENDPOINT = found["jwks"]
            self.OIDC_RP_CLIENT_ID = settings.AIMON_OIDC_CLIENT_ID
            self.OIDC_RP_CLIENT_SECRET = settings.AIMON_OIDC_CLIENT_SECRET
            self.OIDC_RP_SIGN_ALGO = _FIXED["OIDC_RP_SIGN_ALGO"]
            self.OIDC_RP_IDP_SIGN_KEY = None
            return super().authenticate(request, **kwargs)
        except SignInFailed as failure:
            request.oidc_failure = failure  # type: ignore[attr-defined]  # read by CallbackView
        except services.OidcSignInRefusedError as exc:
            request.oidc_failure = SignInFailed(str(exc), f"refused: {exc}", exc.username)  # type: ignore[attr-defined]
        except (SuspiciousOperation, jwt.InvalidTokenError) as exc:
            logger.warning("OpenID Connect sign-in refused: %s", exc)
            request.oidc_failure = SignInFailed(  # type: ignore[attr-defined]
                UNVERIFIED_MESSAGE.format(provider=provider_name()), f"ID token refused: {exc}"[:300]
            )
        except (requests.RequestException, ValueError, KeyError, TypeError, jwt.PyJWKError) as exc:
            # The token endpoint, the keys or userinfo down, or answering garbage.
            request.oidc_failure = _unreachable(f"{exc.__class__.__name__}: {str(exc)[:200]}")  # type: ignore[attr-defined]
        return None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims, once its signature (the provider's key, RS256 only), issuer,
        audience, expiry and nonce all check out; the library itself checks only the first."""
        key = self.retrieve_matching_jwk(token)
        claims = jwt.decode(
            token,
            key,
            algorithms=[_FIXED["OIDC_RP_SIGN_ALGO"]],
            audience=settings.AIMON_OIDC_CLIENT_ID,
            issuer=settings.AIMON_OIDC_ISSUER,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise SuspiciousOperation("the ID token's nonce is not this sign-in's")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims with the userinfo endpoint's over them (OpenID Connect Core
        5.3.2: userinfo must be about the same subject, or it is not used)."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
            # Raised as SignInFailed: the library would swallow a SuspiciousOperation from here.
            raise SignInFailed(
                UNVERIFIED_MESSAGE.format(provider=provider_name()), "userinfo is about another subject"
            )
        return {**payload, **userinfo}

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        claims = self.get_userinfo(access_token, id_token, payload)
        claimed = roles_from_claims(
            claims, claim=settings.AIMON_OIDC_ROLES_CLAIM, mapping=settings.AIMON_OIDC_ROLE_MAP
        )
        username = claims.get(settings.AIMON_OIDC_USERNAME_CLAIM)
        email = claims.get("email")
        user = services.oidc_person_sign_in(
            issuer=settings.AIMON_OIDC_ISSUER,
            subject=str(payload["sub"]),
            username=username if isinstance(username, str) else "",
            email=email if isinstance(email, str) else "",
            claimed=claimed,
            provider=provider_name(),
        )
        # For the sign-in's audit event (signals.py) and the person's first page.
        self.request.oidc_sign_in = {  # type: ignore[attr-defined]
            "oidc_issuer": settings.AIMON_OIDC_ISSUER,
            "role_problems": claimed.problems,
        }
        return user


class StartView(OIDCAuthenticationRequestView):
    """The "Sign in with …" button: off to the provider, unless it cannot be reached (then
    back to the sign-in page, which says so)."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)  # not the library's: no endpoint yet

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.AIMON_OIDC_ENABLED:
            raise Http404("sign-in through a provider is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints()["authorization"]
        except SignInFailed as failure:
            messages.error(request, failure.message)
            return login_redirect(request.GET.get("next", ""))
        self.OIDC_RP_CLIENT_ID = settings.AIMON_OIDC_CLIENT_ID
        return super().get(request)


def login_redirect(next_url: str = "") -> HttpResponseRedirect:
    url = reverse("accounts:login")
    return HttpResponseRedirect(f"{url}?{urlencode({'next': next_url})}" if next_url else url)


class CallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: signed in and home, or back on the sign-in
    page with what went wrong (and a LOGIN_FAILED event)."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.AIMON_OIDC_ENABLED:
            raise Http404("sign-in through a provider is not configured")
        try:
            return super().get(request)
        except SuspiciousOperation:  # a state this session never started
            request.oidc_failure = SignInFailed(EXPIRED_MESSAGE, "unknown state")  # type: ignore[attr-defined]
            return self.login_failure()

    def login_success(self) -> HttpResponse:
        for problem in getattr(self.request, "oidc_sign_in", {}).get("role_problems", ()):
            messages.warning(self.request, problem)
        return super().login_success()

    def login_failure(self) -> HttpResponse:
        failure = getattr(self.request, "oidc_failure", None)
        if failure is None:
            error = self.request.GET.get("error", "")
            if error:
                failure = SignInFailed(
                    NOT_FINISHED_MESSAGE.format(provider=provider_name(), error=error[:60]),
                    f"the provider answered {error[:60]!r}",
                )
            else:
                failure = SignInFailed(EXPIRED_MESSAGE, "no sign-in under way in this session")
        services.login_failure_record(
            username=failure.username, oidc_issuer=settings.AIMON_OIDC_ISSUER, reason=failure.reason
        )
        messages.error(self.request, failure.message)
        return login_redirect()


start_view = StartView.as_view()
callback_view = CallbackView.as_view()
