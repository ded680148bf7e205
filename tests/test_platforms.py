"""Which trainers run on which chip: the chip file's ``platform`` (phaze.arch.PLATFORMS) and
the platforms each trainer runs on (phaze.plan.TRAINERS). ``phaze evaluate``'s "launchable
by" line, ``--emit`` and ``phaze search --emit`` on a fixed chip read
``phaze.plan.platform_refusal``; the template's chips and the study's tpuv4 state no platform
and keep every trainer that launches the plan."""
import json

import pytest

from phaze import arch, plan, search
from phaze.arch import presets, resolve_chip
from phaze.cli import main

#: The platform each shipped preset states (tpuv4, the study's architecture point: none).
PLATFORM = {"a100-80g": "cuda", "h100-sxm": "cuda", "h100-96g": "cuda", "h200": "cuda",
            "b200": "cuda", "b300": "cuda", "gb200": "cuda", "gb300": "cuda",
            "mi300x": "rocm", "mi325x": "rocm", "mi355x": "rocm", "gaudi3": "gaudi",
            "tpu-v5e": "tpu", "tpu-v5p": "tpu", "tpu-v6e": "tpu", "tpu7x": "tpu",
            "trainium2": "neuron", "tpuv4": None}
#: A plan (t 8, p 4, d 4, b 1, selective recomputation, these knobs) Megatron-LM and DeepSpeed
#: launch (ZeRO 1, no interleaving) and torchtitan does not (FSDP2 or DDP).
_KNOBS = dict(global_batch=256, flash_attention=True, sequence_parallel=True, zero_stage=1)


def _launchers(chip):
    r = search.evaluate_point("llama3-70b", chip, 8, 4, 4, 1, "full", **_KNOBS)
    assert r["platform"] == PLATFORM[chip]
    return r["trainers"], r["not_launchable"]


def test_every_preset_states_its_platform():
    assert sorted(PLATFORM) == sorted(presets.names())
    for name, platform in PLATFORM.items():
        assert resolve_chip(name).platform == platform, name
    assert all(set(t.platforms) <= set(arch.PLATFORMS) for t in plan.TRAINERS)
    assert {t.id: t.platforms for t in plan.TRAINERS} == {
        "megatron-lm": ("cuda", "rocm", "gaudi"), "deepspeed": ("cuda", "rocm", "gaudi"),
        "torchtitan": ("cuda", "rocm")}


def test_platform_refusal_sentence():
    assert plan.platform_refusal("megatron", "tpu7x", "tpu") == (
        "Megatron-LM does not run on tpu7x, a tpu chip (Megatron-LM runs on cuda, rocm, gaudi)")
    assert plan.platform_refusal("torchtitan", "gaudi3", "gaudi") == (
        "torchtitan does not run on gaudi3, a gaudi chip (torchtitan runs on cuda, rocm)")
    assert plan.platform_refusal("deepspeed", "mi300x", "rocm") is None
    assert plan.platform_refusal("megatron-lm", "row", None) is None


@pytest.mark.parametrize("chip, want", [
    ("h100-sxm", ["megatron-lm", "deepspeed"]),
    ("mi300x", ["megatron-lm", "deepspeed"]),
    ("gaudi3", ["megatron-lm", "deepspeed"]),
    ("tpu-v5p", []),
    ("trainium2", []),
    ("tpuv4", ["megatron-lm", "deepspeed"]),     # the study's point: the plan's trainers
])
def test_launchable_by_follows_the_platform(chip, want):
    trainers, refused = _launchers(chip)
    assert trainers == want
    platform = PLATFORM[chip]
    for t in plan.TRAINERS:
        if t.id in want:
            continue
        why = plan.platform_refusal(t.id, chip, platform)
        if why is not None:      # the platform is the reason given, before the plan's rules
            assert refused[t.id] == why
        else:                    # torchtitan on a GPU: its own rule (FSDP2 or DDP, not ZeRO 1)
            assert t.id == "torchtitan" and refused[t.id].startswith("torchtitan shards with "
                                                                     "FSDP2")


