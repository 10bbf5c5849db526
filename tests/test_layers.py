"""The house's layers: apps as rooms, imports as arrows, and only these arrows.

Every module under aimon_admin/ is parsed with `ast`; every import counts, wherever it is
written (inside a function, under `if TYPE_CHECKING:`, relative or absolute, or a literal
`importlib.import_module("aimon_admin....")`). An import from one app into another that the
table below does not allow fails, naming the file, the line and the edge. Strings that name
another app's model, page, template or tag library count as imports too (tests/layers/strings.py).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

from tests.layers.strings import Edge, Tree, string_edges

PACKAGE = "aimon_admin"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# app -> the apps it may import; no cycle. core is the bottom; audit is a leaf other apps
# write to that knows no other app (but its events' foreign keys: KNOWN_STRING_EDGES).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "audit": frozenset({"core"}),
    "accounts": frozenset({"core", "audit"}),
    "runtimes": frozenset({"core", "audit", "accounts"}),
    "registry": frozenset({"core", "audit", "accounts", "runtimes"}),
    "approvals": frozenset({"core", "audit", "accounts", "runtimes", "registry"}),
    # Notifications hear of requests through core.hooks: approvals never imports them.
    "notifications": frozenset({"core", "audit", "accounts", "runtimes", "registry", "approvals"}),
}
DOMAIN_APPS = frozenset(ALLOWED)
# Above every domain app: pages that read several apps, and above them the menu that names
# every page. They may import any domain app; no domain app imports them.
ALLOWED |= {"audit_pages": DOMAIN_APPS}
ALLOWED |= {"navigation": DOMAIN_APPS | {"audit_pages"}}
# The demo sits on top: it may import any app, and nothing imports it.
TOP_APP = "demo"
# The project's wiring (settings, urls, asgi, wsgi, celery) is no app: it may import any app but the demo.
WIRING = None

LAYER_MESSAGE = "{file}:{line}: {source} -> {target} ({module}) is not an allowed import edge"


APPS = frozenset({*ALLOWED, TOP_APP})


def _app_of(module: str) -> str | None:
    """The app a dotted module under aimon_admin belongs to, None for the project's wiring."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in APPS else WIRING


