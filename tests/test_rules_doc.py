"""docs/rules.md defines every rule id the code and its tests cite, and each of its links holds:
an "Implemented by" link names a function or class that imports (and the file it links to is
the one that defines it), a "Pinned by" link names a test that exists in the file it links to.
Nothing here runs the tests it names: their files are read with ast."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "docs" / "rules.md"

# Where ids are cited: the product, its clients, templates, docs and tests.
CITING_DIRS = ("aimon_admin", "clients", "templates", "static", "docs", "tests")
CITING_SUFFIXES = {".py", ".html", ".md", ".txt", ".js", ".yaml", ".yml", ".toml"}
RULE_ID = re.compile(r"\b[TSUPAG][0-9]{1,2}\b")

_HEADING = re.compile(r"^### ([A-Z][0-9]{1,2})\s*$")
_LINK = re.compile(r"\[`([^`]+)`\]\(([^)\s]+)\)")
_IMPLEMENTED = "- Implemented by:"
_PINNED = "- Pinned by:"


@dataclass
class Rule:
    id: str
    implemented_by: list[tuple[str, str]] = field(default_factory=list)  # (dotted path, link)
    pinned_by: list[tuple[str, str]] = field(default_factory=list)  # (node id, link)


def parse(text: str) -> list[Rule]:
    """The rules of a rules page, in order: each `### <id>` heading and the links of its
    "Implemented by" and "Pinned by" bullets (a bullet may go on over indented lines)."""
    rules: list[Rule] = []
    bullet: list[tuple[str, str]] | None = None
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading:
            rules.append(Rule(heading.group(1)))
            bullet = None
            continue
        if line.startswith("#"):
            bullet = None
            continue
        if rules and line.startswith(_IMPLEMENTED):
            bullet = rules[-1].implemented_by
        elif rules and line.startswith(_PINNED):
            bullet = rules[-1].pinned_by
        elif not line.startswith("  "):
            bullet = None
        if bullet is not None:
            bullet.extend(_LINK.findall(line))
    return rules


@cache
def documented() -> tuple[Rule, ...]:
    return tuple(parse(RULES.read_text(encoding="utf-8")))


def cited_ids() -> dict[str, str]:
    """Every rule id cited outside docs/rules.md, with one place that cites it."""
    found: dict[str, str] = {}
    for top in CITING_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in CITING_SUFFIXES or path == RULES or "__pycache__" in path.parts:
                continue
            if not path.is_file():
                continue
            for rule_id in RULE_ID.findall(path.read_text(encoding="utf-8", errors="replace")):
                found.setdefault(rule_id, path.relative_to(ROOT).as_posix())
    return found


def resolve_dotted(dotted: str) -> Any:
    """The object a dotted path names: the longest prefix that imports as a module, then
    attributes. Raises ImportError or AttributeError naming what is missing."""
    parts = dotted.split(".")
    module: ModuleType | None = None
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise  # the module exists but an import inside it failed
            continue
        rest = parts[cut:]
        break
    if module is None:
        raise ImportError(f"no module in {dotted}")
    obj: Any = module
    for name in rest:
        obj = inspect.getattr_static(obj, name) if inspect.isclass(obj) else getattr(obj, name)
    return obj


def defining_file(obj: Any) -> Path:
    """The source file of a function, method, property or class."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    source = inspect.getsourcefile(inspect.unwrap(obj))
    assert source is not None
    return Path(source).resolve()


def is_function_or_class(obj: Any) -> bool:
    """A function (decorated ones too: `lru_cache`, `transaction.atomic`), method, property
    or class."""
    obj = inspect.unwrap(obj)
    return (
        inspect.isfunction(obj)
        or inspect.isclass(obj)
        or inspect.ismethod(obj)
        or isinstance(obj, (property, staticmethod, classmethod))
    )


def link_target(link: str) -> Path:
    return (RULES.parent / link.partition("#")[0]).resolve()


