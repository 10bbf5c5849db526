"""ASGI entry point: uvicorn serves it for everything in the embedded default (make run), and
in production (make prod) for what waits: the long-poll and the streamed audit exports, which
nginx routes here while granian serves the rest through wsgi.py (scripts/prod.py).

Long-polls are async views, so a waiting runtime holds no worker thread.
"""

from __future__ import annotations

import gc
import os
from importlib import import_module

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

django_application = get_asgi_application()
# No start without the keys of the stored secrets (ImproperlyConfigured names the setting).
from aimon_admin.core.encryption import key_ring  # noqa: E402  (needs settings loaded)

key_ring()
if settings.WHITENOISE_USE_FINDERS:
    # The embedded default serves static files from the source folders, and uvicorn serves
    # everything: Django's own ASGI static handler sends them as ASGI wants. WhiteNoise's
    # responses are synchronous, which Django under ASGI warns about at every start.
    django_application = ASGIStaticFilesHandler(django_application)
# Every view imported now rather than by the first request (a long-poll after a start waited
# ~0.3 s for it: benchmarks/gateway.py's first click).
import_module(settings.ROOT_URLCONF)
# What is loaded by now lives as long as the process: frozen out of the garbage collector's
# sight. Its full collections otherwise stop a request for ~0.1 s on a 2-core machine, once
# every few thousand requests (docs/performance.md).
gc.freeze()

from aimon_admin.core.asgi import BodySizeLimitMiddleware  # noqa: E402  (needs settings loaded)

application = BodySizeLimitMiddleware(django_application, limit=settings.API_MAX_BODY_BYTES)
