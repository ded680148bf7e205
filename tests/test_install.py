"""Install and first use (issue 17, item 8; issue "Cold start again"). Every compiled
kernel of phaze is a Cython extension built ahead of time by setup.py (the schedule,
placement and graph kernels, the operator loop ``phaze/cost/_kernels.pyx``, the step
kernels ``phaze/step/_kernels.pyx``, the collectives ``phaze/_ring.pxd`` and
``phaze/_collectives.pyx``), so numba is no dependency: a fresh process that evaluates a
plan and runs a search imports no numba (nor any other compiler), loads every kernel
from its extension module, and writes nothing into the package folder or a cache folder.
And ``pip install . && phaze search ...`` followed by ``pip install -e .`` leaves no
``site-packages/phaze/`` behind to hide the editable install."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

#: Modules that compile code at run time: none may be imported by using phaze.
_COMPILERS = ("numba", "llvmlite", "pyximport", "Cython")

# A stand-in for each of them, first on the path of the process and of any worker it
# starts: importing one records the process and fails.
_SHADOW = textwrap.dedent("""
    import os
    with open(os.environ["PHAZE_TEST_COMPILER_IMPORTS"], "a") as f:
        f.write(f"{__name__} in process {os.getpid()}\\n")
    raise ImportError(f"{__name__} is no dependency of phaze")
""")

# ``import phaze``, then the README's kind of first use: evaluate one plan of GPT-3 175B,
# run a small search on a pool of two workers; report what got loaded.
_FIRST_USE = textwrap.dedent("""
    import importlib.machinery
    import json
    import sys
    from pathlib import Path

    import phaze
    cheap = sorted(m for m in ("numpy", "highspy") if m in sys.modules)
    from phaze import cli
    evaluate = cli.main(["evaluate", "--model", "gpt3-175b", "--arch", "a100-80g", "--tp", "8",
                         "--pp", "8", "--dp", "16", "--microbatch", "1"])
    search = cli.main(["search", "--model", "bert-large", "--devices", "8", "--space-every",
                       "200", "--no-baselines", "--workers", "2"])
    ext = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    extensions, python_twins = [], []
    for name, mod in sorted(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if not path or not (name == "phaze" or name.startswith("phaze.")):
            continue
        if path.endswith(ext):
            extensions.append(name)
        elif Path(path).with_suffix(".pyx").exists():
            python_twins.append(name)   # a kernel loaded from Python source, not compiled
    print(json.dumps(dict(cheap=cheap, evaluate=evaluate, search=search, extensions=extensions,
                          python_twins=python_twins,
                          compilers=sorted(m for m in sys.modules if m.split(".")[0] in
                                           %r))))
""") % (_COMPILERS,)


def _files(folder):
    return {p for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_first_use_imports_and_compiles_nothing(tmp_path):
    """``import phaze`` stays cheap; an evaluate and a search in a fresh process import no
    numba (a stand-in on the path fails any import, in the process or its workers), run
    every kernel from its extension module (the cost, step, collective and schedule
    kernels among them), and create no file in the package folder or the home and cache
    folders."""
    shadow = tmp_path / "shadow"
    for name in _COMPILERS:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(_SHADOW)
    imports = tmp_path / "compiler-imports.txt"
    home, cache, cwd = tmp_path / "home", tmp_path / "cache", tmp_path / "cwd"
    for folder in (home, cache, cwd):
        folder.mkdir()
    env = dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(cache), PYTHONDONTWRITEBYTECODE="1",
               PHAZE_TEST_COMPILER_IMPORTS=str(imports),
               PYTHONPATH=os.pathsep.join(filter(None, [str(shadow), str(REPO),
                                                        os.environ.get("PYTHONPATH")])))
    package = _files(REPO / "phaze")
    proc = subprocess.run([sys.executable, "-c", _FIRST_USE], env=env, cwd=cwd, text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not imports.exists(), imports.read_text()
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cheap"] == [], "import phaze imported " + ", ".join(out["cheap"])
    assert out["evaluate"] == 0 and out["search"] == 0, proc.stderr[-4000:]
    assert out["compilers"] == []
    assert out["python_twins"] == []
    assert {"phaze._collectives", "phaze.cost._kernels", "phaze.step._kernels",
            "phaze.schedule._solve", "phaze.schedule._bounds"} <= set(out["extensions"]), out
    assert _files(REPO / "phaze") == package, "using phaze created files in the package folder"
    assert not _files(home) and not _files(cache) and not _files(cwd)


@pytest.mark.skipif(os.environ.get("PHAZE_SLOW_TESTS") != "1",
                    reason="builds phaze twice in a fresh venv (minutes, needs PyPI); "
                           "set PHAZE_SLOW_TESTS=1")
def test_readme_install_sequence_in_a_fresh_venv(tmp_path):
    """``pip install . && phaze search ...``, then ``pip install -e .`` (``make test``),
    then ``phaze models`` from another folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.so", "__pycache__", "*.egg-info", ".pytest_cache"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def run(*args, cwd=src):
        proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, text=True,
                              capture_output=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        return proc

    run(py, "-m", "pip", "install", "-q", ".")
    run(venv / "bin" / "phaze", "search", "--model", "bert-large", "--devices", "8",
        "--space-every", "5000", "--serial", "--no-baselines", cwd=elsewhere)
    run(py, "-m", "pip", "install", "-q", "-e", ".")
    site = Path(run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
                .stdout.strip())
    assert not (site / "phaze").exists(), sorted(str(p) for p in (site / "phaze").rglob("*"))
    out = run(venv / "bin" / "phaze", "models", cwd=elsewhere)
    assert "gpt2-xl" in out.stdout
