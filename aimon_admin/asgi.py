"""ASGI entry point: the product is served by an ASGI server (uvicorn) in production."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

application = get_asgi_application()
