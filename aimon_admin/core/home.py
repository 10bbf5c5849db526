"""The home page's sections: what needs doing, with live counts that link to their lists.

The home shows pending requests, the registry's review work, the audit chain and who is
locked out, but core may import no app (tests/test_layers.py). So, as core.hooks does for
request events, each app registers a provider here when it is ready (its AppConfig.ready),
and the home view asks every provider, in order, for the sections that concern the person
signed in. One way only: core knows no provider, a provider knows no other.

A provider returns no section for a person it does not concern (it checks the permission
its lists need). Sections are keyed: two providers may add figures to one section (the
Audit section has approvals' escalated grants and audit's warnings), and a person holding
several roles sees each section once, however many of their roles it concerns.

Counts come from indexed queries or a short cache, never a scan of a large table: each
provider says how in its own module (benchmarks/homes.py times the homes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from django.http import HttpRequest
from django.utils.safestring import SafeString


@dataclass(frozen=True)
class Figure:
    """A count and the list it stands for: the whole figure is one link to that list.

    `limit`: the count was taken up to limit + 1 rows, and more than `limit` is shown as
    "50+" (counting further would read every row). `attention`: a count above zero is work
    waiting, and the figure is marked so; zero is shown muted."""

    key: str
    count: int
    # Its words after the count: one wording, or (for one, for any other number).
    label: str | tuple[str, str]
    url: str
    limit: int | None = None
    attention: bool = True
    help: str = ""

    @property
    def shown(self) -> str:
        if self.limit is not None and self.count > self.limit:
            return f"{self.limit}+"
        return str(self.count)

    @property
    def words(self) -> str:
        """The label for this count: "1 skill request", "2 skill requests", "0 skill requests"."""
        if isinstance(self.label, str):
            return self.label
        one, other = self.label
        return one if self.count == 1 and (self.limit is None or self.count <= self.limit) else other

    @property
    def pressing(self) -> bool:
        return self.attention and self.count > 0


@dataclass(frozen=True)
class Line:
    """A sentence under the figures, its words a link (a runtime the forecast names, a
    server whose sync failed). `code` and `kind`, when given, are a stored code shown as
    words (`{% words %}`) after the link."""

    text: str
    url: str
    note: str = ""
    code: str = ""
    kind: str = ""


@dataclass(frozen=True)
class Step:
    """What to do first when there is nothing to count yet: a sentence and its link."""

    text: str
    label: str
    url: str


@dataclass(frozen=True)
class Section:
    """One card of the home. `html`, when set, is the card itself, rendered by its app (the
    chain verification card, with its Verify now button); the other fields are then unused."""

    key: str
    title: str
    figures: tuple[Figure, ...] = ()
    lines: tuple[Line, ...] = ()
    help: str = ""
    first_step: Step | None = None
    links: tuple[Step, ...] = ()
    html: SafeString | None = None

    @property
    def pressing(self) -> bool:
        return any(figure.pressing for figure in self.figures)


Provider = Callable[[HttpRequest], Iterable[Section]]


@dataclass(order=True)
class _Entry:
    order: int
    name: str
    provider: Provider = field(compare=False)


_providers: dict[str, _Entry] = {}


def provide(name: str, provider: Provider, *, order: int) -> None:
    """Register `provider` under `name` (registering a name again replaces it, so a reloaded
    app does not add its sections twice). Lower `order` comes first."""
    _providers[name] = _Entry(order, name, provider)


def sections_for(request: HttpRequest) -> list[Section]:
    """Every section that concerns the person, each once, in the providers' order; sections
    two providers give under one key are one card (the first one's title and words, the
    figures, lines and links of both)."""
    merged: dict[str, Section] = {}
    for entry in sorted(_providers.values()):
        for section in entry.provider(request):
            known = merged.get(section.key)
            if known is None:
                merged[section.key] = section
                continue
            merged[section.key] = replace(
                known,
                figures=known.figures + section.figures,
                lines=known.lines + section.lines,
                links=known.links + section.links,
                help=known.help or section.help,
                first_step=known.first_step or section.first_step,
            )
    return list(merged.values())
