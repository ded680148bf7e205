"""Build the compiled extensions: every ``.pyx`` under ``phaze/``, each beside the Python
that calls it (the topological order in ``phaze/graph/_dag.pyx``, the collectives'
Python face in ``phaze/_collectives.pyx`` over the inline C of ``phaze/_ring.pxd``, the
operator cost kernels in ``phaze/cost/_kernels.pyx``, the schedule kernels in
``phaze/schedule``, the placement DP in ``phaze/placement/_dp.pyx``, the training-step
kernels in ``phaze/step/_kernels.pyx``); metadata lives in pyproject.toml. Every kernel
phaze runs is built here: nothing is compiled at a user's first call.

OpenMP is used when the compiler supports it (gcc on Linux); elsewhere the
kernels build without it and ``prange`` runs serially.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from Cython.Build import cythonize
from setuptools import Extension, setup


def _openmp_flags():
    """Return (compile_args, link_args) for OpenMP, or empty lists when unsupported."""
    if os.environ.get("PHAZE_NO_OPENMP"):
        return [], []
    if sys.platform == "win32":
        return ["/openmp"], []
    cc = os.environ.get("CC", "cc")
    tmp = tempfile.mkdtemp()
    try:
        src = os.path.join(tmp, "t.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n")
        ok = subprocess.call([cc, "-fopenmp", src, "-o", os.path.join(tmp, "t")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
    except OSError:
        ok = False
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return (["-fopenmp"], ["-fopenmp"]) if ok else ([], [])


_omp_compile, _omp_link = _openmp_flags()
# -ffp-contract=off: no fused multiply-add, so every floating-point expression rounds as
# written (the schedule kernels' answers are checked bit for bit against references).
_opt = ["/O2"] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]


def _extensions():
    """One extension per ``.pyx`` under ``phaze/`` (each may have a ``.pxd`` beside it that
    other modules cimport), named by its path: ``phaze/schedule/_bnb.pyx`` -> ``phaze.schedule._bnb``."""
    out = []
    for root, _dirs, files in sorted(os.walk("phaze")):
        for name in sorted(files):
            if name.endswith(".pyx"):
                path = os.path.join(root, name)
                module = os.path.splitext(path)[0].replace(os.sep, ".")
                out.append(Extension(
                    module, [path],
                    extra_compile_args=_opt + _omp_compile,
                    extra_link_args=_omp_link,
                    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                ))
    return out


setup(
    ext_modules=cythonize(
        _extensions(),
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
)
