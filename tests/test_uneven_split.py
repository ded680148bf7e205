"""Uneven pipeline splits as torchtitan and NeMo AutoModel cut them (issues 25 and 27;
``pipeline_split="remainder_first"``): torchtitan's _generate_llm_fqn_per_model_part
(torchtitan/distributed/pipeline_parallel.py) splits U = L + first_stage_less_layers +
last_stage_less_layers units over the p·v chunks, the first U mod (p·v) chunks one unit
more, the first and last chunk w layers fewer (w = 1 with ``account_for_embedding``);
NeMo AutoModel's generate_hf_model_fqn_per_model_part (nemo_automodel/components/
distributed/pipelining/functional.py) is the same with w = 0. Layer counts by hand, the
memory of the stages, the kernels against their mirror (tests/naive_step.py) bit for bit,
the launch arguments and the validation rows it lets phaze price."""
import dataclasses

import numpy as np
import pytest

import naive_step
from phaze import launch, models, plan, step, validate
from phaze.arch import make_archs, presets
from phaze.models import ModelSpec
from phaze.step import _kernels as kern
from phaze.step import _layers, _plans

RF = "remainder_first"


def test_61_layers_over_16_and_32_chunks_by_hand():
    # torchtitan (w = 1), 16 chunks: 63 units = 16·3 + 15: chunks 0..14 hold 4 units,
    # chunk 15 holds 3; chunk 0 gives one to the embedding, chunk 15 one to the head.
    assert step.stage_layers(61, 16, 1, True, RF) == [3] + [4] * 14 + [2]
    # the same 16 chunks as p = 8, v = 2: device r runs chunks r and r + 8
    assert step.stage_layers(61, 8, 2, True, RF) == [3 + 4] + [8] * 6 + [4 + 2]
    # AutoModel (w = 0), 16 chunks: 61 = 16·3 + 13: the first 13 chunks hold 4 layers
    assert step.stage_layers(61, 16, 1, False, RF) == [4] * 13 + [3] * 3
    # 32 chunks, p = 4, v = 8 (the DeepSeek-V3 rows): AutoModel 61 = 32·1 + 29, chunks
    # 0..28 hold 2; device r holds chunks r, r + 4, ..., r + 28
    assert step.stage_layers(61, 4, 8, False, RF) == [8 * 2, 7 * 2 + 1, 7 * 2 + 1, 7 * 2 + 1]
    # p = 8, v = 4 (the Kimi K2 row): chunk r + 24 holds 2 layers for r < 5
    assert step.stage_layers(61, 8, 4, False, RF) == [8] * 5 + [7] * 3
    # torchtitan, 32 chunks: 63 = 32·1 + 31: chunk 0 = embedding + 1 layer, chunks 1..30
    # 2 layers, chunk 31 the head alone
    assert step.stage_layers(61, 4, 8, True, RF) == [1 + 7 * 2, 16, 16, 7 * 2 + 0]
    for p, v, ae in ((16, 1, True), (16, 1, False), (4, 8, False), (8, 4, False), (4, 8, True)):
        assert sum(step.stage_layers(61, p, v, ae, RF)) == 61


def test_small_model_and_the_even_splits_agree():
    # 10 layers over 4: AutoModel [3, 3, 2, 2]; torchtitan 12 units of 3, [2, 3, 3, 2]
    assert step.stage_layers(10, 4, 1, False, RF) == [3, 3, 2, 2]
    assert step.stage_layers(10, 4, 1, True, RF) == [2, 3, 3, 2]
    # where the units divide, remainder_first is the even split (Megatron's)
    assert step.stage_layers(96, 8, 1, False, RF) == step.stage_layers(96, 8) == [12] * 8
    assert step.stage_layers(126, 16, 1, True, RF) == step.stage_layers(126, 16, 1, True)
    assert step.stage_layers(7, 1, 1, True, RF) == [7]


def test_refusals():
    with pytest.raises(ValueError, match="remainder_first"):
        step.stage_layers(61, 4, 1)                       # the even split names the way out
    with pytest.raises(ValueError, match="per chunk"):
        step.stage_layers(61, 16, 4, True, RF)            # 63 units over 64 chunks
    with pytest.raises(ValueError, match="per chunk"):
        step.stage_layers(61, 31, 2, False, RF)           # 61 layers over 62 chunks
    with pytest.raises(ValueError, match="pipeline_split"):
        plan.check("pipeline_split", "uneven")


