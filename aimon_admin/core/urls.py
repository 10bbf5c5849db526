from __future__ import annotations

from django.urls import path

from aimon_admin.core import views
from aimon_admin.core.help import help_page

app_name = "core"

urlpatterns = [
    path("", views.home, name="home"),
    # The documentation in docs/, as pages: help links stay in the product.
    path("help/", help_page, name="help"),
    path("help/<slug:page>/", help_page, name="help-page"),
]
