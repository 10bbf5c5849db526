"""What the audit log can say (A1)."""

from __future__ import annotations

from django.db import models

from aimon_admin.core import words


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
    LOGIN_LOCKED_OUT = "LOGIN_LOCKED_OUT", "Sign-in locked out after repeated failures"
    LOGIN_UNLOCKED = "LOGIN_UNLOCKED", "Sign-in lockout cleared by an operator"
    LOGOUT = "LOGOUT", "Logout"
    USER_DEACTIVATED = "USER_DEACTIVATED", "Person deactivated"
    USER_REACTIVATED = "USER_REACTIVATED", "Person reactivated"
    USER_PASSWORD_LINK_ISSUED = "USER_PASSWORD_LINK_ISSUED", "Set-password link made for a person"
    # Agent runtimes and their tokens
    RUNTIME_CREATED = "RUNTIME_CREATED", "Runtime created"
    RUNTIME_SETTINGS_CHANGED = "RUNTIME_SETTINGS_CHANGED", "Runtime settings changed"
    RUNTIME_DISABLED = "RUNTIME_DISABLED", "Runtime disabled (its tokens refused)"
    RUNTIME_ENABLED = "RUNTIME_ENABLED", "Runtime enabled again"
    RUNTIME_RETIRED = "RUNTIME_RETIRED", "Runtime retired for good (its tokens revoked)"
    TOKEN_ISSUED = "TOKEN_ISSUED", "Runtime token issued"
    TOKEN_REVOKED = "TOKEN_REVOKED", "Runtime token revoked"
    # Tools and MCP servers (T12-T15)
    LOCAL_TOOLS_REPLACED = "LOCAL_TOOLS_REPLACED", "Runtime's local tool catalog replaced"
    MCP_SERVER_CREATED = "MCP_SERVER_CREATED", "MCP server created"
    MCP_SERVER_CHANGED = "MCP_SERVER_CHANGED", "MCP server settings changed"
    MCP_SERVER_RETIRED = "MCP_SERVER_RETIRED", "MCP server retired for good"
    MCP_TRUST_CHANGED = "MCP_TRUST_CHANGED", "MCP annotation trust changed"
    MCP_SYNC_REQUESTED = "MCP_SYNC_REQUESTED", "MCP sync requested"
    MCP_SYNC_SUCCEEDED = "MCP_SYNC_SUCCEEDED", "MCP sync succeeded"
    MCP_SYNC_FAILED = "MCP_SYNC_FAILED", "MCP sync failed"
    MCP_TOOLS_RELAYED = "MCP_TOOLS_RELAYED", "MCP tool list relayed by a runtime"
    MCP_TOOLS_REGISTERED = "MCP_TOOLS_REGISTERED", "MCP tools registered, back, or gone absent"
    TOOL_DEFINITION_CHANGED = "TOOL_DEFINITION_CHANGED", "Tool definition changed"
    TOOL_DEFINITION_ACCEPTED = "TOOL_DEFINITION_ACCEPTED", "Changed tool definition accepted"
    TOOL_REVIEW_RECORDED = "TOOL_REVIEW_RECORDED", "Tool review finding recorded"
    RELAY_FINDING_RECORDED = "RELAY_FINDING_RECORDED", "A runtime relayed a tool differently (finding kept)"
    RELAY_FINDING_ACCEPTED = "RELAY_FINDING_ACCEPTED", "Relay finding accepted as the served definition"
    RELAY_FINDING_DISMISSED = "RELAY_FINDING_DISMISSED", "Relay finding dismissed"
    CONFIG_LOADED = "CONFIG_LOADED", "Configuration file loaded"
    # Skill approvals (S4-S10)
    SKILL_GRANTED = "SKILL_GRANTED", "Skill approval granted"
    SKILL_GRANT_ESCALATED = "SKILL_GRANT_ESCALATED", "Session answer escalated to agent-wide"
    SKILL_ABORT_DENIED = "SKILL_ABORT_DENIED", "Unanswered skill denied on abort"
    SKILL_REQUEST_DENIED = "SKILL_REQUEST_DENIED", "Skill denied for one request only (nothing stored)"
    SKILL_ANSWER_SETTLED = "SKILL_ANSWER_SETTLED", "Answer settled by a grant another answer had just written"
    # The two-person rule (P3): one person's allow, recorded until enough have allowed
    APPROVAL_ALLOW_RECORDED = "APPROVAL_ALLOW_RECORDED", "One person's allow recorded (several must allow)"
    SESSION_CLEARED = "SESSION_CLEARED", "Session approvals cleared"
    SESSION_REVOKED = "SESSION_REVOKED", "Session approvals revoked"
    AGENT_GRANTS_REVOKED = "AGENT_GRANTS_REVOKED", "Agent-wide approvals revoked"
    GRANT_REVOKED = "GRANT_REVOKED", "Single approval revoked"
    SESSION_EXPIRED = "SESSION_EXPIRED", "Idle session's approvals expired"
    RULE_CREATED = "RULE_CREATED", "Skill rule created"
    RULE_CHANGED = "RULE_CHANGED", "Skill rule changed"
    RULE_DELETED = "RULE_DELETED", "Skill rule deleted"
    # Tool argument rules and subjects (U1, U5, U7)
    TOOL_RULE_CREATED = "TOOL_RULE_CREATED", "Tool rule created"
    TOOL_RULE_CHANGED = "TOOL_RULE_CHANGED", "Tool rule changed"
    TOOL_RULE_DELETED = "TOOL_RULE_DELETED", "Tool rule deleted"
    TOOL_SUBJECT_SET = "TOOL_SUBJECT_SET", "Tool's subject argument set"
    # Tool calls that ask (U3, U4, U7): the twins of the skill events above
    TOOL_GRANTED = "TOOL_GRANTED", "Tool approval granted for a subject pattern"
    TOOL_CALL_APPROVED = "TOOL_CALL_APPROVED", "One tool call approved, bound to its arguments' digest"
    TOOL_CALL_APPROVAL_USED = "TOOL_CALL_APPROVAL_USED", "An approved tool call was used"
    TOOL_ABORT_DENIED = "TOOL_ABORT_DENIED", "Unanswered tool call denied on abort"
    TOOL_ANSWER_SETTLED = (
        "TOOL_ANSWER_SETTLED",
        "Tool answer settled by a grant another answer had just written",
    )
    # A request nobody answered in time, sent to the operators and the owner (P2). Not
    # SKILL_GRANT_ESCALATED, a session answer made agent-wide (S6).
    REQUEST_ESCALATED = "REQUEST_ESCALATED", "Unanswered request sent to operators"
    # Notifications (P1, P2, P4)
    NOTIFICATION_CHANNEL_ADDED = "NOTIFICATION_CHANNEL_ADDED", "Notification channel added"
    NOTIFICATION_CHANNEL_REMOVED = "NOTIFICATION_CHANNEL_REMOVED", "Notification channel removed"
    NOTIFICATION_PREFERENCES_CHANGED = (
        "NOTIFICATION_PREFERENCES_CHANGED",
        "Notification digest or quiet hours changed",
    )
    WEBHOOK_SECRET_ROTATED = "WEBHOOK_SECRET_ROTATED", "Webhook signing secret rotated"
    NOTIFICATION_CHANNEL_BROKEN = (
        "NOTIFICATION_CHANNEL_BROKEN",
        "Notification channel marked broken after failing repeatedly",
    )
    NOTIFICATION_CHANNEL_MENDED = "NOTIFICATION_CHANNEL_MENDED", "Broken notification channel works again"
    NOTIFICATION_GAVE_UP = "NOTIFICATION_GAVE_UP", "Notification given up: not delivered to a channel"
    # The audit log itself
    AUDIT_CHAIN_VERIFIED = "AUDIT_CHAIN_VERIFIED", "Audit chain verified"
    AUDIT_CHAIN_BROKEN = "AUDIT_CHAIN_BROKEN", "Audit chain found broken"
    AUDIT_SIGNING_KEY_ROTATED = "AUDIT_SIGNING_KEY_ROTATED", "Audit checkpoint signing key rotated"
    SECRETS_REENCRYPTED = "SECRETS_REENCRYPTED", "Stored secrets re-encrypted with the newest key"


# Plain words for the codes above on pages (core.words; `{% words code "kind" %}`).
words.register("audit-level", AuditLevel, badge="audit-level")
words.register("action", AuditAction)
