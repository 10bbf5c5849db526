"""Each kind of string edge is found as what it names, and nothing else is (tests/layers/strings.py).
Whether an edge is allowed is tests/test_layers.py's to say."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layers.strings import TEMPLATE_OWNERS, Tree, covers, string_edges

REPOSITORY = Path(__file__).resolve().parent.parent.parent
TREE = Tree(REPOSITORY / "aimon_admin", REPOSITORY / "templates")

APPS = ("core", "audit", "accounts", "runtimes", "registry", "approvals", "demo")
# A checkout in miniature: a root urls with its own name, an app namespace, one whose names
# come from a view module it splices in (as the auditor's pages do), templates, tag libraries.
SCRATCH = {
    "aimon_admin/settings/base.py": 'AUTH_USER_MODEL = "accounts.User"\n',
    "aimon_admin/urls.py": 'urlpatterns = [path("docs/", docs, name="api-docs")]\n',
    "aimon_admin/approvals/urls.py": (
        'app_name = "approvals"\nurlpatterns = [path("", inbox, name="inbox"), path("a/", a, name="agent")]\n'
    ),
    "aimon_admin/approvals/pages/__init__.py": "",
    "aimon_admin/approvals/pages/urls.py": (
        "from aimon_admin.approvals.pages import views\n"
        'app_name = "pages"\nurlpatterns = [*views.urlpatterns]\n'
    ),
    "aimon_admin/approvals/pages/views.py": 'urlpatterns = [path("e/", event, name="event")]\n',
    "aimon_admin/registry/templatetags/registry_tags.py": "",
    "templates/base.html": "",
    "templates/htmx/field.html": "",
    "templates/registry/row.html": "",
    "templates/approvals/inbox.html": "",
}


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    for app in APPS:
        _write(tmp_path, f"aimon_admin/{app}/__init__.py", "")
        _write(tmp_path, f"aimon_admin/{app}/apps.py", f'name = "aimon_admin.{app}"\nlabel = "{app}"\n')
    for relative, text in SCRATCH.items():
        _write(tmp_path, relative, text)
    return tmp_path


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


PY = "aimon_admin/core/x.py"
HTML = "templates/core/x.html"


@pytest.mark.parametrize(
    ("relative", "text", "target"),
    [
        # Models by label, and the user model.
        (PY, 'f = models.ForeignKey("registry.Tool", on_delete=models.PROTECT)', "aimon_admin.registry"),
        (PY, 'f = models.ManyToManyField(to="runtimes.AgentRuntime")', "aimon_admin.runtimes"),
        (PY, "f = models.OneToOneField(settings.AUTH_USER_MODEL)", "aimon_admin.accounts"),
        (PY, "user = get_user_model()", "aimon_admin.accounts"),
        (PY, 'apps.get_model("runtimes", "AgentRuntime")', "aimon_admin.runtimes"),
        (PY, 'apps.get_model("registry.Tool")', "aimon_admin.registry"),
        # Pages by URL name, wherever the string is: the namespace's urls module owns it.
        (PY, 'reverse("approvals:inbox")', "aimon_admin.approvals.urls"),
        (PY, 'success_url = reverse_lazy("approvals:inbox")', "aimon_admin.approvals.urls"),
        (PY, 'redirect("approvals:agent", name)', "aimon_admin.approvals.urls"),
        (PY, 'MENU = (("Inbox", "approvals:inbox"),)', "aimon_admin.approvals.urls"),
        (PY, 'reverse(f"approvals:{kind}")', "aimon_admin.approvals.urls"),
        (PY, 'reverse("pages:event")', "aimon_admin.approvals.pages.urls"),
        (PY, 'reverse("api-docs")', "aimon_admin.urls"),
        # Templates by path; modules by dotted path.
        (PY, 'render(request, "registry/row.html", {})', "aimon_admin.registry"),
        (PY, 'template_name = "registry/row.html#cell"', "aimon_admin.registry"),
        (PY, 'render_to_string(f"registry/{kind}.html")', "aimon_admin.registry"),
        (PY, 'include("aimon_admin.approvals.urls")', "aimon_admin.approvals.urls"),
        (HTML, "<a href=\"{% url 'approvals:agent' runtime.name %}\">", "aimon_admin.approvals.urls"),
        (HTML, '{% include "registry/row.html" with row=row only %}', "aimon_admin.registry"),
        (HTML, '{% extends "approvals/inbox.html" %}', "aimon_admin.approvals"),
        (HTML, "{% load ui registry_tags %}", "aimon_admin.registry"),
        (HTML, "{% load tool_state from registry_tags %}", "aimon_admin.registry"),
        (HTML, "{% url 'api-docs' %}", "aimon_admin.urls"),
    ],
)
def test_a_string_edge_is_found_with_its_line_and_target(
    scratch: Path, relative: str, text: str, target: str
) -> None:
    _write(scratch, relative, f"\n\n{text}\n")
    [edge] = string_edges(Tree(scratch / "aimon_admin", scratch / "templates"))
    assert (edge.file, edge.line, edge.target) == (relative, 3, target)
    assert edge.source == ("aimon_admin.core.x" if relative == PY else "aimon_admin.core")


@pytest.mark.parametrize(
    ("relative", "text"),
    [
        (PY, 'f = models.ForeignKey("Tool", on_delete=models.PROTECT)'),  # its own app's model
        (PY, 'f = models.ForeignKey("self", on_delete=models.PROTECT)'),
        (PY, 'f = models.ManyToManyField("auth.Group")'),  # not this project's
        (PY, 'reverse("approvals:nothing")'),  # no such URL name
        (PY, 'home.provide("approvals:inbox", section, order=1)'),  # a registry's key
        (PY, 'INSTALLED_APPS = ["aimon_admin.demo"]'),  # installs the app
        (PY, 'render(request, "htmx/field.html")'),  # shared
        (PY, 'headers = {"Location": f"/api/v1/{path}"}'),
        (HTML, '{% extends "base.html" %}{% include "htmx/field.html" %}'),
        (HTML, "{% url cancel_url %}{% include template_name %}{% load static partials %}"),
        (HTML, "<p>approvals:inbox and registry/row.html, outside a tag</p>"),
        ("aimon_admin/core/migrations/0002_x.py", 'f = models.ForeignKey(to="registry.tool")'),
    ],
)
def test_what_names_no_other_module_is_no_edge(scratch: Path, relative: str, text: str) -> None:
    _write(scratch, relative, f"{text}\n")
    assert string_edges(Tree(scratch / "aimon_admin", scratch / "templates")) == []


def test_a_tag_over_several_lines_gives_the_line_of_the_string(scratch: Path) -> None:
    _write(scratch, HTML, "<p>\n{% include 'htmx/field.html'\n   with url='approvals:inbox' %}\n")
    [edge] = string_edges(Tree(scratch / "aimon_admin", scratch / "templates"))
    assert (edge.line, edge.text) == (3, "approvals:inbox")


@pytest.mark.parametrize(
    ("template", "owner"),
    [
        ("registry/row.html", "aimon_admin.registry"),  # templates/<app>/ is the app's
        ("htmx/field.html", "aimon_admin.core"),
        ("base.html", "aimon_admin"),
        ("email/approval.html", "aimon_admin.notifications"),
        ("audit/log.html", "aimon_admin.approvals.pages"),  # TEMPLATE_OWNERS, found by the package's name
        ("audit/checkpoints.html", "aimon_admin.audit"),  # the longest listed path wins
        ("elsewhere/x.html", None),
    ],
)
def test_a_template_belongs_to_the_code_rendering_it(
    scratch: Path, monkeypatch: pytest.MonkeyPatch, template: str, owner: str | None
) -> None:
    _write(scratch, "aimon_admin/notifications/__init__.py", "")
    monkeypatch.setitem(TEMPLATE_OWNERS, "audit/", "pages")
    assert Tree(scratch / "aimon_admin", scratch / "templates").template_owner(template) == owner


def test_every_template_has_an_owner() -> None:
    assert [path for path in TREE.template_paths if TREE.template_owner(path) is None] == []


def test_every_listed_owner_names_templates_and_one_package() -> None:
    for path, name in TEMPLATE_OWNERS.items():
        assert any(covers(path, template) for template in TREE.template_paths), path
        assert not name or len([*TREE.package.glob(f"**/{name}/__init__.py")]) == 1, name
