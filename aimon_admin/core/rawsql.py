"""Model instances from plain SQL rows, built as the ORM builds them.

For the few reads on every API call (the token, the sessions of a decision), where
building the ORM query costs more than running it (measured in benchmarks/). Each row's
values go through the same converters the ORM applies (SQLite hands datetimes back as
text, for one), found once per database vendor, model and column list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper

M = TypeVar("M", bound=models.Model)

_Converters = list[tuple[int, Any, list[Any]]]
_found: dict[tuple[str, type[models.Model], tuple[str, ...]], _Converters] = {}


def all_columns(model: type[models.Model]) -> tuple[str, ...]:
    """Every concrete field's attribute name, in model order (e.g. `runtime_id`)."""
    return tuple(field.attname for field in model._meta.concrete_fields)


def select_list(model: type[models.Model], alias: str, names: Sequence[str]) -> str:
    """`alias.column, ...` for these attribute names, quoted for this database."""
    quote = connection.ops.quote_name
    columns = {field.attname: field.column for field in model._meta.concrete_fields}
    return ", ".join(f"{alias}.{quote(columns[name])}" for name in names)


def build(model: type[M], names: tuple[str, ...], values: Sequence[Any]) -> M:
    """The instance the ORM would have built from these values of these fields."""
    row = list(values)
    for position, column, converters in _converters(model, names):
        for converter in converters:
            row[position] = converter(row[position], column, connection)
    return model.from_db(connection.alias, names, row)


def _converters(model: type[models.Model], names: tuple[str, ...]) -> _Converters:
    key = (connection.vendor, model, names)
    found = _found.get(key)
    if found is None:
        found = []
        for position, name in enumerate(names):
            field = model._meta.get_field(name)
            column = field.cached_col
            converters = [*connection.ops.get_db_converters(column), *field.get_db_converters(connection)]
            if converters:
                found.append((position, column, converters))
        _found[key] = found
    return found


def insert_unless_conflict(instance: models.Model) -> bool:
    """Insert a new `instance` unless a unique constraint refuses it; True when inserted
    (its pk set, as `save()` sets it), False when a row already holds the same unique values.

    One `INSERT ... ON CONFLICT DO NOTHING RETURNING pk` (PostgreSQL; SQLite 3.35+): a
    conflict leaves the transaction intact, so no savepoint is needed around it, and only
    a uniqueness conflict is skipped (a CHECK or NOT NULL constraint still refuses). On
    PostgreSQL it waits, as a plain insert does, for a concurrent uncommitted insert of the
    same values to commit or roll back. No signals are sent (the project keeps no logic in
    them). Where the database cannot return the row from such an insert (an older SQLite):
    a plain insert in a savepoint, any refusal then read as a conflict.
    """
    meta = instance._meta
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    if not connection.features.can_return_columns_from_insert:
        try:
            with transaction.atomic():
                instance.save(force_insert=True)
        except IntegrityError:
            return False
        return True
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    values = ", ".join(["%s"] * len(fields))
    params = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({values}) "  # noqa: S608 - names from the model, values are parameters # nosec B608
            f"ON CONFLICT DO NOTHING RETURNING {quote(meta.pk.column)}",
            params,
        )
        row = cursor.fetchone()
    if row is None:
        return False
    instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = connection.alias
    return True


def fetchall_prepared(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """`cursor.execute(sql, params)` then `fetchall()`, as a server-side prepared statement
    on PostgreSQL: planned once per pooled connection instead of on every call.

    For the one statement on the skill decision's hot path, whose planning cost the
    database several times what running it does (measured in benchmarks/). Only the plan
    is kept: every call binds its own values and reads the rows afresh, so nothing read
    outlives a write. Django keeps prepared statements off (for poolers in front of the
    database, which may hand a statement to another server connection); this enables
    them for this one cursor only. Should a statement be gone after all (a pooler, a
    `DISCARD ALL` psycopg did not see), psycopg is made to forget them and the call runs
    unprepared, outside a transaction; inside one it fails (a database error: no
    decision). Elsewhere: the usual cursor.
    """
    db = connections[DEFAULT_DB_ALIAS]  # once: each `connection.x` is a lookup of its own
    if db.vendor == "postgresql":
        try:
            return _fetchall_prepared_pg(db, sql, params)
        except DatabaseError as exc:
            if db.in_atomic_block or not _statement_gone(exc):
                raise
            _forget_prepared(db)
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _fetchall_prepared_pg(db: BaseDatabaseWrapper, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    import psycopg
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg.pq import Format

    # As db.cursor() does (Django's _cursor), with psycopg's server-binding cursor in
    # place of the client-binding one Django makes.
    db.close_if_health_check_failed()
    db.ensure_connection()
    raw = db.connection
    with db.wrap_database_errors:
        cursor = psycopg.Cursor(raw)
        loader = raw.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
        if db.timezone != loader.timezone:  # type: ignore[union-attr]
            register_tzloader(db.timezone, cursor)
    db.validate_thread_sharing()
    wrapped = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
    # psycopg prepares a statement once seen `prepare_threshold` times (0: at once) and
    # reuses it while the threshold is set; None (Django's) turns both off again.
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        with wrapped:
            wrapped.execute(sql, params)
            return wrapped.fetchall()
    finally:
        raw.prepare_threshold = previous


def _forget_prepared(db: BaseDatabaseWrapper) -> None:
    """Make psycopg forget the connection's prepared statements (it would otherwise go on
    naming one the server no longer has): a DEALLOCATE ALL it sees itself."""
    import psycopg

    raw = db.connection
    previous = raw.prepare_threshold
    raw.prepare_threshold = 0  # psycopg tracks what it runs only while preparing is on
    try:
        with db.wrap_database_errors, psycopg.Cursor(raw) as cursor:
            cursor.execute("DEALLOCATE ALL", prepare=False)
    finally:
        raw.prepare_threshold = previous


def _statement_gone(exc: DatabaseError) -> bool:
    import psycopg

    return isinstance(
        exc.__cause__, (psycopg.errors.InvalidSqlStatementName, psycopg.errors.DuplicatePreparedStatement)
    )
