"""Settings for the benchmarks: the product's own settings, plus a bare baseline endpoint.

Run by hand only (benchmarks/tool_decisions.py sets the environment), never by CI.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "benchmark-only-secret-key-not-for-production-0123456789")
# The stored secrets' key (aimon_admin/core/encryption.py): a benchmark-only one.
os.environ.setdefault("AIMON_SECRETS_KEY", "YmVuY2htYXJrLW9ubHktc2VjcmV0cy1rZXktbm90LTE=")

from aimon_admin.settings.base import *  # noqa: F403

ROOT_URLCONF = "benchmarks.urls"
# The bare endpoints take the runtime API's lean stack, as the API does.
RUNTIME_API_PREFIXES = (*RUNTIME_API_PREFIXES, "/bench/")  # noqa: F405
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
# Pages render without `collectstatic` (static files straight from the app folders): the
# benchmarks time the API and the answer path, not static files.
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
WHITENOISE_USE_FINDERS = True

# benchmarks/specials.py: BENCH_STOCK_POOL=1 serves with Django's own PostgreSQL backend and
# psycopg-pool's standard borrow check (a round trip each time), to compare with ours.
if os.environ.get("BENCH_STOCK_POOL") == "1" and DATABASES["default"]["ENGINE"].endswith("postgresql"):  # noqa: F405
    DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"  # noqa: F405
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405