#: A dense model whose transformer layers are all alike: a stage's layer state is its
#: layer count times one layer's.
DENSE = ModelSpec(name="tiny-dense10", n_layers=10, hidden=64, heads=4, kv_heads=4,
                  ffn_hidden=256, vocab=512, seq_len=128, activation="swiglu",
                  norm="rmsnorm", position="rotary", bias=False, tied_embeddings=False)
KW = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=1, microbatch=1,
          global_batch=8, recompute="full", flash_attention=True)


@pytest.mark.parametrize("ae,counts", [(False, [3, 3, 2, 2]), (True, [2, 3, 3, 2])])
def test_stage_memory_follows_the_layer_counts(ae, counts):
    even = step.training_step(DENSE, "h100-sxm", **KW)
    assert even.status == "infeasible" and RF in even.reason
    r = step.training_step(DENSE, "h100-sxm", account_for_embedding=ae, pipeline_split=RF,
                           **KW)
    assert r.ok, r.reason
    state = [m.layer_param_state for m in r.memory]
    # one layer: q, k, v, o 4·64·64 + SwiGLU 3·64·256 + two RMSNorms 2·64 = 65,664
    # parameters, each 2 B of bf16 weight + 4 B of fp32 gradient + 12 B of Adam state
    one = (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) * (2 + 4 + 12)
    assert state == [c * one for c in counts]
    # the heaviest stage holds the most layers, the first of them when two tie (the
    # embedding's stash and its parameters go to stage 0)
    peak = r.peak_memory
    assert peak.total == max(m.total for m in r.memory)
    assert peak.layer_param_state == max(counts) * one
    assert peak.stage == counts.index(max(counts))


def _rows():
    return np.concatenate([presets.get("h100-sxm"),
                           make_archs(base="h100-sxm", node_size=2, net_gb_per_s=12.5)])


MTP5 = ModelSpec(
    name="tiny-mtp5", n_layers=5, hidden=64, heads=4, kv_heads=4, ffn_hidden=256, vocab=500,
    seq_len=128, activation="swiglu", norm="rmsnorm", position="rotary", bias=False,
    tied_embeddings=False, n_experts=4, experts_per_token=2, expert_ffn_hidden=64,
    n_shared_experts=1, first_dense_layers=1, mtp_layers=1)


@pytest.mark.parametrize("m", [DENSE, MTP5], ids=lambda m: m.name)
def test_kernels_equal_their_mirror_on_uneven_splits(m):
    rows = _rows()
    table = _plans.layer_table(m, rows, microbatch=1, tensor_parallel=(1,))
    prefix = _layers.kind_prefix(m)
    L = m.n_layers
    for recompute in ("none", "full"):
        sizes = table.sizes(recompute)
        for vi, (t, sp, _f, cp, ep, _mg) in enumerate(table.variants):
            for p, v in ((2, 1), (3, 1), (4, 1), (2, 2), (3, 2)):
                for acct in (2, 3):
                    if (L + 2 * (acct & 1)) // (p * v) < 1 or (cp * 2) % ep:
                        continue
                    pl = _layers.plan_records(p, t, 2, cp, ep, v, 2 * p, L, 3, True,
                                              recompute, sp, table.precision, "fp32", True,
                                              True, acct).reshape(1)
                    for row in range(rows.shape[0]):
                        ns = int(rows["node_size"][row])
                        stages = np.zeros(p, dtype=kern.STAGE_NODES)
                        cell = np.zeros(1, dtype=kern.CELL_NODES)
                        kern.stage_geometry(p, t, 2, cp, ep, ns, stages, cell)
                        slots, slots_n = np.empty((p, 6)), np.empty((p, 6))
                        bd, bd_n = (np.zeros(1, dtype=kern.BREAKDOWN) for _ in range(2))
                        lt = table.times[vi, row:row + 1]
                        rp = table.rp[row:row + 1]
                        got = kern.step_time(pl, cell, stages, lt, rp, sizes[vi:vi + 1],
                                             prefix, slots, bd)
                        want = naive_step.step_time(pl[0], cell[0], stages, lt[0], rp[0],
                                                    sizes[vi], prefix, slots_n, bd_n[0])
                        assert got == want and bd.tobytes() == bd_n.tobytes()
                        mem, mem_n = (np.zeros(1, dtype=kern.MEMORY) for _ in range(2))
                        for r in range(p):
                            assert kern.stage_memory(r, pl, sizes[vi:vi + 1], prefix, mem) \
                                == naive_step.stage_memory(r, pl[0], sizes[vi], prefix,
                                                           mem_n[0])
                            assert mem.tobytes() == mem_n.tobytes()
                        # the layer counts the kernels price are stage_layers'
                        want_counts = step.stage_layers(L, p, v, bool(acct & 1), RF)
                        sz = sizes[vi]
                        got_counts = [sum(naive_step.stage_kinds(r, p, v, L, prefix, acct, sz))
                                      - (int(sz["mtp_n"]) if r == p - 1 else 0)
                                      for r in range(p)]
                        assert got_counts == want_counts


