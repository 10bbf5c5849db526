"""The database triggers that make the audit tables append-only, on PostgreSQL and SQLite: the
events (A2) and their Merkle tree's nodes (A4).

Kept in one module so the migrations install them and the test suite can drop them to
prove that tampering behind their back is still caught by the chain and the tree.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import BaseDatabaseWrapper

TABLE = "audit_auditevent"
TREE_TABLE = "audit_audittreenode"
TRIGGER_MESSAGE = "audit events are append-only"

_POSTGRES_FUNCTION = f"""
    CREATE OR REPLACE FUNCTION aimon_audit_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION '{TRIGGER_MESSAGE}: % refused on %', TG_OP, TG_TABLE_NAME;
    END
    $$;
    """


def _postgres_drop(table: str) -> list[str]:
    return [
        f"DROP TRIGGER IF EXISTS {table}_no_update_delete ON {table};",
        f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};",
    ]


def _postgres_install(table: str) -> list[str]:
    return [
        *_postgres_drop(table),
        f"""
        CREATE TRIGGER {table}_no_update_delete BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION aimon_audit_refuse_change();
        """,
        f"""
        CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION aimon_audit_refuse_change();
        """,
    ]


def _sqlite_install(table: str) -> list[str]:
    return [
        f"""
        CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table}
        BEGIN SELECT RAISE(ABORT, '{TRIGGER_MESSAGE}: UPDATE refused'); END;
        """,
        f"""
        CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table}
        BEGIN SELECT RAISE(ABORT, '{TRIGGER_MESSAGE}: DELETE refused'); END;
        """,
    ]


def _sqlite_drop(table: str) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {table}_no_update;", f"DROP TRIGGER IF EXISTS {table}_no_delete;"]


def _statements(vendor: str, install: bool, tables: Iterable[str]) -> list[str]:
    if vendor == "postgresql":
        build = _postgres_install if install else _postgres_drop
        head = [_POSTGRES_FUNCTION] if install else []
    elif vendor == "sqlite":
        build = _sqlite_install if install else _sqlite_drop
        head = []
    else:
        raise ImproperlyConfigured(f"AIMON Admin supports PostgreSQL and SQLite, not {vendor}")
    return head + [statement for table in tables for statement in build(table)]


def _tables(connection: BaseDatabaseWrapper) -> list[str]:
    """The audit tables that exist (the tree's comes with a later migration than the events')."""
    with connection.cursor() as cursor:
        existing = set(connection.introspection.table_names(cursor))
    return [TABLE] + ([TREE_TABLE] if TREE_TABLE in existing else [])


def install(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        for statement in _statements(connection.vendor, True, _tables(connection)):
            cursor.execute(statement)


def drop(connection: BaseDatabaseWrapper, tables: Iterable[str] | None = None) -> None:
    chosen = list(tables) if tables is not None else _tables(connection)
    with connection.cursor() as cursor:
        for statement in _statements(connection.vendor, False, chosen):
            cursor.execute(statement)