def _module_name(path: Path, root: Path) -> tuple[str, bool]:
    relative = path.relative_to(root.parent).with_suffix("")
    parts = list(relative.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the tree, at any depth."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            if target == PACKAGE:  # from aimon_admin import approvals
                found.extend((node.lineno, f"{PACKAGE}.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, target))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def _allowed(source: str | None, target: str | None) -> bool:
    if target == source or source == TOP_APP:
        return True
    if target == TOP_APP:
        return False
    if source is WIRING:
        return True
    # An app importing the wiring (urls, celery, settings) points up out of the house.
    return target is not WIRING and target in ALLOWED[source]


def layer_violations(root: Path = ROOT) -> list[str]:
    """Every import under `root` that crosses a forbidden edge, as 'file:line: a -> b (module)'."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_name(path, root)
        source = _app_of(module)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, imported in _imported(tree, module, is_package):
            if imported.split(".")[0] != PACKAGE:
                continue
            target = _app_of(imported)
            if _allowed(source, target):
                continue
            problems.append(
                LAYER_MESSAGE.format(
                    file=path.relative_to(root.parent),
                    line=line,
                    source=source or "project",
                    target=target or "project",
                    module=imported,
                )
            )
    return problems


def test_every_app_is_in_the_table() -> None:
    apps = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"settings"}
    apps |= {p.stem for p in ROOT.glob("*.py")} & APPS  # a layer that is one module (navigation.py)
    assert apps == APPS


def test_no_app_imports_across_a_forbidden_edge() -> None:
    assert layer_violations() == []


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


TYPE_CHECKING_IMPORT = (
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aimon_admin.runtimes.models import X\n"
)


@pytest.mark.parametrize(
    ("relative", "text", "edge"),
    [
        # The ones the house once had: a TYPE_CHECKING import in core, demo data in core, the
        # auditor's pages reading grants, runtimes reading registry's enum.
        ("core/actors.py", TYPE_CHECKING_IMPORT, "core -> runtimes"),
        (
            "core/management/commands/demo_data.py",
            "def f():\n    import aimon_admin.approvals.x\n",
            "core -> approvals",
        ),
        ("audit/selectors.py", "from aimon_admin.approvals.models import Grant\n", "audit -> approvals"),
        ("audit/views/pages.py", "from ...approvals import models\n", "audit -> approvals"),
        ("runtimes/models.py", "from aimon_admin.registry.choices import Level\n", "runtimes -> registry"),
        ("audit/x.py", "from aimon_admin import runtimes\n", "audit -> runtimes"),
        ("audit/x.py", "from aimon_admin.accounts.roles import Role\n", "audit -> accounts"),
        (
            "core/x.py",
            "import importlib\nimportlib.import_module('aimon_admin.accounts.models')\n",
            "core -> accounts",
        ),
        ("approvals/x.py", "from aimon_admin.demo import apps\n", "approvals -> demo"),
        # The pages on top: no domain app reads them, and they do not read the demo.
        ("approvals/home.py", "from aimon_admin.audit_pages import selectors\n", "approvals -> audit_pages"),
        ("audit/x.py", "from aimon_admin.audit_pages.home_views import home_view\n", "audit -> audit_pages"),
        ("core/x.py", "from aimon_admin.navigation import NAV_GROUPS\n", "core -> navigation"),
        ("accounts/x.py", "from aimon_admin import navigation\n", "accounts -> navigation"),
        ("audit_pages/x.py", "from aimon_admin.demo import apps\n", "audit_pages -> demo"),
        ("urls.py", "from aimon_admin.demo import apps\n", "project -> demo"),
        ("core/x.py", "from aimon_admin.urls import urlpatterns\n", "core -> project"),
    ],
)
def test_a_forbidden_import_is_named_with_its_file_line_and_edge(
    tmp_path: Path, relative: str, text: str, edge: str
) -> None:
    root = tmp_path / PACKAGE
    _write(root, relative, text)
    [problem] = layer_violations(root)
    assert problem.startswith(f"{PACKAGE}/{relative}:")
    assert f": {edge} (" in problem


def test_allowed_edges_and_the_top_app_pass(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE
    _write(root, "approvals/x.py", "from aimon_admin.registry.choices import A\nfrom . import y\n")
    _write(root, "audit/x.py", "from aimon_admin.core import api\n")
    _write(root, "demo/x.py", "from aimon_admin.approvals import services\n")
    _write(root, "audit_pages/x.py", "from aimon_admin.approvals.models import Grant\nfrom . import y\n")
    _write(root, "navigation.py", "from aimon_admin.notifications import urls\n")
    _write(root, "urls.py", "from aimon_admin.approvals import urls\n")
    _write(root, "core/x.py", "from django.db import models\nfrom aimon_admin.core.choices import A\n")
    assert layer_violations(root) == []


def table_cycle(table: dict[str, frozenset[str]]) -> list[str]:
    """A cycle of the table's edges as [a, b, …, a]; [] when there is none."""
    done: set[str] = set()

    def visit(app: str, path: list[str]) -> list[str]:
        if app in path:
            return [*path[path.index(app) :], app]
        if app in done:
            return []
        for target in sorted(table.get(app, frozenset()) - {app}):
            if cycle := visit(target, [*path, app]):
                return cycle
        done.add(app)
        return []

    return next((cycle for app in sorted(table) if (cycle := visit(app, []))), [])


def test_the_table_has_no_cycle() -> None:
    assert table_cycle(ALLOWED) == []


@pytest.mark.parametrize(
    ("source", "target"), [("core", "accounts"), ("audit", "approvals"), ("accounts", "notifications")]
)
def test_a_back_edge_in_the_table_is_named_as_a_cycle(source: str, target: str) -> None:
    table = {**ALLOWED, source: ALLOWED[source] | {target}}
    cycle = table_cycle(table)
    steps = list(itertools.pairwise(cycle))
    assert cycle[0] == cycle[-1]
    assert all(b in table[a] for a, b in steps)
    assert (source, target) in steps


TREE = Tree(ROOT, ROOT.parent / "templates")
STRING_MESSAGE = "{file}:{line}: {source} -> {target} ({text}) is not an allowed string edge"

# String edges against the table that need a bigger move than this test: file -> (what it names,
# a URL namespace as "ns:", or "*" for anything; why). Each must still occur: the list only shrinks.
AUDIT_NAMESPACE = "audit's proof pages and cards are served in the auditor's pages' `audit:` namespace"
LINKS_UP = "a page links to an app above; the link belongs to that app (a provider, as core.home's)"
API_DOCS = "links the API docs page, which the root urls serve (drf-spectacular)"
KNOWN_STRING_EDGES: dict[str, tuple[tuple[str, ...], str]] = {
    "aimon_admin/approvals/api/authzen/views.py": (
        ("authzen-evaluation", "authzen-evaluations"),
        "the AuthZEN specification fixes these paths, so the root urls hold them",
    ),
    "aimon_admin/audit/models.py": (
        ("settings.AUTH_USER_MODEL", "runtimes.AgentRuntime"),
        "an event's actor and runtime are foreign keys (PROTECT), as the log's columns",
    ),
    "aimon_admin/audit/tasks.py": (("get_user_model()",), "a verification someone asked for names them"),
    "aimon_admin/audit/home.py": (("audit:",), AUDIT_NAMESPACE),
    "aimon_admin/audit/proof_views.py": (("audit:",), AUDIT_NAMESPACE),
    "templates/audit/_checkpoint_card.html": (("audit:",), AUDIT_NAMESPACE),
    "templates/audit/_verification.html": (("audit:",), AUDIT_NAMESPACE),
    "templates/audit/checkpoints.html": (("audit:", "audit/_tabs.html"), AUDIT_NAMESPACE),
    "aimon_admin/core/views.py": (("approvals:request",), "the 503 page links an answer to its request"),
    "templates/accounts/locked.html": (("audit:log",), LINKS_UP),
    "templates/accounts/person.html": (("audit:log",), LINKS_UP),
    "templates/runtimes/list.html": (("audit:log",), LINKS_UP),
    "templates/runtimes/detail.html": (("approvals:agent",), LINKS_UP),
    "aimon_admin/approvals/home.py": (("audit:escalations",), LINKS_UP),
    "templates/approvals/rules.html": (("audit:log",), LINKS_UP),
    "templates/core/help.html": (("api-docs",), API_DOCS),
    "templates/registry/_relay_findings.html": (("api-docs",), API_DOCS),
    "templates/registry/tool_list.html": (("api-docs",), API_DOCS),
}


def _names(pattern: str, text: str) -> bool:
    return pattern in ("*", text) or (pattern.endswith(":") and text.startswith(pattern))


def forbidden_string_edges(tree: Tree = TREE) -> list[Edge]:
    return [e for e in string_edges(tree) if not _allowed(_app_of(e.source), _app_of(e.target))]


def string_violations(tree: Tree = TREE) -> list[str]:
    """Every string edge the table forbids and KNOWN_STRING_EDGES does not name."""
    return [
        STRING_MESSAGE.format(
            file=e.file,
            line=e.line,
            source=_app_of(e.source) or "project",
            target=_app_of(e.target) or "project",
            text=e.text,
        )
        for e in forbidden_string_edges(tree)
        if not any(_names(pattern, e.text) for pattern in KNOWN_STRING_EDGES.get(e.file, ((),))[0])
    ]


def test_no_string_names_across_a_forbidden_edge() -> None:
    assert string_violations() == []


def test_every_known_string_edge_still_occurs() -> None:
    found = forbidden_string_edges()
    stale = [
        f"{file}: {pattern}"
        for file, (patterns, _) in KNOWN_STRING_EDGES.items()
        for pattern in patterns
        if not any(e.file == file and _names(pattern, e.text) for e in found)
    ]
    assert stale == []


@pytest.mark.parametrize(
    ("relative", "text", "edge"),
    [
        ("aimon_admin/runtimes/views.py", 'reverse("approvals:inbox")\n', "runtimes -> approvals"),
        ("templates/core/home.html", "{% url 'approvals:inbox' %}\n", "core -> approvals"),
        ("templates/accounts/people.html", '{% include "registry/row.html" %}\n', "accounts -> registry"),
        ("aimon_admin/core/urls.py", 'include("aimon_admin.urls")\n', "core -> project"),
        ("templates/htmx/field.html", "{% url 'registry:list' %}\n", "core -> registry"),
        ("aimon_admin/runtimes/models.py", 'ForeignKey("registry.Tool")\n', "runtimes -> registry"),
        ("aimon_admin/core/models.py", "ForeignKey(settings.AUTH_USER_MODEL)\n", "core -> accounts"),
    ],
)
def test_a_forbidden_string_is_named_with_its_file_line_and_edge(
    tmp_path: Path, relative: str, text: str, edge: str
) -> None:
    tree = _scratch_tree(tmp_path)
    _write(tmp_path, relative, text)
    [problem] = string_violations(tree)
    assert problem.startswith(f"{relative}:1: {edge} (")


def test_allowed_strings_pass(tmp_path: Path) -> None:
    tree = _scratch_tree(tmp_path)
    _write(tmp_path, "aimon_admin/approvals/views.py", 'reverse("registry:list")\n')
    _write(tmp_path, "aimon_admin/approvals/forms.py", 'reverse("approvals:inbox")\n')
    _write(tmp_path, "aimon_admin/demo/x.py", 'reverse("approvals:inbox")\n')
    _write(tmp_path, "aimon_admin/urls.py", 'urlpatterns = [include("aimon_admin.approvals.urls")]\n')
    _write(tmp_path, "templates/base.html", "{% url 'approvals:inbox' %}\n")
    _write(tmp_path, "templates/core/home.html", '{% extends "base.html" %}{% include "htmx/field.html" %}\n')
    _write(tmp_path, "templates/approvals/inbox.html", "{% include 'registry/row.html' %}\n")
    assert string_violations(tree) == []


def test_a_known_edge_excuses_only_the_strings_it_lists(tmp_path: Path) -> None:
    tree = _scratch_tree(tmp_path)
    # KNOWN_STRING_EDGES lists approvals:request for this file, not approvals:inbox.
    _write(tmp_path, "aimon_admin/core/views.py", 'reverse("approvals:inbox")\n')
    assert string_violations(tree) == [
        "aimon_admin/core/views.py:1: core -> approvals (approvals:inbox) is not an allowed string edge"
    ]


def _scratch_tree(root: Path) -> Tree:
    """A checkout to write into: every app, the URL names approvals:inbox and registry:list,
    and the templates registry/row.html and htmx/field.html."""
    for app in APPS:
        _write(root, f"{PACKAGE}/{app}/apps.py", f'name = "{PACKAGE}.{app}"\n')
        _write(root, f"{PACKAGE}/{app}/__init__.py", "")
    _write(root, f"{PACKAGE}/settings/base.py", 'AUTH_USER_MODEL = "accounts.User"\n')
    _write(root, f"{PACKAGE}/urls.py", "")
    for app, name in (("approvals", "inbox"), ("registry", "list")):
        urls = f'app_name = "{app}"\nurlpatterns = [path("", view, name="{name}")]\n'
        _write(root, f"{PACKAGE}/{app}/urls.py", urls)
    _write(root, "templates/registry/row.html", "")
    _write(root, "templates/htmx/field.html", "")
    return Tree(root / PACKAGE, root / "templates")


# What runtimes install (G1-G3) stands outside the house: it speaks to the product only over
# HTTP, so it runs where Django is not installed.
CLIENTS = Path(__file__).resolve().parent.parent / "clients" / "python" / "src"
SERVER_SIDE = ("aimon_admin", "django", "rest_framework", "celery")


def client_violations(root: Path = CLIENTS) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_name(path, root)
        for line, target in _imported(ast.parse(path.read_text(), str(path)), module, is_package):
            if target.split(".")[0] in SERVER_SIDE:
                found.append(f"{path.relative_to(root)}:{line}: {target}")
    return found


def test_the_client_package_imports_nothing_of_the_server() -> None:  # G1
    assert client_violations() == []


def test_a_client_module_importing_django_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "aimon_client/sneaky.py", "from django.conf import settings\n")
    assert client_violations(tmp_path) == ["aimon_client/sneaky.py:1: django.conf"]
