from __future__ import annotations

from django.urls import path

from aimon_admin.approvals import rule_views, session_views, views

app_name = "approvals"
# One set of rule views for both kinds of rule: each route names its kind.
SKILL_RULES = {"section": rule_views.SKILL}
TOOL_RULES = {"section": rule_views.TOOL}

urlpatterns = [
    path("", views.inbox_view, name="inbox"),
    path("poll/", views.inbox_view, {"poll": True}, name="inbox-poll"),
    path("requests/<uuid:pk>/", views.request_detail_view, name="request"),
    path("requests/<uuid:pk>/answer/", views.request_answer_view, name="answer"),
    path("requests/<uuid:pk>/dismiss/", views.request_dismiss_view, name="dismiss"),
    path("sessions/", session_views.session_list_view, name="sessions"),
    path("sessions/<int:pk>/", session_views.session_detail_view, name="session"),
    path("sessions/<int:pk>/clear/", session_views.session_clear_view, name="session-clear"),
    path("sessions/<int:pk>/revoke/", session_views.session_revoke_view, name="session-revoke"),
    path("grants/<int:pk>/revoke/", session_views.grant_revoke_view, name="grant-revoke"),
    path("grants/<int:pk>/undo/", session_views.grant_undo_view, name="grant-undo"),
    path("agents/<str:name>/", session_views.agent_grants_view, name="agent"),
    path("agents/<str:name>/revoke/", session_views.agent_revoke_view, name="agent-revoke"),
    path("rules/", rule_views.rule_list_view, name="rules"),
    path("rules/skills/add/", rule_views.rule_add_view, SKILL_RULES, name="rule-add"),
    path("rules/new/", rule_views.rule_create_view, SKILL_RULES, name="rule-create"),
    path("rules/preview/", rule_views.rule_preview_view, SKILL_RULES, name="rule-preview"),
    path("rules/<int:pk>/delete/", rule_views.rule_delete_view, SKILL_RULES, name="rule-delete"),
    path("rules/tools/add/", rule_views.rule_add_view, TOOL_RULES, name="tool-rule-add"),
    path("rules/tools/new/", rule_views.rule_create_view, TOOL_RULES, name="tool-rule-create"),
    path("rules/tools/preview/", rule_views.rule_preview_view, TOOL_RULES, name="tool-rule-preview"),
    path("rules/tools/<int:pk>/delete/", rule_views.rule_delete_view, TOOL_RULES, name="tool-rule-delete"),
]
