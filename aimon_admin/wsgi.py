"""WSGI entry point: in production (make prod) granian serves it behind nginx, for every
request/response path (decisions, pages); the long-poll and the streamed exports go to the
ASGI entry point (asgi.py). See scripts/prod.py."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

application = get_wsgi_application()
