"""The package's layout (issue 23 item 6), checked on the source with ``ast``.

* graph, step, cli, cost, placement, schedule and search are packages whose faces only
  re-export; no top-level ``_graph_*``, ``_step_*``, ``_cli_*`` or kernel module remains;
* compiled kernels (``.pyx``) live beside the Python that calls them;
* no module imports another package's underscore names (a package's modules share
  theirs freely: ``phaze.step._plans`` may use ``phaze.step._kernels``);
* the modules of phaze import each other without a cycle, lazy imports included;
* the public modules are attributes of ``phaze`` after ``import phaze``.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PHAZE = Path(__file__).resolve().parent.parent / "phaze"
PACKAGES = ("graph", "step", "cli", "cost", "placement", "schedule", "search", "arch", "plan")
PUBLIC = ("models", "graph", "arch", "cost", "schedule", "placement", "step", "search",
          "validate", "trace", "launch", "precision", "plan", "collectives", "cli")


def _module_name(path):
    rel = path.relative_to(PHAZE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    return {_module_name(p): p for p in sorted(PHAZE.rglob("*.py"))}


def _compiled():
    """Names of the compiled (Cython) modules: imported like modules, they import nothing
    of phaze's Python."""
    return {_module_name(p) for p in sorted(PHAZE.rglob("*.pyx"))}


def _imports(name, path, modules):
    """(line, absolute module imported, imported name or None) of every import, lazy too."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("phaze"):
                    yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base) + ("." + node.module if node.module else "")
            else:
                mod = node.module or ""
            if not mod.startswith("phaze"):
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                known = sub in modules or sub in _compiled()
                yield (node.lineno, sub, None) if known else (node.lineno, mod, a.name)


def _owner(module):
    """The top-level part of phaze a module belongs to (phaze.step._kernels -> phaze.step)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_top_level_private_modules_of_a_package():
    tops = sorted(p.name for p in PHAZE.glob("_*.py") if p.name not in ("__init__.py", "__main__.py"))
    bad = [n for n in tops if n.startswith(("_graph", "_step", "_cli", "_cost", "_opgraph"))]
    assert not bad, f"these belong in their package: {bad}"
    assert not (PHAZE / "_native").exists()
    for pkg in PACKAGES:
        assert (PHAZE / pkg / "__init__.py").exists(), pkg
        assert not (PHAZE / f"{pkg}.py").exists(), pkg


@pytest.mark.parametrize("pkg", PACKAGES)
def test_faces_only_re_export(pkg):
    tree = ast.parse((PHAZE / pkg / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "__all__":
            continue
        if pkg == "arch":      # the template's face also defines ArchSpace and area_mm2
            continue
        pytest.fail(f"phaze/{pkg}/__init__.py line {node.lineno}: a face only re-exports")


def test_compiled_kernels_live_beside_their_consumer():
    for pyx in sorted(PHAZE.rglob("*.pyx")):
        folder = pyx.parent
        users = [p for p in folder.glob("*.py")
                 if pyx.stem in p.read_text() and p.stem != pyx.stem]
        users += [p for p in folder.glob("*.pyx") if p != pyx and pyx.stem in p.read_text()]
        assert users, f"{pyx.relative_to(PHAZE)}: nothing beside it uses it"


def test_no_module_reaches_into_another_packages_private_names():
    modules = _modules()
    problems = []
    for name, path in modules.items():
        for line, mod, imported in _imports(name, path, modules):
            target_parts = mod.split(".")
            private_module = any(p.startswith("_") and not p.startswith("__")
                                 for p in target_parts[1:])
            private_name = imported is not None and imported.startswith("_") \
                and not imported.startswith("__")
            if not (private_module or private_name):
                continue
            if _owner(mod) == _owner(name):
                continue       # inside one package (or phaze's own top-level helpers below)
            if len(target_parts) == 2 and target_parts[1] in (
                    "_config", "_validate", "_threads", "_cache", "_hf_config", "_params", "_zoo"):
                continue       # the package-wide helpers, private to phaze as a whole
            if mod == "phaze._collectives" and name == "phaze.collectives":
                continue       # the compiled core of phaze.collectives (its Python face)
            problems.append(f"{name} line {line}: {mod}" + (f".{imported}" if imported else ""))
    assert not problems, "private names of another package: " + "; ".join(problems)


def _cycles():
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        deps = set()
        for _, mod, _ in _imports(name, path, modules):
            while mod not in modules and "." in mod:
                mod = mod.rsplit(".", 1)[0]
            if mod in modules and mod != name:
                deps.add(mod)
        graph[name] = deps
    # a package face importing its own modules is how a face works, not a cycle
    for name in graph:
        if (PHAZE.parent / name.replace(".", "/") / "__init__.py").exists():
            graph[name] = {d for d in graph[name] if not d.startswith(name + ".")}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycle_in_phaze():
    assert _cycles() == []


def test_public_modules_after_import_phaze():
    code = ("import phaze\n"
            f"for name in {PUBLIC!r}:\n"
            "    assert getattr(phaze, name).__name__ == 'phaze.' + name, name\n"
            "assert callable(phaze.step.training_step) and callable(phaze.validate.run)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                   env={**__import__('os').environ,
                        "PYTHONPATH": str(PHAZE.parent)})


#: The strategy knobs issue 23 counted: each is declared once (``phaze.plan``) and named
#: only where a model prices it or a kernel loops over it.
_KNOB_NAMES = ("zero_stage", "virtual_stages", "overlap_grad_reduce", "flash_attention",
               "sequence_parallel", "context_parallel", "expert_parallel")


@pytest.mark.parametrize("name", _KNOB_NAMES)
def test_a_knob_is_named_in_at_most_six_modules(name):
    files = sorted(str(p.relative_to(PHAZE)) for p in list(PHAZE.rglob("*.py"))
                   + list(PHAZE.rglob("*.pyx")) if name in p.read_text())
    assert len(files) <= 6, f"{name} appears in {len(files)} modules: {files}"
