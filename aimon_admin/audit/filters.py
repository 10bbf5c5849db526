"""The audit log's filters, read from a query string and checked field by field.

Filters are combinable (AND between fields; repeated `action` values are OR'ed) and live
in the URL, so a filtered log can be bookmarked, shared and exported as it is. A value
that cannot be read is an error naming its field (the page shows it beside the field, the
form kept as typed), never a filter silently dropped. Blank values (an empty form field)
mean "no filter". Times are UTC, as every time the pages show, unless they say otherwise.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from aimon_admin.audit.choices import AuditAction, AuditLevel

# Messages users see (tests import these). Each is a whole sentence: the page shows it
# next to the field it is about, and as "<label>: <sentence>" above the results.
UNKNOWN_FIELD_MESSAGE = "The audit log has no filter named {name!r}."
UNKNOWN_ACTION_MESSAGE = "{value!r} is not an audit action."
UNKNOWN_LEVEL_MESSAGE = "{value!r} is not a level: choose Info or Warning."
ONE_VALUE_MESSAGE = "Give one value, not {count}."
TOO_LONG_MESSAGE = "Give at most {limit} characters: no recorded value is longer."
BAD_TIME_MESSAGE = (
    "{value!r} is not a date or a date and time: write 2025-01-31 or 2025-01-31T14:05 (UTC), or pick one."
)
UNTIL_BEFORE_SINCE_MESSAGE = "Until must be later than Since."
BAD_CURSOR_MESSAGE = "{value!r} is not an event number."
CONTROL_CHARACTER_MESSAGE = "This holds a control character, which no recorded value does."

# What the page calls each field (the form's labels).
FIELD_LABELS = {
    "action": "Action",
    "level": "Level",
    "actor": "Actor",
    "runtime": "Runtime",
    "session": "Session",
    "subject": "Skill or tool",
    "since": "Since",
    "until": "Until",
    "before": "Page",
}

# Column widths of AuditEvent: a longer value can match nothing, so it is a mistake.
TEXT_LIMITS = {"actor": 200, "runtime": 200, "session": 200, "subject": 300}
TIME_FIELDS = ("since", "until")
LOG_FIELDS = ("action", "level", "actor", "runtime", "session", "subject", "since", "until")
CURSOR_FIELD = "before"


class FilterError(ValueError):
    """A filter value that cannot be read; `field` names the query-string parameter."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class LogFilters:
    """What the auditor asked for. `runtime` is a name: selectors resolve it."""

    actions: tuple[str, ...] = ()
    level: str = ""
    actor: str = ""
    runtime: str = ""
    session: str = ""
    subject: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None  # exclusive upper bound
    # Kept as typed, so links and the form show what the auditor wrote.
    raw: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def active(self) -> bool:
        return bool(self.raw)

    def query(self) -> list[tuple[str, str]]:
        """The filters in force as query-string pairs, in a stable order (blank ones left out)."""
        return [(name, value) for name in LOG_FIELDS for value in self.raw.get(name, ())]

    def querystring(self, **extra: str | int) -> str:
        pairs = self.query() + [(key, str(value)) for key, value in extra.items()]
        return urlencode(pairs)


def _values(params: Mapping[str, Sequence[str]], name: str) -> list[str]:
    return [value.strip() for value in params.get(name, ()) if value.strip()]


def _single(params: Mapping[str, Sequence[str]], name: str) -> str:
    values = _values(params, name)
    if len(values) > 1:
        raise FilterError(name, ONE_VALUE_MESSAGE.format(count=len(values)))
    return values[0] if values else ""


def _text(params: Mapping[str, Sequence[str]], name: str) -> str:
    value = _single(params, name)
    if len(value) > TEXT_LIMITS[name]:
        raise FilterError(name, TOO_LONG_MESSAGE.format(limit=TEXT_LIMITS[name]))
    if any(ord(char) < 32 for char in value):
        raise FilterError(name, CONTROL_CHARACTER_MESSAGE)
    return value


# The time of day in an ISO 8601 date-time as typed: hours, then minutes, seconds and a
# fraction, each optional after the one before.
_TIME_OF_DAY = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}(?P<minute>:?\d{2}(?P<second>:?\d{2}(?:[.,](?P<fraction>\d+))?)?)?"
)


def _last_unit(value: str) -> dt.timedelta:
    """The smallest unit a date-time was typed to: "14:05" is a minute, "14:05:07" a second."""
    match = _TIME_OF_DAY.match(value)
    if match is None:
        return dt.timedelta(microseconds=1)
    if match["fraction"]:
        return dt.timedelta(microseconds=10 ** max(0, 6 - len(match["fraction"])))
    if match["second"]:
        return dt.timedelta(seconds=1)
    if match["minute"]:
        return dt.timedelta(minutes=1)
    return dt.timedelta(hours=1)


