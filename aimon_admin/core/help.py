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
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path

import markdown
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
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
            url = reverse("core:help") if not name else reverse("core:help-page", args=[name])
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


@lru_cache(maxsize=16)
def _rendered(filename: str, modified: float) -> tuple[str, str]:
    """The page's title and body, rendered once per version of the file."""
    text = (Path(settings.BASE_DIR) / "docs" / filename).read_text(encoding="utf-8")
    converter = markdown.Markdown(
        extensions=["tables", "fenced_code", "toc"],
        extension_configs={"toc": {"slugify": github_slug, "permalink": False}},
    )
    body = converter.convert(_without_rule_numbers(text))
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "Help")
    return title, _tables_and_blocks(_codes(_links(body)))


def help_page_html(name: str) -> tuple[str, SafeString]:
    """A served document's title and HTML (Http404 for a name that is not one)."""
    filename = PAGES.get(name)
    if filename is None:
        raise Http404
    path = Path(settings.BASE_DIR) / "docs" / filename
    title, body = _rendered(filename, path.stat().st_mtime)
    return title, mark_safe(body)  # noqa: S308 # nosec B308 B703 - rendered from the repository's own Markdown


@require_GET
def help_page(request: HttpRequest, page: str = "") -> HttpResponse:
    """A page of the documentation, to everyone (it is the repository's, and grants nothing)."""
    title, body = help_page_html(page)
    pages = [
        {
            "url": reverse("core:help") if not name else reverse("core:help-page", args=[name]),
            "title": help_page_html(name)[0],
            "current": name == page,
        }
        for name in PAGES
    ]
    return render(request, "core/help.html", {"title": title, "body": body, "pages": pages})
