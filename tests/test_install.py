"""Install sequences (issue 17, item 8): numba's cache of compiled kernels never lands in
the package folder, so ``pip install . && phaze search ...`` followed by
``pip install -e .`` leaves no ``site-packages/phaze/`` behind to hide the editable
install; without a writable home the cache falls back to the temporary folder with
one sentence. The operator cost kernels are compiled ahead of time (Cython,
``phaze/cost/_kernels.pyx``): using them imports and compiles nothing with numba."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Without the JIT (`make test-nojit`) numba compiles and caches nothing.
needs_jit = pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"),
                               reason="NUMBA_DISABLE_JIT: numba caches nothing")

# Compile (and cache) a small numba kernel after ``import phaze`` (phaze chooses numba's
# cache folder before numba is imported, for every kernel compiled in the process), then
# report where numba put the cache. The probe's module lies in the test's own folder.
_PROBE = textwrap.dedent("""
    import math

    from numba import njit


    @njit(cache=True)
    def cdiv(a, b):
        return float(math.ceil(a / b))
""")
_COMPILE = textwrap.dedent("""
    import phaze, numba
    import phaze_numba_probe
    assert phaze_numba_probe.cdiv(7.0, 2.0) == 4.0
    print(numba.config.CACHE_DIR)
""")

# Price a layer with both cost models, then report whether numba was imported at all.
_COST = textwrap.dedent("""
    import importlib.machinery
    import sys
    import phaze
    from phaze.arch import presets
    from phaze.cost import _kernels, op_latencies
    from phaze.graph import build_layers
    assert _kernels._cdiv(7.0, 2.0) == 4.0
    assert _kernels.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), \
        _kernels.__file__
    g = build_layers("gpt3-175b", 1, 8).layers[1].forward
    row = presets.get("a100-80g")
    op_latencies(g, row)
    op_latencies(g, row, model="calibrated", efficiency="a100-80g")
    print("numba" in sys.modules)
""")


def _run(env_changes, tmp_path, code=_COMPILE):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(env_changes)
    (tmp_path / "phaze_numba_probe.py").write_text(_PROBE)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(tmp_path),
                                                      os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, text=True,
                          capture_output=True, timeout=600)


def _index_files(folder):
    return sorted(p.name for p in Path(folder).rglob("*.nbi"))


def test_cost_kernels_are_compiled_ahead_of_time_and_compile_nothing(tmp_path):
    """The operator loop is an extension module built by setup.py: pricing with both cost
    models imports no numba and writes no numba cache anywhere."""
    xdg = tmp_path / "xdg"
    package = REPO / "phaze"
    before = {p: p.stat().st_mtime for p in package.rglob("*.nbi")}
    proc = _run({"XDG_CACHE_HOME": str(xdg)}, tmp_path, code=_COST)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", "using phaze.cost imported numba"
    assert not xdg.exists() or not _index_files(xdg), _index_files(xdg)
    assert {p: p.stat().st_mtime for p in package.rglob("*.nbi")} == before
    assert proc.stderr == ""


@needs_jit
def test_numba_cache_goes_to_the_user_cache_folder_not_the_package(tmp_path):
    package = REPO / "phaze"
    before = {p: p.stat().st_mtime for p in package.rglob("*.nbi")}
    proc = _run({"XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = proc.stdout.strip()
    assert folder.startswith(str(tmp_path / "xdg" / "phaze" / "numba-"))
    assert _index_files(folder), "no kernel was cached in the user cache folder"
    after = {p: p.stat().st_mtime for p in package.rglob("*.nbi")}
    assert after == before, "numba wrote cache files into the package folder"
    assert proc.stderr == ""


@needs_jit
def test_numba_cache_without_a_writable_home_falls_back_with_one_sentence(tmp_path):
    home = tmp_path / "home-is-a-file"
    home.write_text("")  # nothing can be created below it, even by root
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"HOME": str(home), "TMPDIR": str(temp)}
    proc = _run(dict(env, XDG_CACHE_HOME=""), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(temp))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "not writable" in lines[0], proc.stderr
    assert _index_files(proc.stdout.strip())


@needs_jit
def test_user_choice_of_numba_cache_wins(tmp_path):
    mine = tmp_path / "mine"
    proc = _run({"NUMBA_CACHE_DIR": str(mine), "XDG_CACHE_HOME": str(tmp_path / "xdg")}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(mine)
    assert not (tmp_path / "xdg").exists()


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
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH",
                                                             "VIRTUAL_ENV")}
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
