"""Settings for AIMON Admin, read from the environment.

With nothing set the product runs on its embedded default: a SQLite file in the
project folder, no Redis, Celery tasks run eagerly, wake-ups in-process. Production
sets DATABASE_URL (PostgreSQL) and REDIS_URL; see README.md for every variable.
"""

from __future__ import annotations

import ipaddress
import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_mapping(name: str) -> dict[str, list[str]]:
    """VALUE=ROLE pairs, comma-separated (`ops=operator,sec=auditor`); a value named twice
    gives both roles."""
    pairs: dict[str, list[str]] = {}
    for item in env_list(name, []):
        value, sep, role = item.partition("=")
        if not sep or not value.strip() or not role.strip():
            raise ImproperlyConfigured(f"{name} must be VALUE=ROLE pairs separated by commas, not {item!r}")
        pairs.setdefault(value.strip(), []).append(role.strip())
    return pairs


DEBUG = env_bool("DJANGO_DEBUG")
# The embedded demo (`make run`): one machine, SQLite, demo data, plain HTTP on localhost.
# DEBUG stays off there, so its pages are the product's own (styled errors, never a
# traceback); the demo only relaxes what a local trial cannot provide.
DEMO = env_bool("AIMON_DEMO")
LOCAL = DEBUG or DEMO

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not LOCAL:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is required unless AIMON_DEMO or DJANGO_DEBUG is set (see README.md)."
        )
    # Only ever used by the local demo or with DJANGO_DEBUG on a developer's machine.
    SECRET_KEY = "insecure-local-only-key-do-not-use-in-production"  # noqa: S105 - not a secret # nosec B105 # local only; otherwise a missing key is an error

ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"] if LOCAL else [])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "aimon_admin.accounts",
    "aimon_admin.core",
    "aimon_admin.audit",
    "aimon_admin.runtimes",
    "aimon_admin.registry",
    "aimon_admin.approvals",
    "aimon_admin.notifications",
    "aimon_admin.demo",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "axes",
    "csp",
]

MIDDLEWARE = [
    # The runtime API's lean stack: its requests leave here for RUNTIME_API_MIDDLEWARE below.
    "aimon_admin.core.middleware.RuntimeApiStack",
    "aimon_admin.core.middleware.RequestIdMiddleware",
    # One log record per request, timing everything below it (aimon_admin.core.logging).
    "aimon_admin.core.middleware.RequestLogMiddleware",
    "aimon_admin.core.middleware.ApiBodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Content-Length on every answer, and the trailing-slash redirects.
    "django.middleware.common.CommonMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # After every middleware that can answer on its own, so a locked-out sign-in is
    # answered with the lockout page (axes.middleware reads what its backend marked).
    "axes.middleware.AxesMiddleware",
    # A bare 405 becomes the styled error page (sync, no thread hop).
    "aimon_admin.core.middleware.StyledErrorMiddleware",
    "aimon_admin.core.middleware.SyncStackMiddleware",
]

# The runtime API and the OpenID AuthZEN endpoints (and their discovery document), served by
# a handler of their own (core.middleware.RuntimeApiStack) with only RUNTIME_API_MIDDLEWARE:
# a bearer-token JSON call needs no session, CSRF, sign-in, messages, static files or content
# security policy (JSON answers, which no such policy governs; the API's docs page,
# /api/docs/, is a page and has one). Token authentication is the API views' own (DRF).
RUNTIME_API_PREFIXES = ("/api/v1/", "/access/v1/", "/.well-known/authzen-configuration")
# The health and readiness probes (aimon_admin/health.py) take the same lean stack, by exact
# path: no session, sign-in, CSRF or lockout check stands between a balancer and its answer.
PROBE_PATHS = ("/healthz", "/readyz")
RUNTIME_API_MIDDLEWARE = [
    "aimon_admin.core.middleware.RequestIdMiddleware",
    "aimon_admin.core.middleware.RequestLogMiddleware",
    "aimon_admin.core.middleware.ApiBodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    # 503 with Retry-After when the database is down, wherever it is met.
    "aimon_admin.core.middleware.StyledErrorMiddleware",
    "aimon_admin.core.middleware.SyncStackMiddleware",
]