def implementation_problem(dotted: str, link: str) -> str | None:
    """Why an "Implemented by" link does not hold, or None."""
    if not dotted.startswith(("aimon_admin.", "aimon_client.")):
        return f"{dotted}: not a dotted path into the product or its client"
    try:
        obj = resolve_dotted(dotted)
    except (ImportError, AttributeError) as exc:
        return f"{dotted}: does not import ({type(exc).__name__}: {exc})"
    if not is_function_or_class(obj):
        return f"{dotted}: is a {type(obj).__name__}, not a function or class"
    if defining_file(obj) != link_target(link):
        shown = defining_file(obj).relative_to(ROOT)
        return f"{dotted}: links to {link} but is defined in {shown}"
    return None


@cache
def defined_tests(path: Path) -> frozenset[str]:
    """The test node names a test file defines: `test_x` and `TestClass::test_x`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, functions) and item.name.startswith("test")
            )
    return frozenset(names)


def pin_problem(node_id: str, link: str) -> str | None:
    """Why a "Pinned by" link does not hold, or None."""
    file_part, sep, name = node_id.partition("::")
    path = (ROOT / file_part).resolve()
    if not sep or not name:
        return f"{node_id}: not a test node id (path::test_name)"
    if path != link_target(link):
        return f"{node_id}: links to {link}, another file"
    if not path.is_file():
        return f"{node_id}: no such file"
    if name not in defined_tests(path):
        return f"{node_id}: no such test in {file_part}"
    return None


# --- The page ---------------------------------------------------------------------------------


def test_the_page_defines_each_id_once() -> None:
    ids = [rule.id for rule in documented()]
    assert len(ids) >= 40, ids
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == []
    assert all(RULE_ID.fullmatch(i) for i in ids), ids


def test_every_id_cited_anywhere_is_defined() -> None:
    defined = {rule.id for rule in documented()}
    undefined = {rule_id: where for rule_id, where in cited_ids().items() if rule_id not in defined}
    assert undefined == {}, f"cited but not defined in docs/rules.md: {undefined}"


def test_every_id_has_an_implementation_and_a_test() -> None:
    bare = [rule.id for rule in documented() if not rule.implemented_by or not rule.pinned_by]
    assert bare == []


@pytest.mark.parametrize("rule", documented(), ids=[rule.id for rule in documented()])
def test_every_implementation_link_imports(rule: Rule) -> None:
    problems = [implementation_problem(dotted, link) for dotted, link in rule.implemented_by]
    assert [p for p in problems if p] == []


@pytest.mark.parametrize("rule", documented(), ids=[rule.id for rule in documented()])
def test_every_pinned_test_exists(rule: Rule) -> None:
    problems = [pin_problem(node_id, link) for node_id, link in rule.pinned_by]
    assert [p for p in problems if p] == []


# --- The checks themselves can fail --------------------------------------------------------------

SAMPLE = """
### X1

Meaning.

- Implemented by: [`aimon_admin.registry.policy.permits`](../aimon_admin/registry/policy.py); the
  rest in [`aimon_admin.registry.policy.resolve`](../aimon_admin/registry/policy.py).
