"""WSGI entry point, for tools that want one; production serves ASGI (see asgi.py)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

application = get_wsgi_application()