ROOT_URLCONF = "aimon_admin.urls"
WSGI_APPLICATION = "aimon_admin.wsgi.application"
ASGI_APPLICATION = "aimon_admin.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "aimon_admin.navigation.navigation",
                "aimon_admin.accounts.context_processors.roles",
            ],
        },
    }
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
_db = dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0))
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["OPTIONS"] = {
        # IMMEDIATE makes every transaction take the write lock up front, so two writers
        # queue instead of one failing half-way (and the audit chain cannot fork).
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif _db["ENGINE"] == "django.db.backends.postgresql":
    _db.setdefault("OPTIONS", {})
    _db["OPTIONS"].setdefault("connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 5))
    if env_bool("DATABASE_POOL", True):
        # A connection pool per process (psycopg-pool), as Django advises under ASGI, where
        # every request's sync code runs in a thread of its own and a persistent
        # connection would never be reused. A request (or a long-poll's re-read, after a
        # wake-up) then borrows an open connection instead of opening one (~3-8 ms).
        if _db.get("CONN_MAX_AGE"):
            raise ImproperlyConfigured("DATABASE_CONN_MAX_AGE must be 0 with DATABASE_POOL on")
        _db["OPTIONS"]["pool"] = {
            "min_size": env_int("DATABASE_POOL_MIN_SIZE", 2),
            "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20),
            # How long a request waits for a connection before it fails (a 503): with the
            # database down, how long a caller waits to be told so.
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 5),
        }
        # A borrowed connection is checked first (psycopg-pool's standard check), so
        # connections left broken by a database restart are replaced, not handed to a
        # request. The backend is Django's, its pool reconnecting at least once a second
        # after an outage (aimon_admin/core/dbpool.py).
        _db["CONN_HEALTH_CHECKS"] = True
        _db["ENGINE"] = "aimon_admin.core.backends.postgresql"
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, cache, Celery ---------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")

if REDIS_URL:
    CACHES = {
        "default": {
            # Django's Redis cache, read as a miss while Redis is down: nothing cached is
            # the truth, so an outage costs a slower path, never an error.
            "BACKEND": "aimon_admin.core.cache.ResilientRedisCache",
            "LOCATION": REDIS_URL,
            # Fail fast when Redis is unreachable rather than hold a request.
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"  # named: kombu warns of a bare memory://
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A message a worker took and never acknowledged (the worker was killed) goes back to the
# queue once it has been out this long. Every task is safe to run twice (a duplicate of a
# task still running steps aside), so this is shorter than the longest task: a killed
# worker's MCP sync is retried well before `registry.fail_stale_mcp_syncs` gives up on it.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_BROKER_VISIBILITY_TIMEOUT", 600),
}
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
# P2: notifications' fan-outs, sends and digests have a queue of their own, so a burst of
# them never delays what stays on the default queue ("celery"): request expiry, MCP syncs,
# the audit check and the notifications sweep (it only queues). make prod's worker takes both.
CELERY_TASK_ROUTES = {
    "notifications.fan_out": {"queue": "notifications"},
    "notifications.deliver": {"queue": "notifications"},
    "notifications.send_digest": {"queue": "notifications"},
}
CELERY_BEAT_SCHEDULE: dict[str, dict] = {
    # S9: close approval requests nobody answered in time (reads also expire them on sight).
    "approvals-expire-due-requests": {"task": "approvals.expire_due_requests", "schedule": 30.0},
    # Fail MCP syncs whose worker died without finishing them (its lease lapsed), so the
    # server can sync again; as often as registry/sync/runs.py LEASE_CHECK_SECONDS.
    "registry-fail-stale-mcp-syncs": {"task": "registry.fail_stale_mcp_syncs", "schedule": 15.0},
    # A2: verify the audit chain from the last checkpoint and write the outcome as an event.
    "audit-verify-chain": {
        "task": "audit.verify_chain",
        "schedule": float(env_int("AIMON_AUDIT_VERIFY_INTERVAL_SECONDS", 3600)),
    },
    # A4: sign a checkpoint of the audit log's Merkle tree and publish it.
    "audit-sign-checkpoint": {
        "task": "audit.sign_checkpoint",
        "schedule": 60.0 * env_int("AIMON_AUDIT_CHECKPOINT_MINUTES", 15),
    },
    # P2: fan-outs owed and sends nobody queued or finished (Redis or a worker was down),
    # retries and digests due; each queued once.
    "notifications-sweep": {"task": "notifications.sweep", "schedule": 10.0},
}

# --- Auth -------------------------------------------------------------------------------------
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "core:home"
LOGOUT_REDIRECT_URL = "accounts:login"
# AxesStandaloneBackend first: it refuses a locked-out sign-in before any password is checked.
# Then Django's own ModelBackend: reading a person's permissions and roles in one query instead
# saves under 10% of the answer click's server time (docs/performance.md), less than a special
# must buy.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Sign-in through OpenID Connect (docs/operations.md#sign-in-through-openid-connect) ---------
# Off unless AIMON_OIDC_ISSUER is set. The provider's endpoints come from its discovery
# document ({issuer}/.well-known/openid-configuration), read when someone signs in (a provider
# that is down never stops the product starting), unless all four are given here.
# aimon_admin.accounts.oidc hands these to mozilla-django-oidc, which does the code flow.
AIMON_OIDC_ISSUER = os.environ.get("AIMON_OIDC_ISSUER", "").strip().rstrip("/")
AIMON_OIDC_ENABLED = bool(AIMON_OIDC_ISSUER)
AIMON_OIDC_ENDPOINTS = {
    name: os.environ.get(f"AIMON_OIDC_{name.upper()}_ENDPOINT", "").strip()
    for name in ("authorization", "token", "userinfo", "jwks")
}
AIMON_OIDC_CLIENT_ID = os.environ.get("AIMON_OIDC_CLIENT_ID", "").strip()
AIMON_OIDC_CLIENT_SECRET = os.environ.get("AIMON_OIDC_CLIENT_SECRET", "")
AIMON_OIDC_SCOPES = os.environ.get("AIMON_OIDC_SCOPES", "openid profile email").strip()
AIMON_OIDC_USERNAME_CLAIM = os.environ.get("AIMON_OIDC_USERNAME_CLAIM", "preferred_username").strip()
AIMON_OIDC_ROLES_CLAIM = os.environ.get("AIMON_OIDC_ROLES_CLAIM", "groups").strip()
AIMON_OIDC_PROVIDER_NAME = os.environ.get("AIMON_OIDC_PROVIDER_NAME", "single sign-on").strip()
AIMON_OIDC_TIMEOUT_SECONDS = env_int("AIMON_OIDC_TIMEOUT_SECONDS", 5)
AIMON_PASSWORD_SIGN_IN = env_bool("AIMON_PASSWORD_SIGN_IN", default=True)


# Claim value -> role (operator, approver, auditor). Empty: each value is taken as a role's name.
AIMON_OIDC_ROLE_MAP = env_mapping("AIMON_OIDC_ROLE_MAP")
if AIMON_OIDC_ENABLED:
    if not re.fullmatch(r"https?://[^/?#@\s]+(/[^?#@\s]*)?", AIMON_OIDC_ISSUER):
        raise ImproperlyConfigured("AIMON_OIDC_ISSUER must be the provider's http:// or https:// address")
    if not (AIMON_OIDC_CLIENT_ID and AIMON_OIDC_CLIENT_SECRET):
        raise ImproperlyConfigured(
            "AIMON_OIDC_CLIENT_ID and AIMON_OIDC_CLIENT_SECRET are required with AIMON_OIDC_ISSUER"
        )
    if "openid" not in AIMON_OIDC_SCOPES.split():
        raise ImproperlyConfigured("AIMON_OIDC_SCOPES must include openid")
    if any(AIMON_OIDC_ENDPOINTS.values()) and not all(AIMON_OIDC_ENDPOINTS.values()):
        raise ImproperlyConfigured(
            "AIMON_OIDC_AUTHORIZATION_ENDPOINT, _TOKEN_ENDPOINT, _USERINFO_ENDPOINT and _JWKS_ENDPOINT go "
            "together: all four, or none (the provider's discovery document)"
        )
if not AIMON_PASSWORD_SIGN_IN and not AIMON_OIDC_ENABLED:
    raise ImproperlyConfigured("AIMON_PASSWORD_SIGN_IN=0 needs AIMON_OIDC_ISSUER: nobody could sign in")
# Sign-in through the provider: its backend (Django's ModelBackend for permissions, as above)
# after axes. Password sign-in off: ModelBackend goes, so no password is checked anywhere (the
# Django admin's sign-in too), and sessions it started end.
if AIMON_OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.insert(1, "aimon_admin.accounts.oidc.OidcBackend")
if not AIMON_PASSWORD_SIGN_IN:
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")

# --- Internationalisation ---------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files -----------------------------------------------------------------------------
STATIC_URL = "static/"
# Where collectstatic writes (outside the code folder where that is read-only).
# The demo and development serve from the source folders and collect nothing: no root
# (WhiteNoise would warn about a folder that does not exist).
_static_root = os.environ.get("DJANGO_STATIC_ROOT")
STATIC_ROOT = Path(_static_root) if _static_root else (None if LOCAL else BASE_DIR / "staticfiles")
STATICFILES_DIRS = [BASE_DIR / "static"]
# The demo and development serve static files straight from the source folders (nothing to
# collect); production serves what collectstatic wrote, compressed and with hashed names.
WHITENOISE_USE_FINDERS = LOCAL
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if LOCAL
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- Request limits (docs/api.md: bodies over 1 MiB are refused) ------------------------------
API_MAX_BODY_BYTES = 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES

# --- Security ---------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not LOCAL)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CSRF_FAILURE_VIEW = "aimon_admin.core.views.csrf_failure"
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0)
# HSTS for every subdomain, and the browsers' preload list, bind the whole domain and cannot
# be undone quickly: each is a decision for the domain's owner. 1 sends it; 0 declines it
# and, being a decision, silences `check --deploy`'s reminder (W005 / W021); unset, the
# reminder stays.
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS: list[str] = []
if os.environ.get("DJANGO_HSTS_INCLUDE_SUBDOMAINS", "").strip() and not SECURE_HSTS_INCLUDE_SUBDOMAINS:
    SILENCED_SYSTEM_CHECKS.append("security.W005")
if os.environ.get("DJANGO_HSTS_PRELOAD", "").strip() and not SECURE_HSTS_PRELOAD:
    SILENCED_SYSTEM_CHECKS.append("security.W021")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SSL_REDIRECT", default=False)
# Probes often come over plain HTTP from inside the network (a balancer, a kubelet): answered
# where they are asked, never redirected to HTTPS.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
if env_bool("DJANGO_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Sign-in throttling (django-axes) ---------------------------------------------------------
# After AIMON_LOGIN_FAILURE_LIMIT failed sign-ins for one username from one address, that
# pair is refused (429, the lockout page) for AIMON_LOGIN_LOCKOUT_MINUTES, and the lockout
# is an audit event (LOGIN_LOCKED_OUT). Another address, or another username from the same
# address, is not affected, so an attacker cannot lock a person out from everywhere.
# Operators unlock with `manage.py unlock_login <username>` (audited) or axes' own
# `axes_reset_username` / `axes_reset` (not audited).
AXES_ENABLED = True
AXES_FAILURE_LIMIT = env_int("AIMON_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AIMON_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "aimon_admin.accounts.views.lockout"
AXES_CLIENT_IP_CALLABLE = "aimon_admin.core.addresses.client_ip"
# Behind a TLS proxy the client's address (failed sign-ins are counted under it, the metrics'
# allow-list reads it) is the one the proxy appended to X-Forwarded-For;
# behind make prod's own nginx (AIMON_BEHIND_PROXY, set by scripts/prod.py) too: it names
# the client there (or passes on what the TLS proxy in front of it appended).
AIMON_TRUST_FORWARDED_FOR = env_bool("DJANGO_BEHIND_TLS_PROXY", default=False) or env_bool(
    "AIMON_BEHIND_PROXY", default=False
)
# Sign-ins and sign-outs are already in the audit log; axes keeps only the failure counts.
AXES_DISABLE_ACCESS_LOG = True
AXES_ENABLE_ACCESS_FAILURE_LOG = False
AXES_VERBOSE = False
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "password"]
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("AIMON_LOGIN_FAILURE_LIMIT must be at least 1")

# --- Content-Security-Policy (django-csp) -----------------------------------------------------
# No inline script or style anywhere: scripts and styles come from our own static files;
# the one exception, the Swagger UI page at /api/docs/, carries a per-response nonce on its
# inline start-up script and style (templates/drf_spectacular/swagger_ui.html). htmx is told
# not to inject its indicator <style> (the htmx-config meta tag in base.html), and hx-on
# attributes are not used (they would need 'unsafe-eval'). data: images are Swagger UI's
# icons, drawn from its own stylesheet.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "font-src": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
        "base-uri": [NONE],
        "object-src": [NONE],
    }
}