def test_evaluate_prints_and_emit_refuses_on_a_tpu(capsys):
    args = ["evaluate", "--model", "llama3-70b", "--arch", "tpu-v5p", "--tp", "8", "--pp", "4",
            "--dp", "4", "--microbatch", "1", "--global-batch", "256", "--flash-attention",
            "--sequence-parallel", "--zero-stage", "1", "--recompute", "selective"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("  launchable by: no trainer (Megatron-LM does not run on tpu-v5p, a tpu chip "
            "(Megatron-LM runs on cuda, rocm, gaudi))") in out
    assert main(args + ["--emit", "megatron"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("--emit megatron: Megatron-LM does not run on tpu-v5p, a tpu "
                                "chip (Megatron-LM runs on cuda, rocm, gaudi)")
    # the same plan on the study's tpuv4 (no platform stated) is emitted as before
    tpuv4 = [a if a != "tpu-v5p" else "tpuv4" for a in args]
    assert main(tpuv4 + ["--emit", "megatron", "--hbm-gib", "80"]) == 0
    assert "--tensor-model-parallel-size 8" in capsys.readouterr().out


def test_search_on_a_fixed_chip_keeps_the_trainers_that_run_there():
    with pytest.raises(ValueError, match=r"^trainers: Megatron-LM does not run on tpu-v5p, a "
                                         r"tpu chip \(Megatron-LM runs on cuda, rocm, gaudi\)$"):
        search.search("llama3-8b", devices=64, arch="tpu-v5p", trainers=("megatron",))
    r = search.search("llama3-8b", devices=64, arch="gaudi3",
                      trainers=("megatron", "torchtitan"))
    assert r.metadata["inputs"]["trainers"] == ["megatron-lm"]
    with pytest.raises(ValueError, match="torchtitan does not run on gaudi3"):
        search.search("llama3-8b", devices=64, arch="gaudi3", trainers=("torchtitan",))


def test_chip_file_platform(tmp_path):
    with open(presets.path("h100-sxm"), encoding="utf-8") as fh:
        data = json.load(fh)
    data["name"] = "my-tpu-like"
    data["platform"] = "tpu"
    path = tmp_path / "chip.json"
    path.write_text(json.dumps(data))
    chip = arch.load_chip(path)
    assert chip.platform == "tpu" and chip.to_dict()["platform"] == "tpu"
    data["platform"] = "xla"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"platform must be one of cuda, rocm, gaudi, tpu, "
                                         r"neuron, got 'xla'"):
        arch.load_chip(path)
    del data["platform"]
    path.write_text(json.dumps(data))
    assert arch.load_chip(path).platform is None


def test_archs_lists_each_presets_platform(capsys):
    assert main(["archs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(ln for ln in lines if ln.startswith("name ") and "platform" in ln)
    col = header.index("platform")
    for name, platform in PLATFORM.items():
        row = next(ln for ln in lines[lines.index(header):] if ln.split()[0] == name)
        assert row[col:col + 8].strip() == (platform or "-"), name


def test_deepspeed_refuses_selective_with_flash():
    """Megatron-DeepSpeed's ParallelAttention checkpoints its unfused core only, so a plan
    priced with the fused kernel re-run (Megatron-Core's core_attn checkpoint) is not
    DeepSpeed's; without flash attention both trainers run the priced plan."""
    knobs = dict(_KNOBS, zero_stage=1)
    r = search.evaluate_point("llama3-70b", "h100-sxm", 8, 4, 4, 1, "selective", **knobs)
    assert r["trainers"] == ["megatron-lm"]
    assert r["not_launchable"]["deepspeed"].startswith(
        "Megatron-DeepSpeed does not checkpoint the flash-attention kernel")
    knobs["flash_attention"] = False
    r = search.evaluate_point("llama3-70b", "h100-sxm", 8, 4, 4, 1, "selective", **knobs)
    assert r["trainers"] == ["megatron-lm", "deepspeed"]
