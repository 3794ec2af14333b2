"""The package's import order holds: no module imports from a layer above its own, and no modules import each other in a
circle (issue 50).

The order is the one ``../shared/spec/architecture.md`` draws ("Data flows one way"), written once here as
:data:`LAYERS`. The imports are read from the source with :mod:`ast`, nothing is imported, so the whole check takes
about a second (parsing the package once, shared by the tests). Every ``import`` counts, those inside functions too: a
lazy import is still a dependency, it only moves the moment it can fail. Imports under ``if TYPE_CHECKING:`` are left
out, because they never run and exist only for annotations. Strings a registry resolves at run time
(``pipeline/stages.py`` names each stage's config class as ``"module:attribute"``) are data, not imports, and are not
read.

The checker is tried on a planted graph first, so the tests on the real tree cannot pass because the checker sees
nothing.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "eegprivacy"
SRC = Path(__file__).resolve().parents[1] / "src" / PACKAGE

# The import order of src/eegprivacy/, lowest first, as ../shared/spec/architecture.md draws it: a module may import
# from its own layer or a lower one. Each name is a top-level module or package of eegprivacy; "__init__" is the
# package's own __init__.py. Three names the spec does not draw sit where what they import puts them:
# - "__init__" only holds __version__ and imports nothing, so anything may import it;
# - "defaults" ships the packaged params files (standard library only), read by studies.cohort.loading;
# - "reproduce_progress" prints `make reproduce`'s progress line (standard library only), used by cli and
#   pipeline.progress.
# experiments/ and benchmarks/ sit on top, outside the package: they may import any of it and are not read here.
LAYERS: list[list[str]] = [
    ["__init__", "params", "validation", "errors", "paths", "atomic", "defaults", "reproduce_progress"],
    ["data", "tracking"],
    ["signal", "models", "batched"],
    ["privacy", "attacks", "evaluation"],  # generic: they know no study
    ["federated", "embeddings"],
    ["pipeline"],
    ["studies"],
    ["reporting", "commands"],
    ["cli"],
]


@dataclass(frozen=True)
class Import:
    """One import of one eegprivacy module by another, with the place it is written."""

    source: str  # the importing module, dotted
    target: str  # the imported module, dotted (the longest name that is a module of the package)
    where: str  # "src/eegprivacy/…/file.py:line"

    def __str__(self) -> str:
        return f"{self.where}: {self.source} imports {self.target}"


def module_name(path: Path, root: Path) -> str:
    """The dotted module name of ``path``, a ``.py`` file under the package folder ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root.name, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, at any depth, except those in the body of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        kept = child.orelse if isinstance(child, ast.If) and _is_type_checking(child.test) else [child]
        for statement in kept:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                yield statement
            else:
                yield from _import_nodes(statement)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a module of the package (``None`` for other packages)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_in(source: str, module: str, is_package: bool, modules: set[str], label: str) -> list[Import]:
    """The imports of package modules that the code ``source`` of ``module`` makes.

    ``from a.b import c`` is an import of ``a.b.c`` when that is a module, else of ``a.b``; relative imports are
    resolved against ``module``'s package (``module`` itself when ``is_package``). ``label`` names the file in the
    places reported.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.append(Import(module, target, f"{label}:{node.lineno}"))
    return found


@functools.cache
def read_imports(root: Path = SRC) -> tuple[frozenset[str], tuple[Import, ...]]:
    """Every module of the package under ``root`` and every import among them (read once per session)."""
    files = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in files}
    found: list[Import] = []
    for path in files:
        label = str(path.relative_to(root.parents[1]))
        found += imports_in(path.read_text(encoding="utf-8"), module_name(path, root), path.name == "__init__.py",
                            modules, label)
    return frozenset(modules), tuple(found)


def top_level(module: str) -> str:
    """The top-level name a module belongs to in :data:`LAYERS` (``"__init__"`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def unplaced(modules: Iterable[str], layers: Sequence[Sequence[str]]) -> list[str]:
    """The top-level names of ``modules`` that no layer holds."""
    placed = {name for layer in layers for name in layer}
    return sorted({top_level(module) for module in modules} - placed)


def upward(imports: Iterable[Import], layers: Sequence[Sequence[str]]) -> list[str]:
    """One line per import from a lower layer to a higher one."""
    level = {name: index for index, layer in enumerate(layers) for name in layer}
    lines = []
    for imp in imports:
        low, high = top_level(imp.source), top_level(imp.target)
        if low in level and high in level and level[high] > level[low]:
            lines.append(f"{imp} (layer {high!r} sits above {low!r})")
    return lines


def circles(imports: Iterable[Import]) -> list[list[Import]]:
    """One circle of imports for each strongly connected group of modules (Tarjan), each as the imports around it."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        edges.setdefault(imp.source, {}).setdefault(imp.target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, {})):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [_one_circle(group, edges) for group in groups]


def _one_circle(group: list[str], edges: Mapping[str, Mapping[str, Import]]) -> list[Import]:
    """The shortest way round the group from its first module back to it, as imports (breadth first)."""
    members, start = set(group), group[0]
    came_from: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt, imp in sorted(edges.get(node, {}).items()):
                if nxt not in members or nxt in came_from:
                    continue
                came_from[nxt] = imp
                if nxt == start:
                    path = []
                    while True:
                        step = came_from[nxt]
                        path.append(step)
                        nxt = step.source
                        if nxt == start:
                            return path[::-1]
                following.append(nxt)
        frontier = following
    raise AssertionError(f"no way round the strongly connected group {group}")  # pragma: no cover


def _report(title: str, lines: Sequence[str]) -> str:
    return title + "\n  " + "\n  ".join(lines)


# ---- the checker, on planted code ------------------------------------------------------------------------------

PLANTED = {
    "eegprivacy": "",
    "eegprivacy.errors": "",
    "eegprivacy.evaluation": "",
    "eegprivacy.evaluation.stats": "from eegprivacy.errors import InputDataError\n"
                                   "def f():\n    from ..studies.one import g\n",
    "eegprivacy.studies": "",
    "eegprivacy.studies.one": "from . import two\n"
                              "from typing import TYPE_CHECKING\n"
                              "if TYPE_CHECKING:\n    from eegprivacy.cli import main\n",
    "eegprivacy.studies.two": "import numpy\nimport eegprivacy.studies.one as one\n",
}


def _planted_imports() -> list[Import]:
    modules = set(PLANTED)
    found = []
    for module, source in PLANTED.items():
        is_package = any(other.startswith(module + ".") for other in modules)
        found += imports_in(source, module, is_package, modules, module.replace(".", "/") + ".py")
    return found


def test_the_checker_reads_relative_lazy_and_skips_type_checking_imports():
    found = {(imp.source, imp.target, imp.where) for imp in _planted_imports()}
    assert found == {
        ("eegprivacy.evaluation.stats", "eegprivacy.errors", "eegprivacy/evaluation/stats.py:1"),
        ("eegprivacy.evaluation.stats", "eegprivacy.studies.one", "eegprivacy/evaluation/stats.py:3"),  # lazy
        ("eegprivacy.studies.one", "eegprivacy.studies.two", "eegprivacy/studies/one.py:1"),  # relative
        ("eegprivacy.studies.two", "eegprivacy.studies.one", "eegprivacy/studies/two.py:2"),
    }  # the TYPE_CHECKING import of eegprivacy.cli is not there, nor numpy


def test_the_checker_finds_a_planted_circle_and_a_planted_upward_import():
    imports = _planted_imports()
    (circle,) = circles(imports)
    assert [(imp.source, imp.target) for imp in circle] == [
        ("eegprivacy.studies.one", "eegprivacy.studies.two"), ("eegprivacy.studies.two", "eegprivacy.studies.one")]
    assert upward(imports, LAYERS) == [
        "eegprivacy/evaluation/stats.py:3: eegprivacy.evaluation.stats imports eegprivacy.studies.one "
        "(layer 'studies' sits above 'evaluation')"]
    assert unplaced(["eegprivacy.plots.x", "eegprivacy.cli"], LAYERS) == ["plots"]


def test_the_checker_finds_a_circle_of_three_among_innocent_modules():
    def imp(source, target):
        return Import(source, target, f"{source}.py:1")

    imports = [imp("a", "b"), imp("b", "c"), imp("c", "a"), imp("c", "d"), imp("d", "e"), imp("x", "x.y")]
    (circle,) = circles(imports)
    assert [(i.source, i.target) for i in circle] == [("a", "b"), ("b", "c"), ("c", "a")]


# ---- the package ---------------------------------------------------------------------------------------------

def test_every_top_level_module_has_one_layer():
    modules, imports = read_imports()
    assert len(imports) > len(modules), "the checker read almost no imports: is SRC right?"
    missing = unplaced(modules, LAYERS)
    assert not missing, f"place these in LAYERS (and in ../shared/spec/architecture.md): {missing}"
    names = [name for layer in LAYERS for name in layer]
    assert len(names) == len(set(names)), "a name sits in two layers of LAYERS"
    stale = sorted(set(names) - {top_level(module) for module in modules})
    assert not stale, f"LAYERS names modules that no longer exist: {stale}"


def test_no_module_imports_from_a_higher_layer():
    _, imports = read_imports()
    lines = upward(imports, LAYERS)
    assert not lines, _report("imports from a lower layer to a higher one (see LAYERS):", lines)


def test_no_modules_import_each_other_in_a_circle():
    _, imports = read_imports()
    found = circles(imports)
    assert not found, _report("import circles (each listed as the imports around it):",
                              [" -> ".join(str(imp) for imp in circle) for circle in found])


# ---- module size (issue 50: one job a module) ------------------------------------------------------------------

MAX_LINES = 800  # no module is longer
EXPLAIN_OVER = 600  # a module longer than this says in its docstring why it is one idea
ONE_IDEA = "One idea over about"


def oversized(sources: Mapping[str, str]) -> list[str]:
    """What breaks the size rule, one line per module: over :data:`MAX_LINES`, or over :data:`EXPLAIN_OVER` without
    a docstring paragraph that starts with :data:`ONE_IDEA` (the house's phrase for "why this is one module")."""
    found = []
    for where, source in sorted(sources.items()):
        lines = source.count("\n") + (not source.endswith("\n"))
        if lines > MAX_LINES:
            found.append(f"{where}: {lines} lines (over {MAX_LINES}: split it along its jobs)")
        elif lines > EXPLAIN_OVER:
            doc = ast.get_docstring(ast.parse(source)) or ""
            if not any(paragraph.startswith(ONE_IDEA) for paragraph in doc.split("\n\n")):
                found.append(f"{where}: {lines} lines and no docstring paragraph starting {ONE_IDEA!r}")
    return found


def test_the_size_rule_catches_a_long_module_and_an_unexplained_one():
    body = "x = 1\n"
    explained = f'"""Short.\n\n{ONE_IDEA} 700 lines: one job."""\n' + body * 700
    assert oversized({"ok.py": body * 10, "explained.py": explained}) == []
    assert oversized({"long.py": explained + body * 200, "bare.py": '"""Short."""\n' + body * 700}) == [
        "bare.py: 701 lines and no docstring paragraph starting 'One idea over about'",
        "long.py: 903 lines (over 800: split it along its jobs)"]


def test_no_module_is_over_800_lines_and_those_over_600_say_why():
    sources = {str(path.relative_to(SRC.parent)): path.read_text(encoding="utf-8") for path in SRC.rglob("*.py")}
    assert len(sources) > 50, "the size rule read almost no modules: is SRC right?"
    found = oversized(sources)
    assert not found, _report("modules that break the size rule:", found)
