"""Help: the product's own documentation (docs/*.md in the repository) served as pages at
/help/, so a help link in the product stays inside it.

The Markdown is the same a reader sees in the repository; the pages differ in three ways.
Links between the documents point to their pages here (`concepts.md#skill-rules` becomes
/help/concepts/#skill-rules, anchors as GitHub writes them); a link to anything else in the
repository (the README, the screenshots) keeps its text without the link. The rule numbers
the documents give in brackets for readers of the code ("(T7, T9)") are left out, as are
lines ending in the marker CODE_READERS. An inline code in capitals (`MUTATING`) is marked
as a code shown on purpose (<code class="enum-code">), as {% words %} marks one. Code blocks
are examples of the wire format, shown as sent.

The first page, /help/, is not docs/README.md as written (its opening speaks to readers of
the repository): it is each reader's quick start, one per role they hold, then the
documents with the words docs/README.md's list gives each, those for the reader's roles
first and the others below them, never hidden.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import markdown
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.module_loading import import_string
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

# The documents served, by the name in their address; "" is the index (docs/README.md).
PAGES = {
    "": "README.md",
    "concepts": "concepts.md",
    "api": "api.md",
    "operations": "operations.md",
    "performance": "performance.md",
    "mcp-gateway": "mcp-gateway.md",
    "claude-code-hook": "claude-code-hook.md",
    "runtime-client": "runtime-client.md",
}
CODE_READERS = "<!-- code readers -->"
_RULE = r"(?:[TSUAPG]\d{1,2}(?:[-\u2013][TSUAPG]?\d{1,2})?|U)"
_RULES_IN_BRACKETS = re.compile(rf"\s*\({_RULE}(?:,\s*{_RULE})*(?:\s*…)?\)")
_RULE_AFTER_COMMA = re.compile(rf",\s*{_RULE}(?=\))")
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_LINK = re.compile(r'<a href="([^"]*)">(.*?)</a>', re.S)
_CODE = re.compile(r"<code>([A-Z][A-Z0-9_]*)</code>")
# An entry of docs/README.md's list: "- [Title](file.md): what it holds", on one or more lines.
_LIST_ITEM = re.compile(r"^- \[[^\]]+\]\(([\w-]+\.md)\):\s*(.*?)(?=^- |^\S|\Z)", re.M | re.S)


def github_slug(value: str, separator: str = "-") -> str:
    """A heading's anchor as GitHub writes it (tests/test_docs.py checks links by the same)."""
    text = re.sub(r"[^\w\- ]", "", value.strip().lower())
    return text.replace(" ", separator)


def _without_rule_numbers(text: str) -> str:
    """The Markdown outside code blocks without its bracketed rule numbers and lines for readers
    of the code; code blocks as they are."""
    kept, last = [], 0
    for fence in _FENCE.finditer(text):
        kept.append(_strip(text[last : fence.start()]))
        kept.append(fence.group(0))
        last = fence.end()
    kept.append(_strip(text[last:]))
    return "".join(kept)


def _strip(prose: str) -> str:
    lines = [line for line in prose.split("\n") if not line.rstrip().endswith(CODE_READERS)]
    prose = _RULES_IN_BRACKETS.sub("", "\n".join(lines))
    return _RULE_AFTER_COMMA.sub("", prose)


def _page_link(target: str) -> str | None:
    """Where a link of a document points on these pages: its page, an anchor of this one, or
    None for anything the pages do not serve."""
    if target.startswith("#"):
        return target
    path, _, anchor = target.partition("#")
    for name, filename in PAGES.items():
        if path == filename:
            url = _url(name)
            return f"{url}#{anchor}" if anchor else url
    return None


def _links(body: str) -> str:
    def replace(match: re.Match[str]) -> str:
        url = _page_link(html.unescape(match.group(1)))
        return match.group(2) if url is None else f'<a href="{html.escape(url)}">{match.group(2)}</a>'

    return _LINK.sub(replace, body)


def _codes(body: str) -> str:
    # In the documents an inline code in capitals is a code shown on purpose: an enum value
    # of the API (`ANSWERED`, `DESTRUCTIVE_ALWAYS_ASKS`) or a setting's name.
    return _CODE.sub(r'<code class="enum-code">\1</code>', body)


