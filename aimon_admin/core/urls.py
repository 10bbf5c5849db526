from __future__ import annotations

from django.urls import path

from aimon_admin.core import views

app_name = "core"

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
]
