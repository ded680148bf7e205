"""Megatron-Core's selective recomputation by module (``recompute_modules``, issue 25 item 5;
``phaze/graph/_recompute.py``): what each module re-runs and drops, by hand, and the step's
recompute seconds and activation bytes from them."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze import cli, graph, plan, step
from phaze.arch import efficiency, presets
from phaze.models import ModelSpec
from phaze.step import _model as _step_model
from phaze.step import _plans

A100 = efficiency.get("a100-80g")
ROW = presets.get("a100-80g")
DENSE = ModelSpec(name="gpt-8x512", n_layers=8, hidden=512, heads=8, kv_heads=8,
                  ffn_hidden=2048, vocab=1000, seq_len=256, activation="swiglu",
                  norm="rmsnorm", position="rotary", bias=False)
MLA = ModelSpec(name="mla-4x128", n_layers=4, hidden=128, heads=4, kv_heads=4, ffn_hidden=256,
                vocab=1024, seq_len=64, activation="swiglu", norm="rmsnorm",
                position="rotary", bias=False, tied_embeddings=False, n_experts=8,
                experts_per_token=2, expert_ffn_hidden=64, n_shared_experts=1,
                first_dense_layers=1, kv_lora_rank=64, q_lora_rank=96, qk_rope_head_dim=16,
                v_head_dim=24)


def test_canonical_spelling_and_refusal():
    assert graph.canonical_modules("mlp, core_attn") == "core_attn,mlp"
    assert graph.canonical_modules(["moe", "mla_up_proj", "moe"]) == "mla_up_proj,moe"
    assert plan.check("recompute_modules", "layernorm+moe_act") == "moe_act,layernorm"
    for bad in ("", "attn", 3, ["mlp", 1]):
        with pytest.raises(ValueError, match="^recompute_modules must be a non-empty set of "
                                             "core_attn, moe_act, layernorm"):
            plan.check("recompute_modules", bad)


def test_dense_mlp_module_by_hand():
    """t = 2 with sequence parallelism, b = 2, s = 256, h = 512, SwiGLU f = 2048, bf16: the
    checkpointed MLP keeps its input and drops the gate and up outputs (2·T·f/t · 2 B), the
    (fused) norm's output (Tn·h · 2 B) and fc2's input (T·f/t · 2 B)."""
    L = graph.build_layers(DENSE, 2, 2, sequence_parallel=True, flash_attention=True,
                           kernels="megatron").layers[1]
    ops, kept, a2a = L.selective("mlp")
    assert ops == ("ln2", "allgather_mlp", "fc1", "swiglu", "fc2", "reduce_scatter_mlp")
    assert not a2a
    T, Tn, f_t, h = 2 * 256, 2 * 256 // 2, 2048 // 2, 512
    assert L.stash("none") - kept == 2 * (2 * T * f_t) + 2 * (Tn * h + T * f_t)
    # with core_attn too: both drops; a dense layer's norms are fused (layernorm: nothing)
    both = L.selective("core_attn,mlp")[1]
    assert L.stash("none") - both == (L.stash("none") - kept) + (
        L.stash("none") - L.stash("selective"))
    assert L.selective("layernorm") == ((), L.stash("none"), False)
    assert L.selective("mla_up_proj,moe,moe_act,shared_experts")[1] == L.stash("none")


def _step(**kw):
    plan_ = dict(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, microbatch=2,
                 global_batch=16, sequence_parallel=True, flash_attention=True,
                 recompute="selective")
    plan_.update(kw)
    return step.training_step(DENSE, "a100-80g", **plan_)


def test_step_reruns_the_modules_ops_by_hand():
    """Stage 0 of p = 2 holds 4 of the 8 layers and 2 microbatches in flight: the recompute
    seconds are 4 × the MLP operators' forward seconds (each operator as the step prices
    it); the activations drop 2 × 4 × the MLP's bytes; the workspace is one layer's."""
    base = _step(recompute="none")
    r = _step(recompute_modules="mlp")
    assert r.plan["recompute_modules"] == "mlp"
    L = graph.build_layers(DENSE, 2, 2, sequence_parallel=True, flash_attention=True,
                           kernels="megatron").layers[1]
    sec, index = _step_model._op_seconds(L.forward, ROW, A100, 2)
    ops = L.selective("mlp")[0]
    assert r.breakdown.recompute_s == pytest.approx(4 * sum(sec[index[n]] for n in ops),
                                                    rel=1e-12)
    drop = L.stash("none") - L.selective("mlp")[1]
    assert base.memory[0].activations - r.memory[0].activations == 2 * 4 * drop
    assert r.memory[0].workspace == drop
    # other recomputation modes ignore the modules
    for mode in ("none", "full"):
        assert _step(recompute=mode, recompute_modules="mlp").time_s == \
            _step(recompute=mode).time_s


def test_mla_up_proj_and_layernorm_by_hand():
    """MLA with q_lora 96, kv_lora 64, 4 heads of qk = 32 + 16, v = 24, b = 1, s = 64, t = 1:
    mla_up_proj re-runs the up-projections (with their fused latent norms) and the rotary
    embedding and drops Q, K, V per head and the up-projections' inputs; layernorm the
    separate input norm's output (and, in the MoE layers, the pre-MLP norm's)."""
    mg = graph.build_layers(MLA, 1, 1, flash_attention=True, kernels="megatron")
    kinds = mg.kinds()
    T, a, qk, vd = 64, 4, 32 + 16, 24
    for kind in ("block", "moe_block"):
        L = kinds[kind]
        ops, kept, _ = L.selective("mla_up_proj")
        assert ops == ("q_a_norm", "q_b_proj", "kv_a_norm", "kv_b_proj", "rotary")
        assert L.stash("none") - kept == 2 * T * a * (2 * qk + vd) + 2 * T * (96 + 64)
        ops, kept, _ = L.selective("layernorm")
        norm = 2 * T * 128
        assert L.stash("none") - kept == (norm if kind == "block" else 2 * norm)
        assert ops == (("ln1",) if kind == "block" else ("ln1", "ln2"))


def test_moe_modules_by_hand_and_the_all_to_alls_rerun():
    """The MoE layer (8 experts of 64 columns, top 2, one shared expert of 64): moe_act
    drops the experts' activation output (local experts × their tokens × 64 columns × 2 B);
    shared_experts the shared MLP's stash; moe the whole layer's stash but the norm's input,
    output and the residual mask, and re-sends its forward all-to-alls in the backward;
    moe covers moe_act and shared_experts."""
    mg = graph.build_layers(MLA, 1, 1, flash_attention=True, kernels="megatron",
                            expert_parallel=2)
    L = mg.kinds()["moe_block"]
    T, h = 64, 128
    rows = 2 * -(-T * 2 // 8)             # ep × tokens per expert (balanced routing)
    ops, kept, a2a = L.selective("moe_act")
    assert ops == ("expert_swiglu",) and not a2a
    assert L.stash("none") - kept == 2 * (8 // 2) * rows * 64
    ops, kept, _ = L.selective("shared_experts")
    assert set(ops) == {"shared_gate_proj", "shared_up_proj", "shared_swiglu", "shared_fc2"}
    assert L.stash("none") - kept == 2 * 2 * T * 64 + 2 * T * 64
    ops, moe_kept, a2a = L.selective("moe")
    assert a2a and ops[0] == "router" and ops[-1] == "moe_combine"
    assert L.selective("moe,moe_act,shared_experts")[1] == moe_kept
    sizes = {m: _plans.variant_sizes(mg, MLA, "selective", m)[0] for m in ("core_attn", "moe")}
    q = [k.kind for k in mg.block_kinds()].index("moe_block")
    n_f, n_b = int(sizes["core_attn"]["k_a2a_f_n"][q]), int(sizes["core_attn"]["k_a2a_b_n"][q])
    assert n_f > 0 and int(sizes["moe"]["k_a2a_b_n"][q]) == n_b + n_f
    assert int(_plans.variant_sizes(mg, MLA, "none", "moe")[0]["k_a2a_b_n"][q]) == n_b


def test_search_prices_the_modules_as_the_step_does():
    """A layer table built with the modules prices its best plan exactly as training_step
    prices that plan."""
    table = step.layer_table(DENSE, ROW, microbatch=2, tensor_parallel=(2,),
                             sequence_parallel=(True,), flash_attention=(True,),
                             recompute_modules="mlp,core_attn")
    best = table.best_plans(devices=8, global_batch=16, recompute="selective")[0]
    assert best["feasible"]
    r = step.training_step(DENSE, "a100-80g", tensor_parallel=int(best["tensor_parallel"]),
                           pipeline_parallel=int(best["pipeline_parallel"]),
                           data_parallel=int(best["data_parallel"]), microbatch=2,
                           global_batch=16, recompute="selective",
                           recompute_modules="core_attn,mlp", sequence_parallel=True,
                           flash_attention=True, zero_stage=int(best["zero_stage"]),
                           virtual_stages=int(best["virtual_stages"]),
                           overlap_grad_reduce=bool(best["overlap_grad_reduce"]),
                           overlap_param_gather=bool(best["overlap_param_gather"]),
                           account_for_embedding=bool(best["account_for_embedding"]))
    assert float(best["time_s"]) == pytest.approx(r.time_s, rel=1e-12)
    default = step.layer_table(DENSE, ROW, microbatch=2, tensor_parallel=(2,),
                               sequence_parallel=(True,), flash_attention=(True,))
    assert default.best_plans(devices=8, global_batch=16, recompute="selective")[0][
        "time_s"] < best["time_s"]


def test_emit_and_trainers(capsys):
    args = ["evaluate", "--model", "llama3-8b", "--arch", "h100-sxm", "--tp", "4", "--pp", "1",
            "--dp", "2", "--global-batch", "64", "--flash-attention", "--sequence-parallel",
            "--recompute", "selective", "--calibrated"]
    assert cli.main(args + ["--recompute-modules", "mlp,core_attn", "--emit", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "--recompute-granularity selective" in out
    assert "--recompute-modules core_attn mlp" in out
    assert cli.main(args + ["--emit", "megatron"]) == 0
    assert "--recompute-modules" not in capsys.readouterr().out      # the default: no flag
    assert cli.main(args + ["--recompute-modules", "mlp", "--emit", "torchtitan"]) == 2
    assert "torchtitan has no selective recomputation by module" in capsys.readouterr().err
    r = _step(recompute_modules="mlp", flash_attention=False)
    assert r.plan["trainers"] == ("megatron-lm",)


def test_flag_in_the_study_model_is_refused(capsys):
    assert cli.main(["evaluate", "--model", "opt-350m", "--arch", "a100-80g", "--tp", "1",
                     "--pp", "1", "--dp", "1", "--recompute-modules", "mlp", "--study"]) == 2
    assert "--recompute-modules is a knob of the calibrated" in capsys.readouterr().err
    assert cli.main(["search", "--model", "opt-350m", "--devices", "8", "--study",
                     "--recompute-modules", "mlp"]) == 2
    assert "--recompute-modules is a knob of the calibrated" in capsys.readouterr().err


@settings(max_examples=40, deadline=None)
@given(a=st.sets(st.sampled_from(graph.RECOMPUTE_MODULES), min_size=1),
       b=st.sets(st.sampled_from(graph.RECOMPUTE_MODULES), min_size=1),
       t=st.sampled_from([1, 2]), flash=st.booleans())
def test_more_modules_rerun_more_and_keep_less(a, b, t, flash):
    """For every layer kind of an MLA + MoE model and a dense one: the modules' union re-runs
    a superset of either's operators and keeps at most either's stash, never below the
    layer's input nor above its stash without recomputation."""
    A, U = graph.canonical_modules(sorted(a)), graph.canonical_modules(sorted(a | b))
    for m in (DENSE, MLA):
        mg = graph.build_layers(m, 1, t, sequence_parallel=t > 1, flash_attention=flash,
                                kernels="megatron")
        for L in mg.block_kinds():
            ops_a, kept_a, a2a_a = L.selective(A)
            ops_u, kept_u, a2a_u = L.selective(U)
            assert set(ops_a) <= set(ops_u) and set(ops_u) <= set(L.forward.names)
            assert L.stash("full") <= kept_u <= kept_a <= L.stash("none")
            assert a2a_u >= a2a_a
