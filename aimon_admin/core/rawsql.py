"""Model instances from plain SQL rows, built as the ORM builds them.

For the few reads on every API call (the token, the sessions of a decision), where
building the ORM query costs more than running it (measured in benchmarks/). Each row's
values go through the same converters the ORM applies (SQLite hands datetimes back as
text, for one), found once per database vendor, model and column list.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db import connection, models

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
