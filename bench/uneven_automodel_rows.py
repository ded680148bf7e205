"""The NeMo AutoModel DeepSeek-V3 / Kimi K2 rows of phaze validate (issues 25, 27), priced
with AutoModel's uneven pipeline split: the row with the all-to-all dispatcher, with DeepEP
(the table's Kernel Optimizations column), and with DeepEP and without the MTP module
AutoModel's DeepSeek-V3 lacks. Run: python3 bench/uneven_automodel_rows.py"""
import dataclasses

import _bench_env  # noqa: F401  (the checkout on sys.path)
from phaze import models, step, validate
t = validate.load_table()
rows = {r['name']: r for r in t['rows']}
for n in ("automodel/deepseek-v3-671b/1024gpu-t1p4c1e64", "automodel/deepseek-v3-671b/256gpu-t1p4c1e64",
          "automodel/kimi-k2/256gpu-t1p8c1e32"):
    r = rows[n]
    m = models.get(r['model'])
    kw = dict(tensor_parallel=r['t'], pipeline_parallel=r['p'], data_parallel=r['d'],
              microbatch=r['microbatch'], global_batch=r['global_batch'],
              virtual_stages=r['virtual_stages'], recompute=r['recompute'], sequence_parallel=False,
              flash_attention=True, zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True,
              expert_parallel=r['ep'], pipeline_split="remainder_first")
    for lab, spec, extra in (("row as in the table", m, {}),
                             ("moe_dispatcher=deepep", m, dict(moe_dispatcher="deepep")),
                             ("deepep, no MTP", dataclasses.replace(m, mtp_layers=0), dict(moe_dispatcher="deepep"))):
        res = step.training_step(spec, r['arch'], **kw, **extra)
        b = res.breakdown
        print(f"{n:48s} {lab:22s} {res.time_s:7.2f} s vs {r['published_s']:6.2f} s  {100*(res.time_s/r['published_s']-1):+6.1f} %"
              f"  slot {b.slot_s:.3f} s f/b/r {b.forward_s:.3f}/{b.backward_s:.3f}/{b.recompute_s:.3f} crit {b.critical_stage} layers {step.stage_layers(m.n_layers, r['p'], r['virtual_stages'], False, 'remainder_first')}")

# AutoModel runs each gradient-accumulation step (GA = GBS / (LBS·DP), the table's) as a
# pipeline schedule of its own, LBS/MBS = 8 microbatches with its own fill and drain: the
# step priced as GA such runs, the optimizer once.
GA = {"automodel/deepseek-v3-671b/1024gpu-t1p4c1e64": 4,
      "automodel/deepseek-v3-671b/256gpu-t1p4c1e64": 1, "automodel/kimi-k2/256gpu-t1p8c1e32": 2}
for n, ga in GA.items():
    r = rows[n]
    kw = dict(tensor_parallel=1, pipeline_parallel=r['p'], data_parallel=r['d'], microbatch=1,
              virtual_stages=r['virtual_stages'], recompute='full', flash_attention=True,
              zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True,
              expert_parallel=r['ep'], pipeline_split="remainder_first", moe_dispatcher="deepep")
    one = step.training_step(r['model'], r['arch'], global_batch=r['global_batch'] // ga, **kw)
    est = ga * one.time_s - (ga - 1) * one.breakdown.optimizer_s
    print(f"{n:48s} GA {ga} runs of {r['global_batch'] // ga // r['d']} microbatches "
          f"{est:7.2f} s vs {r['published_s']:6.2f} s  {100 * (est / r['published_s'] - 1):+6.1f} %")
