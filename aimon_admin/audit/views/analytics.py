"""Decision analytics per runtime and over time (requests, answers, escalations)."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
