"""Edges written as strings, found by reading the source (ast for Python, a regex for templates).

Each is an import in all but syntax:

- a model named by its label: `ForeignKey("runtimes.AgentRuntime")`, `OneToOneField`,
  `ManyToManyField`, `apps.get_model(…)`, and the user model through `settings.AUTH_USER_MODEL`
  or `get_user_model()`;
- a page named by its URL name: any string that is one, `"approvals:inbox"` (in `reverse()`,
  `redirect()`, a menu's table, `{% url %}`), owned by the urls module declaring its namespace
  (`app_name = …`); a name without namespace by the root urls;
- a template named by its path: `render(request, "registry/x.html")`, `template_name = …`,
  `{% include %}`, `{% extends %}`; templates/<app>/ belongs to that app unless TEMPLATE_OWNERS
  says who renders it;
- a template tag library, `{% load ui %}`: the app holding templatetags/ui.py;
- a module named by its dotted path: `include("aimon_admin.core.urls")`.

An edge joins two dotted modules, the file's and the one it names, so tests/test_layers.py
judges it by the same table as an import. Migrations are not read: they are written from the
models, whose fields are.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# Templates rendered by other code than the app their folder is named after: a path (or a
# folder, ending in "/"; the longest match wins) -> the package rendering it, by its directory's
# name wherever it sits under aimon_admin/ ("" is aimon_admin itself: the project).
TEMPLATE_OWNERS: dict[str, str] = {
    "base.html": "",  # the frame every page extends, the project's as urls.py is
    "htmx/": "core",  # form pieces any app's page may include
    "drf_spectacular/": "",  # the API docs page, served by the root urls
    "email/": "notifications",
    "audit/": "audit_pages",  # the auditor's pages; the audit app renders the three below
    "audit/_verification.html": "audit",
    "audit/_checkpoint_card.html": "audit",
    "audit/checkpoints.html": "audit",
}
# Included or extended from anywhere: naming one is no edge.
SHARED_TEMPLATES = ("base.html", "htmx/")

MODEL_FIELDS = frozenset({"ForeignKey", "OneToOneField", "ManyToManyField"})
DOTTED = re.compile(r"\w+(\.\w+)+")
TAG = re.compile(r"\{%-?(.*?)-?%\}", re.DOTALL)
QUOTED = re.compile(r"""(["'])(.*?)\1""")


@dataclass(frozen=True, order=True)
class Edge:
    file: str  # as the repository names it
    line: int
    source: str  # the dotted module the file belongs to
    target: str  # the dotted module the string names
    text: str  # the string as written


def covers(key: str, path: str) -> bool:
    """Whether a TEMPLATE_OWNERS key is the template at `path` or a folder holding it."""
    return key == path or (key.endswith("/") and path.startswith(key))


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _constant(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _assigned(tree: ast.AST, name: str) -> Iterator[str]:
    """Every string constant assigned to `name` in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            value = _constant(node.value)
            if value is not None:
                yield value


class Tree:
    """What strings name in one checkout: URL names, templates, app labels, tag libraries."""

    def __init__(self, package: Path, templates: Path) -> None:
        self.package, self.templates = package, templates

    def module(self, path: Path) -> str:
        parts = list(path.relative_to(self.package.parent).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def package_named(self, name: str) -> str:
        """The dotted name of the one package so named under the package ("": the package)."""
        if not name:
            return self.package.name
        [found] = self.package.glob(f"**/{name}/__init__.py")  # one package of that name
        return self.module(found.parent)

    @cached_property
    def python_files(self) -> list[Path]:
        return sorted(p for p in self.package.rglob("*.py") if "migrations" not in p.parts)

    def path_of(self, module: str) -> Path | None:
        base = self.package.parent.joinpath(*module.split("."))
        return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.exists()), None)

    def url_names(self, path: Path) -> set[str]:
        """The URL names a urls module declares, with those of the modules whose `urlpatterns`
        it splices in (`*views.urlpatterns`, the view module imported by name)."""
        tree = _parse(path)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        names = {_constant(k.value) for call in calls for k in call.keywords if k.arg == "name"} - {None}
        imported = {
            alias.asname or alias.name: f"{node.module}.{alias.name}"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "urlpatterns":
                spliced = self.path_of(imported.get(getattr(node.value, "id", ""), ""))
                names |= self.url_names(spliced) if spliced else set()
        return names

    @cached_property
    def url_owners(self) -> dict[str, str]:
        """Every URL name -> the urls module owning it: "ns:name" the one whose `app_name` is
        ns, a name without namespace the root urls."""
        root = self.package / "urls.py"
        owners = dict.fromkeys(self.url_names(root), self.module(root))
        for path in self.python_files:
            for namespace in _assigned(_parse(path), "app_name"):
                owners |= {f"{namespace}:{name}": self.module(path) for name in self.url_names(path)}
        return owners

    @cached_property
    def labels(self) -> dict[str, str]:
        """App label -> the app's package (`label` in its apps.py, else its name's last part)."""
        found = {}
        for path in self.package.glob("*/apps.py"):
            tree = _parse(path)
            app = self.module(path.parent)
            [label] = [*_assigned(tree, "label")] or [app.rsplit(".", 1)[-1]]
            found[label] = app
        return found

    @cached_property
    def user_app(self) -> str:
        """The package of settings.AUTH_USER_MODEL."""
        settings = self.package / "settings"
        [label] = {v for p in settings.rglob("*.py") for v in _assigned(_parse(p), "AUTH_USER_MODEL")}
        return self.labels[label.split(".")[0]]

    @cached_property
    def tag_libraries(self) -> dict[str, str]:
        """`{% load name %}` -> the package whose templatetags/ holds it."""
        found = self.package.glob("**/templatetags/*.py")
        return {p.stem: self.module(p.parent.parent) for p in found if p.stem != "__init__"}

    @cached_property
    def template_paths(self) -> list[str]:
        files = (p for p in self.templates.rglob("*") if p.is_file())
        return sorted(p.relative_to(self.templates).as_posix() for p in files)

    def template_owner(self, path: str) -> str | None:
        """The package rendering the template at `path` (relative to templates/), None if unknown."""
        listed = [key for key in TEMPLATE_OWNERS if covers(key, path)]
        if listed:
            return self.package_named(TEMPLATE_OWNERS[max(listed, key=len)])
        folder, slash, _ = path.partition("/")
        app = self.package / folder
        return self.module(app) if slash and (app / "__init__.py").exists() else None

    def template_target(self, text: str) -> str | None:
        path = text.partition("#")[0]  # "registry/review.html#row": a partial of that template
        if path not in self.template_paths or path.startswith(SHARED_TEMPLATES):
            return None
        return self.template_owner(path)

    def string_target(self, text: str) -> str | None:
        """The module a string names: a URL name, a template, or a dotted module (but an app's
        own package: that is how INSTALLED_APPS and AppConfig.name install it)."""
        if text.startswith(f"{self.package.name}.") and DOTTED.fullmatch(text):
            return None if text in self.labels.values() else text
        return self.url_owners.get(text) or self.template_target(text)

    def prefix_target(self, prefix: str) -> str | None:
        """The module the constant start of an f-string names: f"registry:{kind}-detail" (a
        namespace holding a name that starts so), f"registry/{kind}.html" (a template folder)."""
        if ":" in prefix:
            owners = {owner for name, owner in self.url_owners.items() if name.startswith(prefix)}
            return owners.pop() if len(owners) == 1 else None
        folder, slash, _ = prefix.partition("/")
        if not (folder and slash) or prefix.startswith(SHARED_TEMPLATES):
            return None
        return self.template_owner(prefix) if (self.templates / folder).is_dir() else None

    def model_target(self, call: ast.Call) -> tuple[str, str] | None:
        """(module, label) of the model a field or `get_model` names by its label."""
        name = _called(call)
        if name in MODEL_FIELDS:
            to = [k.value for k in call.keywords if k.arg == "to"]
            label = _constant(call.args[0] if call.args else to[0] if to else None)
        elif name == "get_model":
            label = _constant(call.args[0] if call.args else None)
        else:
            return None
        if not label or ("." not in label and name in MODEL_FIELDS):
            return None  # "self", or a model of the same app by its bare name
        app = self.labels.get(label.split(".")[0])
        return (app, label) if app else None


def python_edges(tree: Tree, path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, target module, text) for every string edge in a Python file."""
    parsed = _parse(path)
    nodes = list(ast.walk(parsed))
    # A registry's key (core.home's `provide("audit:chain", …)`) names a provider, not a page.
    skipped = {id(n.args[0]) for n in nodes if isinstance(n, ast.Call) and _called(n) == "provide" and n.args}
    skipped |= {id(part) for n in nodes if isinstance(n, ast.JoinedStr) for part in n.values}
    for node in nodes:
        if isinstance(node, ast.Constant) and id(node) not in skipped:
            text = _constant(node)
            target = tree.string_target(text) if text else None
        elif isinstance(node, ast.JoinedStr):
            text = _constant(node.values[0]) if node.values else None
            target = tree.prefix_target(text) if text else None
        elif isinstance(node, ast.Attribute) and node.attr == "AUTH_USER_MODEL":
            text, target = "settings.AUTH_USER_MODEL", tree.user_app
        elif isinstance(node, ast.Call) and _called(node) == "get_user_model":
            text, target = "get_user_model()", tree.user_app
        elif isinstance(node, ast.Call) and (model := tree.model_target(node)):
            target, text = model
        else:
            continue
        if target and text:
            yield node.lineno, target, text


def template_edges(tree: Tree, source: str) -> Iterator[tuple[int, str, str]]:
    """(line, target module, text) for every string edge in a template's tags."""
    for tag in TAG.finditer(source):
        words = tag.group(1).split()
        if words[:1] == ["load"]:
            libraries = words[-1:] if "from" in words else words[1:]
            line = source.count("\n", 0, tag.start()) + 1
            for library in libraries:
                if library in tree.tag_libraries:
                    yield line, tree.tag_libraries[library], f"load {library}"
        for quoted in QUOTED.finditer(tag.group(1)):
            text = quoted.group(2)
            target = tree.url_owners.get(text) or tree.template_target(text)
            if target:
                yield source.count("\n", 0, tag.start(1) + quoted.start()) + 1, target, text


def string_edges(tree: Tree) -> list[Edge]:
    """Every string edge in the package's Python (but migrations) and in the templates."""
    repository = tree.package.parent
    edges = []
    for path in tree.python_files:
        source = tree.module(path)
        file = path.relative_to(repository).as_posix()
        found = python_edges(tree, path)
        edges += [Edge(file, line, source, target, text) for line, target, text in found if target != source]
    for relative in tree.template_paths:
        source = tree.template_owner(relative)
        if source is None:
            continue  # tests/layers/test_strings.py names templates nobody owns
        path = tree.templates / relative
        file = path.relative_to(repository).as_posix()
        text = path.read_text(encoding="utf-8")
        edges += [Edge(file, line, source, target, t) for line, target, t in template_edges(tree, text)]
    return sorted(edges)
