from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from aimon_admin.accounts import oidc, people_views, views

app_name = "accounts"

urlpatterns = [
    path("login/", views.login_view, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Sign-in through the OpenID Connect provider (404 unless AIMON_OIDC_ISSUER is set).
    path("oidc/start/", oidc.start_view, name="oidc-start"),
    path("oidc/callback/", oidc.callback_view, name="oidc-callback"),
    path("set-password/<uidb64>/<token>/", people_views.set_password_view, name="set-password"),
    # Operators' administration: people and locked sign-ins.
    path("people/", people_views.people_view, name="people"),
    path("people/new/", people_views.person_create_view, name="person-create"),
    path("people/<str:username>/", people_views.person_view, name="person"),
    path("people/<str:username>/roles/", people_views.person_roles_view, name="person-roles"),
    path("people/<str:username>/deactivate/", people_views.person_deactivate_view, name="person-deactivate"),
    path("people/<str:username>/reactivate/", people_views.person_reactivate_view, name="person-reactivate"),
    path("people/<str:username>/password-link/", people_views.person_link_view, name="person-link"),
    path("sign-ins/locked/", people_views.locked_view, name="locked"),
    # A username as typed at sign-in may hold any character, a slash too.
    path("sign-ins/locked/<path:username>/unlock/", people_views.unlock_view, name="unlock"),
]
