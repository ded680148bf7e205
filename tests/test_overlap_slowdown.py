"""Compute beside a collective runs slower (issue 25): Lee et al., "Characterizing
Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning" (arXiv
2507.03114, 2025) measure an 18.9 % mean slowdown of the compute kernels while NCCL traffic
overlaps them. A collective of c seconds beside compute that outlasts it then costs
κ·c, κ = 0.189/1.189, instead of nothing; one that outlasts the compute costs its excess as
before. Checked on the formula, on the data-parallel reduction of one plan by hand (the
last bucket exposed, the buckets before it slowing the backward) and as a property."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from phaze import step
from phaze.step import _kernels as kern
from phaze.step import _layers

K = 0.189 / 1.189


def test_the_measured_slowdown():
    assert kern.OVERLAP_SLOWDOWN == 0.189
    assert _layers.OVERLAP_KAPPA == K
    # 1 ms of traffic beside 3 ms of GEMMs: the GEMMs finish 0.159 ms later
    assert _layers.overlap_exposed(1e-3, 3e-3) == pytest.approx(0.159e-3, rel=2e-3)
    # traffic that outlasts the compute: its excess, as without contention
    assert _layers.overlap_exposed(3e-3, 1e-3) == pytest.approx(2e-3, rel=1e-15)
    assert _layers.overlap_exposed(0.0, 1e-3) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_exposed_between_its_bounds(c, w):
    e = float(_layers.overlap_exposed(c, w))
    assert e >= c - w and e >= K * c
    assert e <= c + 1e-15                  # never more than running the traffic alone
    assert e == max(c - w, K * c)


H, FFN, KV, VOCAB, LAYERS = 4096, 14336, 1024, 128256, 32
#: llama3-8b's parameters (t = 1): the layers, the embedding, the head and the final norm.
N = LAYERS * (2 * H * H + 2 * H * KV + 3 * H * FFN + 2 * H) + 2 * VOCAB * H + H


def test_overlapped_all_reduce_by_hand():
    """ZeRO 0 over 16 H100 (2 nodes), 8 microbatches: with overlap_grad_reduce the last
    bucket (Megatron-Core's 40 M parameters of the stage's N) stays exposed, and the
    buckets before it, reduced beside the last microbatch's backward that outlasts them,
    slow it by κ of their seconds."""
    kw = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=16, microbatch=1,
              global_batch=128, recompute="full", flash_attention=True, zero_stage=0)
    off = step.training_step("llama3-8b", "h100-sxm", **kw)
    on = step.training_step("llama3-8b", "h100-sxm", overlap_grad_reduce=True, **kw)
    assert off.ok and on.ok
    red = off.breakdown.dp_allreduce_s
    assert red < on.breakdown.backward_s + on.breakdown.recompute_s   # the backward outlasts it
    frac = 4e7 / N
    want = frac * red + K * (red - frac * red)
    assert on.breakdown.dp_allreduce_s == pytest.approx(want, rel=1e-12)
    # 1.6 % of the step's gradients exposed, plus 15.9 % of the rest's seconds
    assert 0.16 < on.breakdown.dp_allreduce_s / red < 0.17
    assert math.isclose(on.time_s - off.time_s, on.breakdown.dp_allreduce_s - red,
                        rel_tol=1e-9)
