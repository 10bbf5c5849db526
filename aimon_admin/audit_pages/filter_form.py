"""A filter as the auditor's pages read and show it: the form's fields as typed, and a
filter that cannot be read said in a sentence.

That sentence stands beside its field, the form kept as typed, on the same page with status
400 (for htmx, the results area says so with status 200, as htmx 2 does not swap a 4xx);
pages without a form (escalations, exports) answer the 400 error page (inbox_filter.bad_filter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aimon_admin.audit.filters import FIELD_LABELS, FilterError, time_input_value

# Messages users see (tests import these).
BAD_FILTER_MESSAGE = "{label}: {problem}"
# The fields of the pages' forms, by the names they have in the query string.
LABELS = {**FIELD_LABELS, "at": "At"}
TIME_HINT = "UTC"
AT_HINT = "UTC; leave it empty for now"


def filter_message(error: FilterError) -> str:
    """The sentence above the results: "Runtime: No runtime is named 'nope'." (a field the
    page does not have is named in the problem itself)."""
    label = LABELS.get(error.field)
    return BAD_FILTER_MESSAGE.format(label=label, problem=error.problem) if label else error.problem


def problem_for(error: FilterError | None, name: str) -> str:
    """What is wrong with field `name`, said beside it ("" if `error` is about another)."""
    return error.problem if error and error.field == name else ""


@dataclass(frozen=True)
class FilterField:
    """One field of a filter form as the page shows it: the value as typed, its error."""

    name: str
    label: str
    value: str
    kind: str = "text"  # the <input> type
    hint: str = ""  # said after the label
    placeholder: str = ""
    error: str = ""
    datalist: str = ""  # the id of a <datalist> of suggestions
    required: bool = False

    @property
    def id(self) -> str:
        return f"f-{self.name}"

    @property
    def step(self) -> str:
        """A picker's step: minutes (the default, left out), or the second or millisecond of
        a value given to one, so the browser takes the value as it is."""
        if "." in self.value:
            return "0.001"
        return "1" if self.value.count(":") == 2 else ""


def first_value(params: Mapping[str, list[str]], name: str) -> str:
    return next((value.strip() for value in params.get(name, ()) if value.strip()), "")


def time_field(
    name: str, typed: str, *, end: bool, error: FilterError | None, hint: str = TIME_HINT
) -> FilterField:
    """A date-time picker (UTC), showing what was typed as the same bound; a value it
    cannot show (text that is no time) stays a text box holding it, to be corrected."""
    shown = time_input_value(typed, end=end) if typed else ""
    wrong = problem_for(error, name)
    if shown is None:
        return FilterField(name, LABELS[name], typed, kind="text", hint=hint, error=wrong)
    return FilterField(name, LABELS[name], shown, kind="datetime-local", hint=hint, error=wrong)
