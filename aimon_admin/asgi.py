"""ASGI entry point: uvicorn serves it for everything in the embedded default (make run), and
in production (make prod) for what waits: the long-poll and the streamed audit exports, which
nginx routes here while granian serves the rest through wsgi.py (scripts/prod.py).

Long-polls are async views, so a waiting runtime holds no worker thread.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

django_application = get_asgi_application()

from aimon_admin.core.asgi import BodySizeLimitMiddleware  # noqa: E402  (needs settings loaded)

application = BodySizeLimitMiddleware(django_application, limit=settings.API_MAX_BODY_BYTES)