# --- REST framework ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "aimon_admin.runtimes.authentication.RuntimeTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["aimon_admin.core.parsers.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "aimon_admin.core.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "AIMON Admin runtime API",
    "DESCRIPTION": (
        "The token-authenticated API agent runtimes use: skill and tool decisions, approval "
        "requests, session commands, tool registration and MCP server configs."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Deep links put a link inside each operation's toggle button (nested controls, 19 px
    # targets): off, so /api/docs/ passes axe-core like every other page.
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    "COMPONENT_SPLIT_REQUEST": True,
    # Operation ids and tags from the part after /api (v1_tool_decisions_create, tag v1), as
    # before the AuthZEN endpoints (/access/v1/…, /.well-known/…) widened the common prefix.
    "SCHEMA_PATH_PREFIX": "/api",
    "ENUM_NAME_OVERRIDES": {
        "SideEffectLevelEnum": "aimon_admin.registry.choices.SideEffectLevel",
        "ToolDecisionEnum": "aimon_admin.registry.choices.ToolDecision",
        "GateReasonEnum": "aimon_admin.registry.choices.GateReason",
        "ToolSourceEnum": "aimon_admin.registry.choices.ToolSource",
        "McpTransportEnum": "aimon_admin.registry.choices.McpTransport",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "aimon_admin.core.schema.strip_optional_trailing_slash",
    ],
}

