from __future__ import annotations

from django.urls import path

from aimon_admin.runtimes import lifecycle_views, views

app_name = "runtimes"

urlpatterns = [
    path("", views.runtime_list_view, name="list"),
    path("new/", views.runtime_create_view, name="create"),
    path("<str:name>/", views.runtime_detail_view, name="detail"),
    path("<str:name>/settings/", views.runtime_settings_view, name="settings"),
    path("<str:name>/disable/", lifecycle_views.runtime_disable_view, name="disable"),
    path("<str:name>/enable/", lifecycle_views.runtime_enable_view, name="enable"),
    path("<str:name>/retire/", lifecycle_views.runtime_retire_view, name="retire"),
    path("<str:name>/tokens/", views.token_issue_view, name="token-issue"),
    path("<str:name>/tokens/<int:token_id>/", views.token_issued_view, name="token-issued"),
    path("<str:name>/tokens/<int:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
]
