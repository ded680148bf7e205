"""No import cycle in phaze (issue 23), read from the source.

Every module of ``phaze/`` is a node: the ``.py`` files and the Cython ``.pyx`` sources of
the compiled kernels (a compiled module is a module of its own, not its package's face).
An edge is every import a module makes, at module level or inside a function (a lazy
import still ties the two modules together), ``cimport`` included (a cimported extension
module is imported when the cimporting one initialises). A package importing its own
children (``phaze/x/__init__.py`` re-exporting ``phaze/x/_y.py``) is an edge like any
other; the implicit import of a parent package when a child is imported is not.
A cycle is a set of modules each reachable from every other.
"""
import ast
import re
from pathlib import Path

import pytest

PHAZE = Path(__file__).resolve().parent.parent / "phaze"

_PYX_IMPORT = re.compile(r"^(from\s+\S+\s+c?import\s|c?import\s+\S)")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PHAZE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    """Module name -> source path, for every .py and .pyx file of phaze."""
    found = {}
    for path in sorted(PHAZE.rglob("*")):
        if path.suffix in (".py", ".pyx") and "__pycache__" not in path.parts:
            found[_module_name(path)] = path
    return found


def _pyx_import_source(text: str) -> str:
    """The import statements of a Cython source as Python (``cimport`` read as
    ``import``, parenthesised lists joined onto one line), each line that parses as one."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if _PYX_IMPORT.match(line):
            stmt = line
            while stmt.count("(") > stmt.count(")") and i + 1 < len(lines):
                i += 1
                stmt += " " + lines[i].strip()
            stmt = re.sub(r"\bcimport\b", "import", stmt.split("#", 1)[0])
            try:  # a docstring line that merely starts like an import is no statement
                ast.parse(stmt)
            except SyntaxError:
                pass
            else:
                out.append(stmt)
        i += 1
    return "\n".join(out)


def _tree(path: Path):
    text = path.read_text()
    if path.suffix == ".pyx":
        text = _pyx_import_source(text)
    return ast.parse(text, filename=str(path))


def _imports(name: str, path: Path, modules: dict) -> set:
    """The phaze modules ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted):
        """The module ``dotted`` lives in (itself, or the longest module prefix)."""
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    deps = set()
    for node in ast.walk(_tree(path)):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                full = ".".join(base + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            targets = [f"{full}.{a.name}" for a in node.names]  # a submodule, else a name in full
        for target in targets:
            if target.split(".")[0] != "phaze":
                continue
            mod = owner(target)
            if mod is not None and mod != name:
                deps.add(mod)
    return deps


def _graph() -> dict:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _reachable(graph: dict, start: str) -> set:
    seen, stack = set(), [start]
    while stack:
        for dep in graph[stack.pop()]:
            if dep not in seen:
                seen.add(dep)
                stack.append(dep)
    return seen


def _cycles(graph: dict) -> list:
    """Groups of modules that reach each other (strongly connected, two or more), by
    plain reachability from every module."""
    reach = {m: _reachable(graph, m) for m in graph}
    groups, placed = [], set()
    for m in sorted(graph):
        if m in placed or m not in reach[m]:
            continue
        group = frozenset({m} | {o for o in reach[m] if m in reach[o]})
        placed |= group
        groups.append(group)
    return groups


def test_the_reader_sees_the_imports_it_must():
    graph = _graph()
    assert "phaze._hf_config" in graph["phaze.models"]
    assert "phaze.schedule._solve" in graph["phaze.schedule._driver"]      # a compiled module
    assert "phaze.schedule._milp" in graph["phaze.schedule._driver"]       # from . import _milp
    assert "phaze.schedule._cdefs" in graph["phaze.schedule._bnb"]         # cimport
    assert "phaze.schedule._status" in graph["phaze.schedule._cdefs"]      # import in a .pyx
    assert "phaze._config" in graph["phaze.schedule._driver"]              # from .. import _config
    assert "phaze.schedule._driver" in graph["phaze.schedule"]             # the face's re-export


def test_cycle_finder_on_a_small_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"},
             "f": {"a"}}
    assert sorted(map(sorted, _cycles(graph))) == [["a", "b", "c"], ["e", "e2"]]


def test_no_import_cycle_in_phaze():
    cycles = [sorted(c) for c in _cycles(_graph())]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["models", "schedule"])
def test_faces_are_imported_by_none_of_their_modules(package):
    graph = _graph()
    face = f"phaze.{package}"
    inside = [m for m in graph if m.startswith(face + ".")]
    assert [m for m in inside if face in graph[m]] == []
    assert "phaze.models" not in graph["phaze._hf_config"]


def test_public_names_survive():
    from phaze import models, schedule

    assert models.from_hf_config({"model_type": "gpt2"}).n_params == 124_439_808
    assert models.get("gpt2-xl") is models.resolve("gpt2-xl")
    assert "gpt3-175b" in models.names()
    for name in ("Schedule", "schedule_layer", "schedule_many", "check_schedule", "lower_bound",
                 "list_schedule", "milp_schedule", "layer_lower_bounds", "STATUS_NAMES",
                 "STATUS_CODES", "clear_memo"):
        assert name in schedule.__all__ and hasattr(schedule, name)
