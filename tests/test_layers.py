"""The house's layers: apps as rooms, imports as arrows, and only these arrows.

Every module under aimon_admin/ is parsed with `ast`; every import counts, wherever it is
written (inside a function, under `if TYPE_CHECKING:`, relative or absolute, or a literal
`importlib.import_module("aimon_admin....")`). An import from one app into another that the
table below does not allow fails, naming the file, the line and the edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "aimon_admin"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# app -> the apps it may import. core is the bottom; audit is a leaf other apps write to that
# knows no other app's models (accounts only for identity and roles).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "audit": frozenset({"core", "accounts"}),
    "accounts": frozenset({"core", "audit"}),
    "runtimes": frozenset({"core", "audit", "accounts"}),
    "registry": frozenset({"core", "audit", "accounts", "runtimes"}),
    "approvals": frozenset({"core", "audit", "accounts", "runtimes", "registry"}),
    # Notifications hear of requests through core.hooks: approvals never imports them.
    "notifications": frozenset({"core", "audit", "accounts", "runtimes", "registry", "approvals"}),
}
DOMAIN_APPS = frozenset(ALLOWED)
# Above every domain app: pages that read several apps, and the menu that names every app's
# pages. They may import any domain app; no domain app imports them.
ALLOWED |= {"audit_pages": DOMAIN_APPS, "navigation": DOMAIN_APPS}
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
    _write(
        root, "audit/x.py", "from aimon_admin.accounts.roles import Role\nfrom aimon_admin.core import api\n"
    )
    _write(root, "demo/x.py", "from aimon_admin.approvals import services\n")
    _write(root, "audit_pages/x.py", "from aimon_admin.approvals.models import Grant\nfrom . import y\n")
    _write(root, "navigation.py", "from aimon_admin.notifications import urls\n")
    _write(root, "urls.py", "from aimon_admin.approvals import urls\n")
    _write(root, "core/x.py", "from django.db import models\nfrom aimon_admin.core.choices import A\n")
    assert layer_violations(root) == []


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