def _parse_moment(name: str, value: str) -> tuple[dt.datetime, bool]:
    """(the moment, whether only a date was given); naive values are UTC."""
    try:
        # A bare date first: Python reads "2025-01-31" as a date-time at midnight too.
        day = parse_date(value)
        moment = parse_datetime(value) if day is None else None
    except ValueError:  # well-formed but impossible, such as 2025-02-30
        raise FilterError(name, BAD_TIME_MESSAGE.format(value=value)) from None
    if day is not None:
        return dt.datetime.combine(day, dt.time.min, tzinfo=dt.UTC), True
    if moment is None:
        raise FilterError(name, BAD_TIME_MESSAGE.format(value=value))
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=dt.UTC)
    return moment, False


def parse_time(name: str, value: str, *, end: bool) -> dt.datetime:
    """An ISO 8601 date or date-time, in UTC unless it names its offset.

    A start (`end` false) is the moment given. An end is exclusive and includes the whole
    last unit given: a bare date the whole day, "14:05" the whole minute, "14:05:07" the
    whole second, a time to the microsecond that microsecond.
    """
    moment, date_only = _parse_moment(name, value)
    if end:
        moment += dt.timedelta(days=1) if date_only else _last_unit(value)
    return moment


def time_input_value(value: str, *, end: bool) -> str | None:
    """`value` as an <input type="datetime-local"> shows it (UTC, to the millisecond at
    most), meaning the same range bound; None when it cannot be read."""
    try:
        moment, date_only = _parse_moment("", value)
    except FilterError:
        return None
    moment = moment.astimezone(dt.UTC)
    if date_only:
        # The whole day: from its first minute, or to the end of its last one.
        return moment.strftime("%Y-%m-%dT23:59" if end else "%Y-%m-%dT00:00")
    unit = _last_unit(value)
    if unit >= dt.timedelta(minutes=1):
        return moment.strftime("%Y-%m-%dT%H:%M")
    if unit >= dt.timedelta(seconds=1):
        return moment.strftime("%Y-%m-%dT%H:%M:%S")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def parse_filters(
    params: Mapping[str, Sequence[str]], *, allowed_extra: Sequence[str] = (CURSOR_FIELD,)
) -> LogFilters:
    """Read the log's filters from `params` (a QueryDict's lists, or any mapping of lists).

    Raises FilterError naming the first field that cannot be read. Parameters that are
    neither a filter nor in `allowed_extra` are errors too: a misspelt filter would
    otherwise show the whole log as if it were the filtered one.
    """
    for name in params:
        if name not in LOG_FIELDS and name not in allowed_extra:
            raise FilterError(name, UNKNOWN_FIELD_MESSAGE.format(name=name))
    actions = []
    for value in _values(params, "action"):
        if value not in AuditAction.values:
            raise FilterError("action", UNKNOWN_ACTION_MESSAGE.format(value=value))
        if value not in actions:
            actions.append(value)
    level = _single(params, "level")
    if level and level not in AuditLevel.values:
        raise FilterError("level", UNKNOWN_LEVEL_MESSAGE.format(value=level))
    texts = {name: _text(params, name) for name in TEXT_LIMITS}
    since_text, until_text = _single(params, "since"), _single(params, "until")
    since = parse_time("since", since_text, end=False) if since_text else None
    until = parse_time("until", until_text, end=True) if until_text else None
    if since is not None and until is not None and until <= since:
        raise FilterError("until", UNTIL_BEFORE_SINCE_MESSAGE)
    raw = {
        "action": tuple(actions),
        "level": (level,) if level else (),
        **{name: (value,) if value else () for name, value in texts.items()},
        "since": (since_text,) if since_text else (),
        "until": (until_text,) if until_text else (),
    }
    return LogFilters(
        actions=tuple(actions),
        level=level,
        since=since,
        until=until,
        raw={name: values for name, values in raw.items() if values},
        **texts,
    )


def parse_cursor(params: Mapping[str, Sequence[str]], name: str = CURSOR_FIELD) -> int | None:
    """The keyset cursor (`before=<seq>`): events with a smaller seq come next."""
    value = _single(params, name)
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18 or int(value) < 1:
        raise FilterError(name, BAD_CURSOR_MESSAGE.format(value=value))
    return int(value)