# --- Logging ----------------------------------------------------------------------------------
# One record per request (aimon.requests) and per Celery task (aimon.tasks), and
# whatever else is logged, in one of two formats: `text`, a line for people (make run), or
# `json`, one JSON object per line for a log collector (make prod sets it). Either way each
# record carries the request id the error pages show.
LOG_FORMATS = ("text", "json")
AIMON_LOG_FORMAT = os.environ.get("AIMON_LOG_FORMAT", "").strip().lower() or "text"
if AIMON_LOG_FORMAT not in LOG_FORMATS:
    raise ImproperlyConfigured(f"AIMON_LOG_FORMAT must be text or json, not {AIMON_LOG_FORMAT!r}")


def logging_config(log_format: str, level: str) -> dict:
    """The logging configuration for a format (LOG_FORMATS) and a root level."""
    from pythonjsonlogger.core import RESERVED_ATTRS

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": "aimon_admin.core.logging.RequestIdFilter"},
            "no_4xx_traceback": {"()": "aimon_admin.core.logging.ClientErrorWithoutTraceback"},
        },
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": ["levelname", "name", "request_id", "message"],
                "timestamp": "time",
                "rename_fields": {"levelname": "level", "name": "logger"},
                # Django's request object rides on its records: never serialised (its repr
                # carries the query string); uvicorn's coloured copy of the message neither.
                "reserved_attrs": [*RESERVED_ATTRS, "taskName", "request", "color_message"],
            },
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                # On the handler: every 4xx line it prints (django.security.* included) is one line.
                "filters": ["request_id", "no_4xx_traceback"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Django's own handlers would print every line twice next to ours.
            "django": {"handlers": ["console"], "propagate": False},
            # On the logger too, so the record itself loses the traceback before any handler
            # (another handler added later, or a test's) sees it.
            "django.request": {"filters": ["no_4xx_traceback"]},
            # A task's one record is aimon.tasks': Celery's "received" and "succeeded"
            # lines would make it three (its failures, at ERROR, stay).
            "celery.app.trace": {"level": "WARNING"},
            "celery.worker.strategy": {"level": "WARNING"},
            # uvicorn's own lines (started, stopping) in the same format as everything else;
            # its access line never: the request's own record (aimon.requests) says more.
            "uvicorn": {"handlers": ["console"], "propagate": False},
            "uvicorn.access": {"handlers": [], "propagate": False},
            # A failed readiness check is one line of aimon_admin.health's, not a traceback
            # per check per probe; the library's unexpected errors (ERROR) stay.
            "health_check": {"level": "ERROR"},
        },
    }


