"""Browser pages for tools, MCP servers, the gate simulator and the review worklist."""

from __future__ import annotations

from django.urls import path

from aimon_admin.registry import views

app_name = "registry"

urlpatterns = [
    path("servers/", views.server_list_view, name="server-list"),
    path("servers/new/", views.server_create_view, name="server-create"),
    path("servers/<str:name>/", views.server_detail_view, name="server-detail"),
    path("servers/<str:name>/edit/", views.server_edit_view, name="server-edit"),
    path("servers/<str:name>/sync/", views.server_sync_view, name="server-sync"),
    path("servers/<str:name>/sync/<int:run_id>/", views.server_sync_run_view, name="server-sync-run"),
    path("servers/<str:name>/trust/", views.server_trust_view, name="server-trust"),
    path("servers/<str:name>/retire/", views.server_retire_view, name="server-retire"),
    path("tools/", views.tool_list_view, name="tool-list"),
    path("tools/<int:pk>/", views.tool_detail_view, name="tool-detail"),
    path("tools/<int:pk>/accept/", views.tool_accept_view, name="tool-accept"),
    path("tools/<int:pk>/review/", views.tool_review_view, name="tool-review"),
    path("tools/<int:pk>/subject/", views.tool_subject_view, name="tool-subject"),
    path("findings/<int:pk>/accept/", views.finding_accept_view, name="finding-accept"),
    path("findings/<int:pk>/dismiss/", views.finding_dismiss_view, name="finding-dismiss"),
    path("simulator/", views.simulator_view, name="simulator"),
    path("simulator/worklist/", views.worklist_view, name="worklist"),
]
