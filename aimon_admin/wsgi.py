"""WSGI entry point: in production (make prod) granian serves it behind nginx, for every
request/response path (decisions, pages); the long-poll and the streamed exports go to the
ASGI entry point (asgi.py). See scripts/prod.py. The runtime API's requests take their own
lean middleware stack here as under asgi.py (core.middleware.RuntimeApiStack)."""

from __future__ import annotations

import gc
import os
from importlib import import_module

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.base")

application = get_wsgi_application()
# No start without the keys of the stored secrets (ImproperlyConfigured names the setting).
from aimon_admin.core.encryption import key_ring  # noqa: E402  (needs settings loaded)

key_ring()
# Every view imported now rather than by the first request, which would otherwise wait for it.
import_module(settings.ROOT_URLCONF)
# What is loaded by now lives as long as the process: frozen out of the garbage collector's
# sight. Its full collections otherwise stop a request for ~0.1 s on a 2-core machine, once
# every few thousand requests (docs/performance.md).
gc.freeze()