LOGGING = logging_config(AIMON_LOG_FORMAT, os.environ.get("LOG_LEVEL", "INFO"))

# --- Product settings -------------------------------------------------------------------------
# S12: session approvals end when a session has been idle this long.
AIMON_SESSION_IDLE_TTL_SECONDS = env_int("AIMON_SESSION_IDLE_TTL_SECONDS", 24 * 3600)
# S9: an approval request nobody answers expires after this many seconds by default.
AIMON_REQUEST_DEFAULT_TIMEOUT_SECONDS = 300

# The help's first screen for the person reading it: a quick start per role (core.help calls
# it; the roles and the pages each opens are known above core, in the menu).
AIMON_HELP_FOR_READER = "aimon_admin.navigation.help_for"

# Where `make run` keeps the demo credentials it prints (never used outside the demo).
DEMO_CREDENTIALS_FILE = BASE_DIR / ".demo-credentials.json"

# --- Metrics (GET /metrics, core.metrics; docs/operations.md "Metrics") -------------------------
# Prometheus scrapes with this token (Authorization: Bearer ...), or from an allowed address
# (addresses or CIDR networks, comma separated). Neither set: /metrics answers 403.
AIMON_METRICS_TOKEN = os.environ.get("AIMON_METRICS_TOKEN", "").strip()
METRICS_TOKEN_MIN_LENGTH = 16
if AIMON_METRICS_TOKEN and len(AIMON_METRICS_TOKEN) < METRICS_TOKEN_MIN_LENGTH:
    raise ImproperlyConfigured(
        f"AIMON_METRICS_TOKEN must be at least {METRICS_TOKEN_MIN_LENGTH} characters "
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')."
    )
