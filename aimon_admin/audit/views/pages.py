"""The auditor's log pages: home, the filtered log, one event, escalations, in force at T."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
