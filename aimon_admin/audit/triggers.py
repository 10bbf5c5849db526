"""The database triggers that make the audit table append-only, on PostgreSQL and SQLite.

Kept in one module so the migration installs them and the test suite can drop them to
prove that tampering behind their back is still caught by the chain.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper

TABLE = "audit_auditevent"
TRIGGER_MESSAGE = "audit events are append-only"

_POSTGRES_INSTALL = [
    f"""
    CREATE OR REPLACE FUNCTION aimon_audit_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{TRIGGER_MESSAGE}: % refused on %', TG_OP, TG_TABLE_NAME;
    END
    $$;
    """,
    f"DROP TRIGGER IF EXISTS {TABLE}_no_update_delete ON {TABLE};",
    f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};",
    f"""
    CREATE TRIGGER {TABLE}_no_update_delete BEFORE UPDATE OR DELETE ON {TABLE}
    FOR EACH ROW EXECUTE FUNCTION aimon_audit_refuse_change();
    """,
    f"""
    CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION aimon_audit_refuse_change();
    """,
]
_POSTGRES_DROP = [
    f"DROP TRIGGER IF EXISTS {TABLE}_no_update_delete ON {TABLE};",
    f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};",
]

_SQLITE_INSTALL = [
    f"""
    CREATE TRIGGER IF NOT EXISTS {TABLE}_no_update BEFORE UPDATE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, '{TRIGGER_MESSAGE}: UPDATE refused'); END;
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS {TABLE}_no_delete BEFORE DELETE ON {TABLE}
    BEGIN SELECT RAISE(ABORT, '{TRIGGER_MESSAGE}: DELETE refused'); END;
    """,
]
_SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {TABLE}_no_update;",
    f"DROP TRIGGER IF EXISTS {TABLE}_no_delete;",
]


def _statements(vendor: str, install: bool) -> list[str]:
    if vendor == "postgresql":
        return _POSTGRES_INSTALL if install else _POSTGRES_DROP
    if vendor == "sqlite":
        return _SQLITE_INSTALL if install else _SQLITE_DROP
    raise ImproperlyConfigured(f"AIMON Admin supports PostgreSQL and SQLite, not {vendor}")


def install(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for statement in _statements(connection.vendor, install=True):
            cursor.execute(statement)


def drop(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for statement in _statements(connection.vendor, install=False):
            cursor.execute(statement)
