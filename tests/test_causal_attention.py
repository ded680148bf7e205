"""Causal flash attention at the causal work (issue 25, docs/fidelity-sources.md §1.5): the
flash kernel computes the key tiles up to and including the diagonal (128-row query tiles),
forward and backward, with or without context parallelism; encoders and the unfused core
compute the full square. Every expected number is computed by hand here."""
import pytest

from phaze import cost, graph, models
from phaze.arch import presets
from phaze.graph._ops import FLASH_CAUSAL_BLOCK, flash_keys


def _block(name, seq, b=1, t=1, **kw):
    m = models.get(name).with_(seq_len=seq)
    return m, graph.build_layers(m, b, t, **kw).kinds()["block"]


def test_keys_per_query_of_the_causal_tiles():
    assert FLASH_CAUSAL_BLOCK == 128
    # 32 query tiles of 128 rows: tile i computes (i + 1)·128 keys → 128·(1 + … + 32)·128 / 4096
    assert flash_keys(4096, True) == 128 * 128 * (32 * 33 // 2) // 4096 == (4096 + 128) // 2
    assert flash_keys(8192, True) == 4160
    # 1000 tokens: 7 full tiles and 104 rows that see every key; rounded up
    assert flash_keys(1000, True) == -(-(128 * 128 * 28 + 104 * 1000) // 1000) == 563
    # one tile (s ≤ 128) and every non-causal model: the full square
    assert flash_keys(100, True) == 100 and flash_keys(128, True) == 128
    assert flash_keys(4096, False) == 4096


def test_causal_flash_forward_and_backward_do_the_triangle_plus_the_diagonal_tiles():
    s, b = 4096, 2
    m, blk = _block("llama3-8b", s, b=b, flash_attention=True)
    f, g = blk.forward, blk.backward
    i, j = f.names.index("flash_attn"), g.names.index("flash_attn.bwd")
    keys = (s + 128) // 2
    assert tuple(f.dims[i]) == (b * m.heads, s, m.head_dim, 2 * keys)
    assert tuple(g.dims[j]) == (b * m.heads, s, m.head_dim, 5 * keys)
    # FLOPs: QKᵀ and P·V over the computed tiles = (s + 128)/(2s) of the square's 4·b·a·s²·d
    square = 4 * b * m.heads * s * s * m.head_dim
    assert f.flops[i] == square * (s + 128) // (2 * s) == 2 * b * m.heads * s * m.head_dim * 2 * keys
    assert g.flops[j] == 5 * square // 2 * (s + 128) // (2 * s)
    # the softmax runs over the computed scores only
    assert f.elements[i] == 2 * b * m.heads * s * keys
    assert g.elements[j] == 5 * b * m.heads * s * keys


def test_encoders_and_the_unfused_core_keep_the_full_square():
    s = 512
    m, blk = _block("bert-large", s, flash_attention=True)
    i = blk.forward.names.index("flash_attn")
    assert tuple(blk.forward.dims[i]) == (m.heads, s, m.head_dim, 2 * s)
    m, blk = _block("llama3-8b", 4096, kernels="megatron")
    i = blk.forward.names.index("attn_scores")
    assert tuple(blk.forward.dims[i]) == (m.heads, 4096, m.head_dim, 4096)


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_ranks_each_do_one_cp_th_of_the_causal_work(cp):
    s = 8192
    m, one = _block("llama3-8b", s, flash_attention=True)
    _, part = _block("llama3-8b", s, flash_attention=True, context_parallel=cp)
    for d, name in (("forward", "flash_attn"), ("backward", "flash_attn.bwd")):
        whole, rank = getattr(one, d), getattr(part, d)
        i, j = whole.names.index(name), rank.names.index(name)
        assert rank.dims[j][1] == s // cp
        assert rank.flops[j] * cp == whole.flops[i]          # load-balanced chunks: exact 1/cp
    # (s + 128)/2 keys per query, the same diagonal tiles as without context parallelism
    assert part.forward.dims[part.forward.names.index("flash_attn")][3] == 2 * (s + 128) // 2


def test_mla_flash_counts_the_causal_keys():
    s = 4096
    m, blk = _block("deepseek-v2-lite", s, flash_attention=True)
    f, g = blk.forward, blk.backward
    i, j = f.names.index("flash_attn"), g.names.index("flash_attn.bwd")
    assert f.dims[i][3] == g.dims[j][3] == (s + 128) // 2
    assert f.elements[i] == m.heads * s * (s + 128) // 2


def test_causal_flash_priced_at_about_half_of_the_square_on_h100():
    # compute-bound at 8K: the kernel's time is its tiles' time, (8192 + 128)/2 of 8192 keys
    s = 8192
    row = presets.get("h100-sxm")
    times = []
    for causal in (True, False):
        m = models.get("llama3-8b").with_(seq_len=s, causal=causal)
        blk = graph.build_layers(m, 1, 1, flash_attention=True).kinds()["block"]
        i = blk.forward.names.index("flash_attn")
        times.append(cost.op_latencies(blk.forward, row, model="calibrated",
                                       efficiency="h100-sxm")[1][i, 0])
    # tile and wave quantisation within 2 %
    assert times[0] / times[1] == pytest.approx((s + 128) / (2 * s), rel=0.02)