AIMON_METRICS_ALLOW = env_list("AIMON_METRICS_ALLOW", [])
for _entry in AIMON_METRICS_ALLOW:
    try:
        ipaddress.ip_network(_entry, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(
            f"AIMON_METRICS_ALLOW: {_entry!r} is not an address or a network (e.g. 10.0.0.0/8)."
        ) from _exc

# --- Audit checkpoints (A4, docs/rules.md) -----------------------------------------------------------
# A4: signed checkpoints of the audit log. The Ed25519 key lives in the file named here, outside
# the database (manage.py audit_key create PATH; make run makes a demo key); checkpoints are
# written to the directory, one every AIMON_AUDIT_CHECKPOINT_MINUTES (docs/operations.md).
AIMON_AUDIT_SIGNING_KEY = os.environ.get(
    "AIMON_AUDIT_SIGNING_KEY", str(BASE_DIR / ".demo-audit-signing-key.pem") if DEMO else ""
)
AIMON_AUDIT_CHECKPOINT_DIR = os.environ.get("AIMON_AUDIT_CHECKPOINT_DIR", str(BASE_DIR / "audit-checkpoints"))
# A4: and to an S3-compatible bucket too when this is set (s3://BUCKET or s3://BUCKET/PREFIX);
# the endpoint is empty for AWS, the server's address for MinIO, Ceph and the like. The
# credentials come from boto3's own chain (AWS_ACCESS_KEY_ID..., a profile, an instance
# role), never from these settings, so neither may carry a user name or password.
AIMON_AUDIT_CHECKPOINT_S3_URL = os.environ.get("AIMON_AUDIT_CHECKPOINT_S3_URL", "").strip()
AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = os.environ.get("AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT", "").strip()
if AIMON_AUDIT_CHECKPOINT_S3_URL and not re.fullmatch(
    r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^?#\s]*)?", AIMON_AUDIT_CHECKPOINT_S3_URL
):
    raise ImproperlyConfigured(
        "AIMON_AUDIT_CHECKPOINT_S3_URL must be s3://BUCKET or s3://BUCKET/PREFIX (a bucket name: "
        "3-63 lower-case letters, digits, dots and hyphens; credentials come from AWS_ACCESS_KEY_ID "
        "and the rest of boto3's chain, never the URL)"
    )
if AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT and not re.fullmatch(
    r"https?://[^/?#@\s]+(/[^?#@\s]*)?", AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT
):
    raise ImproperlyConfigured(
        "AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT must be an http:// or https:// address without a user "
        "name or password (for example https://minio.example.org:9000), or empty for AWS"
    )
AIMON_AUDIT_CHECKPOINT_MINUTES = env_int("AIMON_AUDIT_CHECKPOINT_MINUTES", 15)

# --- Secrets at rest ---------------------------------------------------------------------------
# What the product keeps for other systems (MCP servers' env, headers and URL, channels'
# addresses, webhooks' signing secrets) is encrypted in the database with Fernet keys kept
# outside it: AIMON_SECRETS_KEY holds them (newest first, separated by commas), or
# AIMON_SECRETS_KEY_FILE names a file of them, one a line (aimon_admin/core/encryption.py;
# `manage.py secrets_key create` makes one). make run keeps a demo key beside its SQLite file.
# A missing or malformed key stops every process at start (core.E001).
AIMON_SECRETS_KEY = os.environ.get("AIMON_SECRETS_KEY", "").strip()
AIMON_SECRETS_KEY_FILE = os.environ.get(
    "AIMON_SECRETS_KEY_FILE", str(BASE_DIR / ".demo-secrets-key") if DEMO and not AIMON_SECRETS_KEY else ""
).strip()

# --- Notifications (P1-P4) --------------------------------------------------------------------
# The address people open the product at: every message's one link starts with it.
# Unset in production: https:// and the first name in DJANGO_ALLOWED_HOSTS.
_public_host = next((h for h in ALLOWED_HOSTS if h and h != "*" and not h.startswith(".")), "")
_default_base_url = "http://127.0.0.1:8000" if LOCAL else (f"https://{_public_host}" if _public_host else "")
AIMON_BASE_URL = os.environ.get("AIMON_BASE_URL", _default_base_url).rstrip("/")
# Server-side request forgery: a channel may point at a private, loopback or shared address
# only when this is on (the demo and the tests, whose receivers run on this machine).
# Link-local addresses (cloud metadata) and the product itself are refused always.
AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = env_bool("AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES", default=LOCAL)
# Every send is time-limited (connect and answer); a failed one is retried with back-off up
# to this many tries; a channel failing this many times in a row is marked broken.
AIMON_NOTIFY_TIMEOUT_SECONDS = env_int("AIMON_NOTIFY_TIMEOUT_SECONDS", 5)
AIMON_NOTIFY_MAX_ATTEMPTS = env_int("AIMON_NOTIFY_MAX_ATTEMPTS", 8)
AIMON_NOTIFY_BROKEN_AFTER = env_int("AIMON_NOTIFY_BROKEN_AFTER", 5)
# Email through SMTP when EMAIL_HOST is set; without it (the demo) messages are printed.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = AIMON_NOTIFY_TIMEOUT_SECONDS
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "AIMON Admin <aimon@localhost>")
