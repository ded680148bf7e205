"""A new user's session (issue 16), run as they would type it, in a fresh folder.

Describe a chip in a file (from ``phaze archs --show``), search the placement on that
fixed system, search a slice of the architecture space, plot the result, emit the
launch arguments of a plan for Megatron-LM and Megatron-DeepSpeed, and write a trace.
Every step is the CLI in a subprocess (``python -m phaze``, this checkout first on the
path) and must exit 0 with output a reader can act on. The assertions are on what a user
reads (names, plan words, column legends, launch flags, files that load), not on numbers
the cost models may refine. The whole session takes a few seconds: a small model
(bert-large, 512 tokens), 64 devices, every 2,000th architecture of the space.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL = "bert-large"
#: The plan the user launches: t = 2, p = 4 (24 layers: 6 per stage), d = 8, microbatch 2,
#: global batch 256 = 2 x 8 x 16 microbatches per pipeline; 64 GPUs.
PLAN = ["--tp", "2", "--pp", "4", "--dp", "8", "--microbatch", "2", "--global-batch", "256"]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The user's fresh, empty working folder."""
    folder = tmp_path_factory.mktemp("new-user")
    assert not any(folder.iterdir())
    return folder


def phaze(home, *args, timeout=300):
    """``phaze ARGS`` run in ``home``; asserts exit status 0 and no traceback; returns stdout."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PHAZE_PROGRESS", None)
    proc = subprocess.run([sys.executable, "-m", "phaze", *args], cwd=str(home), env=env,
                          capture_output=True, text=True, timeout=timeout)
    shown = f"phaze {' '.join(args)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, shown
    assert "Traceback" not in proc.stderr, shown
    assert proc.stdout.strip(), shown
    return proc.stdout


@pytest.fixture(scope="module")
def chip(home):
    """Step 1: the user prints a preset's chip file, changes a field, names it their own."""
    shown = phaze(home, "archs", "--show", "a100-80g")
    data = json.loads(shown)                 # the preset as a chip file: plain JSON
    data.update(name="mychip", hbm_gib=96.0,
                source=["an A100 SXM with 96 GiB of HBM (hypothetical)"])
    path = home / "mychip.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path, shown


@pytest.fixture(scope="module")
def space(home):
    """Step 3: a quick look at the architecture space (every 2,000th row), saved to res.json."""
    out = phaze(home, "search", "--model", MODEL, "--space-every", "2000", "--devices", "64",
                "--global-batch", "256", "--out", "res.json", "--no-progress")
    return home / "res.json", out


def test_1_describe_a_chip_in_a_file(home, chip):
    path, shown = chip
    preset = json.loads(shown)
    assert preset["name"] == "a100-80g"
    for field in ("num_tc", "tc_width", "tc_depth", "hbm_gib", "hbm_gb_per_s", "clock_ghz",
                  "link_gb_per_s", "net_gb_per_s", "node_size", "efficiency", "source"):
        assert field in preset, field
    # the user's file reads back as their chip, the changed field and the rest kept
    mine = json.loads(phaze(home, "archs", "--show", path.name))
    assert mine["name"] == "mychip" and mine["hbm_gib"] == 96.0
    assert {k: mine[k] for k in ("num_tc", "clock_ghz", "node_size")} == \
        {k: preset[k] for k in ("num_tc", "clock_ghz", "node_size")}


def test_2_search_the_fixed_system(home, chip):
    path, _ = chip
    out = phaze(home, "search", "--model", MODEL, "--arch", path.name, "--devices", "64",
                "--global-batch", "256", "--no-progress")
    assert "fixed system" in out and "mychip" in out and "96 GiB" in out
    assert "best plan" in out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    for column in ("t", "p", "d", "mb", "samples/s", "tokens/s"):
        assert column in header.split(), (column, header)
    plan_line = next(line for line in out.splitlines() if line.startswith(MODEL))
    assert len(plan_line.split()) >= 8   # the model's plan: t, p, d, mb, HBM, rc, throughput


def test_3_search_the_space(home, space):
    path, out = space
    assert f"{MODEL} on 64 devices" in out and "points evaluated" in out
    assert "best architecture" in out and "Pareto front" in out and "baselines" in out
    assert f"results: {path.name}" in out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    for column in ("samples/s", "MFU", "vs", "tpuv4"):
        assert column in header, (column, header)
    result = json.loads(path.read_text())     # the saved result is plain JSON
    assert result["best"]["model"] == MODEL and result["best"]["feasible"]
    assert result["best"]["samples_per_s"] > 0
    assert len(result["pareto"]["arch_id"]) >= 1
    assert result["metadata"]["points_evaluated"] > 0


def test_4_plot_the_result(home, space):
    pytest.importorskip("matplotlib", reason="phaze plot needs the plot extra (matplotlib)")
    path, _ = space
    out = phaze(home, "plot", path.name, "-o", "front.png")
    assert "front.png" in out
    image = home / "front.png"
    assert image.stat().st_size > 1000
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_5_emit_launch_arguments(home, chip):
    path, _ = chip
    megatron = phaze(home, "evaluate", "--model", MODEL, "--arch", path.name, *PLAN,
                     "--emit", "megatron")
    for flag in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 4",
                 "--micro-batch-size 2", "--global-batch-size 256", "--num-layers 24",
                 "--seq-length 512"):
        assert flag in megatron, flag
    assert "Megatron-LM" in megatron and "64 GPUs" in megatron

    deepspeed = phaze(home, "evaluate", "--model", MODEL, "--arch", path.name, *PLAN,
                      "--emit", "deepspeed")
    assert "--deepspeed" in deepspeed and "--tensor-model-parallel-size 2" in deepspeed
    # the ds_config JSON follows its comment line and loads as printed
    config = json.loads(deepspeed.split("# ds_config.json", 1)[1])
    assert config["train_batch_size"] == 256
    assert config["train_micro_batch_size_per_gpu"] == 2
    assert config["gradient_accumulation_steps"] == 256 // (2 * 8)

    # the same plan evaluated: the plan line and the per-stage table with its units
    report = phaze(home, "evaluate", "--model", MODEL, "--arch", path.name, *PLAN)
    assert "t=2 p=4 d=8" in report and "samples/s" in report and "total (GiB)" in report


def test_6_write_a_trace(home, chip):
    path, _ = chip
    out = phaze(home, "trace", "--model", MODEL, "--arch", path.name, *PLAN, "-o", "trace.json")
    assert "trace.json" in out and ("perfetto" in out.lower() or "chrome" in out.lower())
    trace = json.loads((home / "trace.json").read_text())
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    spans = [e for e in events if e.get("ph") == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    cats = {e.get("cat") for e in spans}
    assert {"forward", "backward"} <= cats, cats
    # every one of the 4 stages runs the forward of each of the 16 microbatches
    forwards = [e for e in spans if e.get("cat") == "forward"]
    per_stage = {}
    for e in forwards:
        per_stage.setdefault(e["args"]["stage"], set()).add(e["args"]["microbatch"])
    assert sorted(per_stage) == [1, 2, 3, 4]
    assert all(len(mbs) == 16 for mbs in per_stage.values())