- Pinned by: [`tests/test_rules_doc.py::test_the_page_defines_each_id_once`](../tests/test_rules_doc.py)
"""


def test_the_parser_reads_links_over_continuation_lines() -> None:
    (rule,) = parse(SAMPLE)
    assert rule.id == "X1"
    assert [d for d, _ in rule.implemented_by] == [
        "aimon_admin.registry.policy.permits",
        "aimon_admin.registry.policy.resolve",
    ]
    assert rule.pinned_by == [
        ("tests/test_rules_doc.py::test_the_page_defines_each_id_once", "../tests/test_rules_doc.py")
    ]


@pytest.mark.parametrize(
    ("dotted", "link", "says"),
    [
        ("aimon_admin.registry.policy.permits", "../aimon_admin/registry/policy.py", None),
        ("aimon_admin.registry.policy.ToolAxes", "../aimon_admin/registry/policy.py", None),
        (
            "aimon_admin.registry.policy.ToolAxes.effective_destructive",
            "../aimon_admin/registry/policy.py",
            None,
        ),
        ("aimon_admin.registry.policy.no_such_rule", "../aimon_admin/registry/policy.py", "does not import"),
        (
            "aimon_admin.registry.no_such_module.permits",
            "../aimon_admin/registry/policy.py",
            "does not import",
        ),
        ("aimon_admin.registry.policy.UNREGISTERED", "../aimon_admin/registry/policy.py", "not a function"),
        ("aimon_admin.registry.policy.permits", "../aimon_admin/registry/selectors.py", "defined in"),
        ("registry.policy.permits", "../aimon_admin/registry/policy.py", "not a dotted path"),
    ],
)
def test_a_broken_implementation_link_is_caught(dotted: str, link: str, says: str | None) -> None:
    problem = implementation_problem(dotted, link)
    assert (problem is None) if says is None else (says in (problem or ""))


@pytest.mark.parametrize(
    ("node_id", "link", "says"),
    [
        ("tests/test_rules_doc.py::test_the_page_defines_each_id_once", "../tests/test_rules_doc.py", None),
        ("tests/test_rules_doc.py::test_no_such_test", "../tests/test_rules_doc.py", "no such test"),
        ("tests/no_such_file.py::test_x", "../tests/no_such_file.py", "no such file"),
        (
            "tests/test_rules_doc.py::test_the_page_defines_each_id_once",
            "../tests/test_docs.py",
            "another file",
        ),
        ("tests/test_rules_doc.py", "../tests/test_rules_doc.py", "not a test node id"),
        ("tests/test_rules_doc.py::documented", "../tests/test_rules_doc.py", "no such test"),
    ],
)
def test_a_broken_test_link_is_caught(node_id: str, link: str, says: str | None) -> None:
    problem = pin_problem(node_id, link)
    assert (problem is None) if says is None else (says in (problem or ""))


# What a reader of the repository cannot follow: documents that are not in it, and issue
# numbers (history is in the commit messages). Test data that must hold such text says so
# with `outside-citation-ok` on its line.
OUTSIDE_CITATION = re.compile(
    r"\bDESIGN(?:\.md)?\s+(?:[TSUPAG][0-9]|part\b)|\bDESIGN\.md\b|\bAPI\.md\b|\bseed §"
    r"|\.\./shared/(?:DESIGN|API|STYLE|seeds)|\b[Ii]ssues? [0-9]+\b"
)
CITATION_DIRS = (*CITING_DIRS, "benchmarks", "scripts", ".ci")
CITATION_FILES = ("README.md", "Makefile", "pyproject.toml")


def outside_citations() -> list[str]:
    found = []
    paths = [ROOT / name for name in CITATION_FILES]
    for top in CITATION_DIRS:
        paths += sorted(p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in paths:
        if path.suffix not in {*CITING_SUFFIXES, ".css", ""} or path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE_CITATION.search(line) and "outside-citation-ok" not in line:
                found.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()}")
    return found


def test_nothing_cites_a_document_outside_the_repository_or_an_issue() -> None:
    assert outside_citations() == []


@pytest.mark.parametrize(
    ("line", "cites"),
    [
        ("# DESIGN A2: the chain", True),
        ('"""Skill decisions (API.md "Skill decisions")."""', True),
        ("# seed §8.1 says so", True),
        ("see ../shared/DESIGN.md", True),
        ("as DESIGN.md says", True),
        ("(issue 17 item 8)", True),
        ("# A2: the chain", False),
        ('docs/api.md, "Basics"', False),
        ("an operator issues a token", False),
        ("test_design.py", False),
    ],
)
def test_an_outside_citation_is_caught(line: str, cites: bool) -> None:
    assert bool(OUTSIDE_CITATION.search(line)) is cites
