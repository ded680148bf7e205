"""The package's layout rules (issue 12), checked on the source with ``ast``.

* phaze.search is a package whose face only re-exports, and no module inside it
  imports from that face;
* no module of phaze.search reaches into another module's underscore names
  (names used across modules are public within their private module);
* the modules of phaze.search import each other without a cycle;
* no module of phaze is longer than about 900 lines.
"""
import ast
from pathlib import Path

import pytest

PHAZE = Path(__file__).resolve().parent.parent / "phaze"
SEARCH = PHAZE / "search"
MAX_LINES = 900
#: Modules still being split (issue 12: phaze/schedule by algorithm); once the split lands
#: the file is gone and its entry here has no effect.


def _modules(folder):
    return sorted(p for p in folder.glob("*.py"))


def _tree(path):
    return ast.parse(path.read_text(), filename=str(path))


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sibling_modules():
    return {p.stem for p in _modules(SEARCH)}


def _is_module(level, name):
    """Whether ``from {'.' * level} import name`` (inside phaze/search) names a module."""
    folder = SEARCH if level == 1 else PHAZE
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def test_no_top_level_search_modules_remain():
    assert not (PHAZE / "search.py").exists()
    assert not list(PHAZE.glob("_search_*.py"))
    assert (SEARCH / "__init__.py").exists()


def test_search_face_only_re_exports():
    tree = _tree(SEARCH / "__init__.py")
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "__all__"):
            continue
        pytest.fail(f"phaze/search/__init__.py line {node.lineno}: the face only re-exports")
    from phaze import search

    for name in ("search", "evaluate_point", "SearchResult", "load_result"):
        assert name in search.__all__ and callable(getattr(search, name))


@pytest.mark.parametrize("path", _modules(SEARCH), ids=lambda p: p.name)
def test_search_modules_use_only_public_names_of_each_other(path):
    siblings = _sibling_modules()
    tree = _tree(path)
    module_aliases = set()
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            absolute_face = node.level == 0 and node.module == "phaze.search"
            parent_face = node.level == 2 and node.module is None and any(
                a.name == "search" for a in node.names)
            if path.name != "__init__.py" and (absolute_face or parent_face or (
                    node.level == 1 and node.module is None
                    and any(a.name not in siblings for a in node.names))):
                problems.append(f"line {node.lineno}: imports from the package's face")
            for alias in node.names:
                if node.module is None and node.level in (1, 2) and _is_module(node.level, alias.name):
                    module_aliases.add(alias.asname or alias.name)
                elif _is_private(alias.name):
                    problems.append(f"line {node.lineno}: imports private name {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("phaze.search"):
                    problems.append(f"line {node.lineno}: imports {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in module_aliases and _is_private(node.attr)):
            problems.append(f"line {node.lineno}: uses {node.value.id}.{node.attr}")
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_search_modules_import_without_a_cycle():
    siblings = _sibling_modules() - {"__init__"}
    graph = {}
    for path in _modules(SEARCH):
        if path.stem == "__init__":
            continue
        deps = set()
        for node in _tree(path).body:  # module level: what runs at import
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:
                    deps |= {a.name for a in node.names if a.name in siblings}
                elif node.module in siblings:
                    deps.add(node.module)
        graph[path.stem] = deps
    state = {}

    def visit(name, trail):
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            pytest.fail("import cycle: " + " -> ".join(trail + [name]))
        state[name] = "open"
        for dep in sorted(graph[name]):
            visit(dep, trail + [name])
        state[name] = "done"

    for name in sorted(graph):
        visit(name, [])


@pytest.mark.parametrize("path", sorted(PHAZE.rglob("*.py")), ids=lambda p: str(p.relative_to(PHAZE)))
def test_no_module_over_900_lines(path):
    rel = str(path.relative_to(PHAZE))
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"phaze/{rel} has {n} lines (at most {MAX_LINES}: split it into a package)"


def test_settings_pickle_for_the_workers():
    """What travels to a process pool or Dask worker survives pickling unchanged."""
    import pickle

    import numpy as np

    from phaze import arch, models
    from phaze.search._settings import ChunkTask, SearchSettings

    cfg = SearchSettings(models=(models.get("gpt2-xl"),), widths=((1, 2),), devices=64,
                         global_batch=512, microbatch=(1, 2), hbm_gib=(None, 32.0),
                         recompute=(False, True), optimizer="adam", gap=0.01, prune=True)
    task = ChunkTask(settings=cfg, chunk_id=3, archs=arch.ArchSpace.default().configs[:4],
                     arch_ids=np.arange(4), floors=(1.5,), want_block=True)
    back = pickle.loads(pickle.dumps(task))
    assert back.settings == cfg and back.chunk_id == 3 and back.floors == (1.5,)
    assert np.array_equal(back.archs, task.archs) and back.want_block
    assert cfg.points_per_arch == 1 * 2 * 2 * 2
    one = cfg.for_one_model(0)
    assert one.models == cfg.models and not one.prune
