"""Settings for the test suite: the real settings, with a fixed key and fast hashing.

The database comes from DATABASE_URL like everywhere else (the Makefile runs the suite
once on SQLite and once on PostgreSQL + Redis).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
# The key that encrypts stored secrets in the suite (a test of rotation overrides it).
os.environ.setdefault("AIMON_SECRETS_KEY", "dGVzdC1vbmx5LXNlY3JldHMta2V5LW5vdC1yZWFsLTE=")

from aimon_admin.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
LOGGING["root"]["level"] = "WARNING"  # noqa: F405
# Static files straight from the app folders: the suite never runs collectstatic.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# Notifications: links start with the test client's host; the receivers the tests start
# run on 127.0.0.1, a private address production refuses by default.
AIMON_BASE_URL = "http://testserver"
AIMON_NOTIFY_ALLOW_PRIVATE_ADDRESSES = True
# A4: no signing key unless a test makes one, and checkpoints published to a directory of this
# run's own (never the project's audit-checkpoints/ that make run fills), no bucket unless a
# test starts one.
AIMON_AUDIT_SIGNING_KEY = ""
AIMON_AUDIT_CHECKPOINT_DIR = tempfile.mkdtemp(prefix="aimon-test-checkpoints-")
AIMON_AUDIT_CHECKPOINT_S3_URL = ""

# On SQLite the test database is a file, as the product's is (WAL, BEGIN IMMEDIATE, the busy
# timeout), never Django's default of memory with a shared cache: there every thread that is
# not the test's own (a live server's request, a client's poll) shares one connection, or
# finds a table another is writing "locked" at once instead of waiting its turn.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    _folder = tempfile.mkdtemp(prefix="aimon-test-db-")
    atexit.register(shutil.rmtree, _folder, ignore_errors=True)
    DATABASES["default"]["TEST"] = {"NAME": os.path.join(_folder, "test.sqlite3")}  # noqa: F405
