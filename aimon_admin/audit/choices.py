"""What the audit log can say (DESIGN A1)."""

from __future__ import annotations

from django.db import models


class AuditLevel(models.TextChoices):
    INFO = "INFO", "Info"
    WARNING = "WARNING", "Warning"


class AuditAction(models.TextChoices):
    # Accounts
    USER_CREATED = "USER_CREATED", "User created"
    USER_ROLES_CHANGED = "USER_ROLES_CHANGED", "User roles changed"
    USER_PASSWORD_CHANGED = "USER_PASSWORD_CHANGED", "User password changed"
    LOGIN_SUCCEEDED = "LOGIN_SUCCEEDED", "Login succeeded"
    LOGIN_FAILED = "LOGIN_FAILED", "Login failed"
    LOGOUT = "LOGOUT", "Logout"
    # Agent runtimes and their tokens
    RUNTIME_CREATED = "RUNTIME_CREATED", "Runtime created"
    RUNTIME_SETTINGS_CHANGED = "RUNTIME_SETTINGS_CHANGED", "Runtime settings changed"
    TOKEN_ISSUED = "TOKEN_ISSUED", "Runtime token issued"
    TOKEN_REVOKED = "TOKEN_REVOKED", "Runtime token revoked"
    # The audit log itself
    AUDIT_CHAIN_VERIFIED = "AUDIT_CHAIN_VERIFIED", "Audit chain verified"
    AUDIT_CHAIN_BROKEN = "AUDIT_CHAIN_BROKEN", "Audit chain found broken"