def _tt_parallelism(**kw):
    import tomllib

    text = launch.emit("torchtitan", "llama3.1-405b", **kw)
    text = text if isinstance(text, str) else "\n".join(map(str, text))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return tomllib.loads(body)["parallelism"]


def test_torchtitan_writes_the_uneven_split():
    kw = dict(tensor_parallel=8, pipeline_parallel=16, data_parallel=4, microbatch=1,
              global_batch=64, recompute="full", flash_attention=True, sequence_parallel=True,
              zero_stage=3, pipeline_split=RF)
    # 126 layers over 16 stages, embedding and head not counted: torchtitan makes
    # ceil(126 / 8) = 16 stages of 8, 8, ..., 7, 7 (126 = 16·7 + 14)
    assert step.stage_layers(126, 16, 1, False, RF) == [8] * 14 + [7] * 2
    par = _tt_parallelism(**kw)
    assert par["pipeline_parallel_layers_per_stage"] == 8
    assert par["pipeline_parallel_first_stage_less_layers"] == 0
    assert par["pipeline_parallel_last_stage_less_layers"] == 0
    with pytest.raises(launch.NotLaunchable) as err:
        launch.megatron_arguments("llama3.1-405b", **kw)
    assert "Megatron-LM" in str(err.value)   # it splits evenly
    # 128 units over p·v = 24 chunks: layers_per_stage 6 makes 22 stages, 5 makes 26
    bad = dict(kw, pipeline_parallel=8, data_parallel=8, virtual_stages=3,
               account_for_embedding=True)
    with pytest.raises(launch.NotLaunchable) as err:
        _tt_parallelism(**bad)
    assert "layers_per_stage" in str(err.value)


def test_validate_prices_the_automodel_rows_with_their_split():
    rep = validate.run()
    rows = {r["name"]: r for r in rep.rows}
    for name in ("automodel/deepseek-v3-671b/1024gpu-t1p4c1e64",
                 "automodel/deepseek-v3-671b/256gpu-t1p4c1e64",
                 "automodel/kimi-k2/256gpu-t1p8c1e32"):
        r = rows[name]
        assert r["config"]["pipeline_split"] == RF
        assert r["predicted_s"] is not None, r["reason"]
    assert all(r["config"]["pipeline_split"] == "even" for r in rep.rows
               if r["trainer"] not in validate.TRAINER_SPLITS)


def test_megatron_and_deepspeed_refuse_the_same_uneven_remainder_first_splits():
    # both cut equal chunks: each refuses remainder_first exactly where U mod (p·v) ≠ 0
    # (U = L, + 2 with account_for_embedding), and Megatron's sentence names the remainder
    rules = {r.trainer: r for r in plan.RULES if r.trainer in ("megatron-lm", "deepspeed")
             and "pipeline_split" in r.knobs}
    assert set(rules) == {"megatron-lm", "deepspeed"}
    for L, p, v, ae, split in ((61, 4, 1, False, RF), (61, 4, 1, True, RF), (62, 4, 1, True, RF),
                               (60, 4, 1, False, RF), (61, 8, 2, False, RF),
                               (61, 1, 1, False, RF), (61, 4, 1, False, "even")):
        vals = dict(n_layers=L, pipeline_parallel=p, virtual_stages=v,
                    account_for_embedding=ae, pipeline_split=split)
        rem = (L + 2 * ae) % (p * v) if p > 1 and split == RF else 0
        for rule in rules.values():
            assert bool(rule.refuses(vals)) == (rem > 0), (rule.trainer, vals)
        if rem:
            assert f"gives the first {rem} of the {p * v} chunks" in rules["megatron-lm"].why(vals)