def _tables_and_blocks(body: str) -> str:
    """Tables scroll in their own labelled region on a phone; code blocks look like the
    other JSON the pages show as sent."""
    body = body.replace(
        "<table>", '<div class="table-wrap" role="region" aria-label="Table" tabindex="0"><table>'
    )
    body = body.replace("</table>", "</table></div>")
    return body.replace("<pre><code", '<pre class="json" tabindex="0"><code')


def _html(text: str) -> str:
    """Markdown of the documents as these pages show it."""
    converter = markdown.Markdown(
        extensions=["tables", "fenced_code", "toc"],
        extension_configs={"toc": {"slugify": github_slug, "permalink": False}},
    )
    return _tables_and_blocks(_codes(_links(converter.convert(_without_rule_numbers(text)))))


@lru_cache(maxsize=16)
def _rendered(filename: str, modified: float) -> tuple[str, str]:
    """The page's title and body, rendered once per version of the file."""
    text = (Path(settings.BASE_DIR) / "docs" / filename).read_text(encoding="utf-8")
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "Help")
    return title, _html(text)


@lru_cache(maxsize=4)
def _descriptions(modified: float) -> dict[str, SafeString]:
    """What docs/README.md's list says of each served document, as HTML, by page name. The
    index page lists the documents with these words, not with that file's own opening, which
    speaks to readers of the repository."""
    text = (Path(settings.BASE_DIR) / "docs" / PAGES[""]).read_text(encoding="utf-8")
    names = {filename: name for name, filename in PAGES.items() if name}
    found = {}
    for item in _LIST_ITEM.finditer(text):
        name = names.get(item.group(1))
        if name is not None:
            html_ = _html(" ".join(item.group(2).split()))
            html_ = html_.removeprefix("<p>").removesuffix("</p>")
            found[name] = mark_safe(html_)  # noqa: S308 # nosec B308 B703 - rendered from the repository's own Markdown
    return found


def help_page_html(name: str) -> tuple[str, SafeString]:
    """A served document's title and HTML (Http404 for a name that is not one)."""
    filename = PAGES.get(name)
    if filename is None:
        raise Http404
    path = Path(settings.BASE_DIR) / "docs" / filename
    title, body = _rendered(filename, path.stat().st_mtime)
    return title, mark_safe(body)  # noqa: S308 # nosec B308 B703 - rendered from the repository's own Markdown


def _url(name: str) -> str:
    return reverse("core:help") if not name else reverse("core:help-page", args=[name])


def _for_reader(request: HttpRequest) -> tuple[list[dict[str, Any]], list[str] | None]:
    """The quick starts for the person reading and the pages for their roles (None: all).
    Roles and the pages they open belong to the apps above core, so the project names the
    function that knows them (settings.AIMON_HELP_FOR_READER)."""
    path = getattr(settings, "AIMON_HELP_FOR_READER", "")
    return import_string(path)(request.user) if path else ([], None)


@require_GET
def help_page(request: HttpRequest, page: str = "") -> HttpResponse:
    """A page of the documentation, to everyone (it is the repository's, and grants nothing).
    The first page is each reader's own: a quick start per role they hold, then the
    documents, those for their roles first and the rest below, still a click away."""
    title, body = help_page_html(page)
    quick_starts, mine = _for_reader(request)
    documents = [name for name in PAGES if name]
    yours = documents if mine is None else [name for name in documents if name in mine]
    pages = [
        {"url": _url(name), "title": help_page_html(name)[0] if name else "Help", "current": name == page}
        for name in ["", *documents]
        if not name or name in yours or name == page
    ]
    context: dict[str, Any] = {"title": title, "body": body, "pages": pages, "openapi": "api" in yours}
    if not page:
        readme = Path(settings.BASE_DIR) / "docs" / PAGES[""]
        words = _descriptions(readme.stat().st_mtime)

        def listed(names: list[str]) -> list[dict[str, Any]]:
            return [
                {
                    "url": _url(name),
                    "title": help_page_html(name)[0],
                    "description": words.get(name, ""),
                }
                for name in names
            ]

        context.update(
            title="Help",
            body=None,
            quick_starts=quick_starts,
            yours=listed(yours),
            others=listed([name for name in documents if name not in yours]),
        )
    return render(request, "core/help.html", context)
