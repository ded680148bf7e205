"""phaze.search from a plain script: safe without an ``if __name__ == "__main__":`` guard
(issue 16). Spawned pool workers re-import the main script, so an unguarded call runs in
this process with one sentence on stderr; a guarded one keeps the pool."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from phaze.search import _executors

ROOT = Path(__file__).resolve().parents[1]

_SEARCH = """\
from phaze import arch, models, search
TINY = models.ModelSpec(name="tiny", n_layers=2, hidden=64, heads=4, kv_heads=4, ffn_hidden=256,
                        vocab=512, seq_len=64)
rows = arch.ArchSpace.default().configs[[100, 9000, 20000]]
"""
_CALL = ("r = search.search(TINY, study=True, space=rows, devices=4, global_batch=8, microbatch=(1,), "
         "hbm_gib=(1.0,), recompute=(False,), tensor_parallel=(1,), chunk_archs=1, workers=2, "
         "baselines=False, progress=False)\n"
         "print('BEST', r.best['arch_id'], r.metadata['inputs']['executor'])\n")


def _run_script(tmp_path, text):
    script = tmp_path / "my_search.py"
    script.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_unguarded_script_runs_in_process_with_one_sentence(tmp_path):
    proc = _run_script(tmp_path, _SEARCH + _CALL)
    assert proc.returncode == 0, proc.stderr
    assert "BEST" in proc.stdout and proc.stdout.split()[-1] == "serial"
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "my_search.py" in err and '__name__ == "__main__"' in err and "guard" in err


def test_guarded_script_keeps_the_pool(tmp_path):
    body = "".join("    " + line + "\n" for line in _CALL.splitlines())
    proc = _run_script(tmp_path, _SEARCH + "\nif __name__ == '__main__':\n" + body)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1] == "process" and "guard" not in proc.stderr


def test_guard_detection():
    guarded = _SEARCH + "\nif __name__ == '__main__':\n    x = 1\n    y = 2\n"
    n = guarded.count("\n")
    assert _executors.line_is_guarded(guarded, n)       # inside the block
    assert not _executors.line_is_guarded(guarded, 2)   # module level
    swapped = "import x\nif '__main__' == __name__:\n    main()\n"
    assert _executors.line_is_guarded(swapped, 3)
    other = "import x\nif __name__ == 'foo':\n    main()\n"
    assert not _executors.line_is_guarded(other, 3)
    # Not the top level: a nested guard-lookalike inside a function does not count.
    nested = "def f():\n    if __name__ == '__main__':\n        g()\nf()\n"
    assert not _executors.line_is_guarded(nested, 4)


def test_interactive_and_test_runs_are_not_flagged():
    # Under pytest the main module is pytest's own, guarded entry point.
    assert _executors.unguarded_main_script() is None
